package actor

import (
	"testing"
	"time"
)

// A called-in worker's own timer is 2^(j+1) slots, at most a period, and never overflows into a
// negative interval (a timer that fires at once: a busy loop on an idle engine).
func TestFallbackEvery(t *testing.T) {
	for _, tc := range []struct {
		slot, period time.Duration
		j            int
		want         time.Duration
	}{
		{500 * time.Microsecond, 50 * time.Millisecond, 0, time.Millisecond},
		{500 * time.Microsecond, 50 * time.Millisecond, 2, 4 * time.Millisecond},
		{500 * time.Microsecond, 50 * time.Millisecond, 40, 50 * time.Millisecond},
		{10 * time.Second, 10 * time.Second, 31, 10 * time.Second}, // 10 s << 30 would wrap
		{time.Second, 1000 * time.Second, 1 << 20, 1000 * time.Second},
	} {
		if got := fallbackEvery(tc.slot, tc.period, tc.j); got != tc.want {
			t.Errorf("fallbackEvery(%v, %v, %d) = %v, want %v", tc.slot, tc.period, tc.j, got, tc.want)
		}
	}
}
