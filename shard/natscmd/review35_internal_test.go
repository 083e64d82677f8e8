package natscmd

import (
	"testing"
	"time"
)

// Review 35: a player's interest messages are charged at their estimated arrival (received, which
// lies in the past by the estimated queue wait), its commands at time.Now(). A token bucket fed
// times that go back and forth refills: rate.Limiter moves its clock back to an earlier time and
// credits the whole gap again at the next later one.
func TestReview35QuotaTimesGoingBack(t *testing.T) {
	var qs quotas
	q := Quota{Commands: 50, Burst: 100}
	now := time.Now()
	allowed := 0
	for i := range 1000 {
		at := now.Add(time.Duration(i) * time.Microsecond) // 1000 messages within 1 ms
		if i%2 == 0 {
			at = at.Add(-200 * time.Millisecond) // an interest that waited 200 ms in the queue
		}
		if ok, _ := qs.allow(q, "p", true, false, at); ok {
			allowed++
		}
	}
	// In 1 ms (plus the 200 ms the oldest arrival claims), at most the burst and 50/s of it.
	if allowed > 100+11 {
		t.Errorf("%d of 1000 messages within 1 ms allowed, want at most ~110 (burst 100 at 50/s)", allowed)
	}
}
