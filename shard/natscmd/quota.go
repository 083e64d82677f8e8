package natscmd

import (
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Quota bounds what one untrusted sender (a player, an untrusted gateway: actor.Sender) may ask
// of one node, so that one credential cannot take the capacity others need (DESIGN 9). Trusted
// senders are not limited here: admission control (busy) protects the node from them. Each node
// counts on its own: a sender whose instances live on k nodes gets k times these.
type Quota struct {
	// Commands per second, and the burst above it (0: no limit).
	Commands float64
	Burst    int
	// Creates per minute, and the burst above it (0: no limit).
	CreatesPerMinute float64
	CreateBurst      int
}

// DefaultQuota is a player's: 50 commands per second (bursts of 100), 6 instances created per
// minute (bursts of 10).
var DefaultQuota = Quota{Commands: 50, Burst: 100, CreatesPerMinute: 6, CreateBurst: 10}

func (q Quota) String() string {
	return fmt.Sprintf("%g commands/s, bursts of %d; %g creates/min, bursts of %d", q.Commands, q.Burst, q.CreatesPerMinute, q.CreateBurst)
}

// quotas are the senders' token buckets, forgotten a minute after their last use.
type quotas struct {
	mu      sync.Mutex
	q       Quota
	senders map[string]*senderQuota
	swept   time.Time
}

type senderQuota struct {
	cmds, creates *rate.Limiter
	used          time.Time
}

// allow takes one command (if cmd) and one create (if create) from key's buckets at now; false
// with the time to wait when either is empty (nothing is taken then).
func (qs *quotas) allow(q Quota, key string, cmd, create bool, now time.Time) (bool, time.Duration) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if qs.senders == nil {
		qs.senders = map[string]*senderQuota{}
	}
	if q != qs.q { // changed since: start over
		qs.q, qs.senders = q, map[string]*senderQuota{}
	}
	if now.Sub(qs.swept) > time.Minute {
		for k, s := range qs.senders {
			if now.Sub(s.used) > time.Minute {
				delete(qs.senders, k)
			}
		}
		qs.swept = now
	}
	s := qs.senders[key]
	if s == nil {
		s = &senderQuota{}
		if qs.q.Commands > 0 {
			s.cmds = rate.NewLimiter(rate.Limit(qs.q.Commands), max(qs.q.Burst, 1))
		}
		if qs.q.CreatesPerMinute > 0 {
			s.creates = rate.NewLimiter(rate.Limit(qs.q.CreatesPerMinute/60), max(qs.q.CreateBurst, 1))
		}
		qs.senders[key] = s
	}
	// A sender's clock never goes back: charged at an earlier time than before (an arrival
	// estimated back from the queue's wait, between commands charged at now), the limiter would
	// move its clock back and credit the gap again at the next later time — a quota refilled at
	// will (review of issue 35).
	now = later(now, s.used)
	s.used = now
	var wait time.Duration
	var rc, rk *rate.Reservation
	if cmd && s.cmds != nil {
		rc = s.cmds.ReserveN(now, 1)
		wait = rc.DelayFrom(now)
	}
	if create && s.creates != nil {
		rk = s.creates.ReserveN(now, 1)
		wait = max(wait, rk.DelayFrom(now))
	}
	if wait == 0 {
		return true, 0
	}
	if rc != nil {
		rc.CancelAt(now)
	}
	if rk != nil {
		rk.CancelAt(now)
	}
	return false, wait
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
