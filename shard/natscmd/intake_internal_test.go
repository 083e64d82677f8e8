package natscmd

import (
	"testing"
	"time"
)

// A standing queue: commands arrive at 1 000/s and are handled at 500/s, so the queue grows and
// each command has waited longer than the last. The estimate (none until a whole window has been
// measured) follows the real wait within a few percent.
func TestIntakeFollowsAStandingQueue(t *testing.T) {
	var q intake
	t0 := time.Unix(1000, 0)
	const arrive, handle = 1000.0, 500.0
	for k := 1; k <= 500; k++ { // the k-th command
		now := t0.Add(time.Duration(float64(k) / handle * float64(time.Second)))
		arrivedBy := uint64(now.Sub(t0).Seconds() * arrive)
		real := now.Sub(t0.Add(time.Duration(float64(k) / arrive * float64(time.Second))))
		got := q.wait(now, uint64(k), arrivedBy-uint64(k))
		if now.Sub(t0) <= intakeWindow {
			if got != 0 {
				t.Fatalf("command %d: estimate %v before a window was measured", k, got)
			}
			continue
		}
		if d := got - real; d < -real/20 || d > real/20 {
			t.Fatalf("command %d: estimated %v, waited %v", k, got, real)
		}
	}
}

// An idle subscription, then a burst: the commands behind the first arrived within a millisecond,
// so they wait little, and a rate measured across the idle gap (a low one) must not make the wait
// look long. The queue emptying forgets the rate: no estimate until a new window is measured.
func TestIntakeAfterAnIdleGapEstimatesNothing(t *testing.T) {
	var q intake
	t0 := time.Unix(1000, 0)
	// A standing queue first, so a rate is known.
	for k := 1; k <= 100; k++ {
		q.wait(t0.Add(time.Duration(k)*time.Millisecond), uint64(k), 50)
	}
	if q.rate == 0 {
		t.Fatal("no rate measured over a standing queue")
	}
	// It empties, ten idle seconds pass, 200 commands arrive at once.
	q.wait(t0.Add(101*time.Millisecond), 101, 0)
	for k := 102; k <= 300; k++ {
		now := t0.Add(10*time.Second + time.Duration(k-101)*10*time.Microsecond)
		if got := q.wait(now, uint64(k), uint64(300-k)); got != 0 {
			t.Fatalf("command %d of a burst after an idle gap: estimated %v", k, got)
		}
	}
}
