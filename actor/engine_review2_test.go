package actor_test

import (
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tickfence/tickfence/actor"
)

// An instance whose ticks take longer than its period (an overloaded dungeon: 15 ms per tick at
// 100 Hz) always owes a tick when it finishes one, so the worker that claimed it never leaves it:
// the instances claimed after it in the same chunk never tick again (every period of theirs is
// owed to that worker, then dropped as skipped), though three workers sit idle. Before 8b39cdf
// the slow instance's overdue ticks were skipped and its chunk-mates ticked every period.
// Ticks() is not updated either, since runChunk only adds at its end.
func TestEngineReview2SlowInstanceStarvesItsChunkForever(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, err := actor.NewEngine(actor.EngineConfig{Rate: 100, Slot: 10 * time.Millisecond, Workers: 4, TimerWorkers: 4})
		if err != nil {
			t.Fatal(err)
		}
		slow := &countTicker{sleep: 15 * time.Millisecond}
		steady := &countTicker{}
		e.Add(slow) // one bucket: both in one chunk, slow first
		e.Add(steady)
		time.Sleep(time.Second)
		s, n, ticks := steady.n.Load(), slow.n.Load(), e.Ticks()
		e.Stop()
		t.Logf("in 1 s: steady %d ticks, slow %d, engine counted %d, skipped %d", s, n, ticks, e.Skipped())
		if s < 50 {
			t.Errorf("steady instance ticked %d times in 100 periods: starved behind a slow chunk-mate", s)
		}
		if ticks < uint64(s+n)/2 {
			t.Errorf("engine counted %d ticks while the instances ran %d", ticks, s+n)
		}
	})
}

// Workers: 40, TimerWorkers: 8 gives called-in workers j = 0..31; the fallback period
// Slot<<min(j+1, 30) overflows int64 for Slot = 10 s (Rate 0.1): 10 s << 30 wraps negative, so
// min(…, period) is negative, the fallback timer fires at once, and those workers spin forever on
// an idle engine.
func TestEngineReview2FallbackShiftOverflowSpins(t *testing.T) {
	e, err := actor.NewEngine(actor.EngineConfig{Rate: 0.1, Slot: 10 * time.Second, Workers: 40, TimerWorkers: 8})
	if err != nil {
		t.Fatal(err)
	}
	var before, after syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	time.Sleep(300 * time.Millisecond)
	syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	e.Stop()
	cpu := time.Duration(syscall.TimevalToNsec(after.Utime)+syscall.TimevalToNsec(after.Stime)) -
		time.Duration(syscall.TimevalToNsec(before.Utime)+syscall.TimevalToNsec(before.Stime))
	if cpu > 100*time.Millisecond {
		t.Errorf("an idle engine with no instances used %v of CPU in 300 ms", cpu)
	}
}

// Invariant (3): every period due is ticked or counted as skipped. An instance stalled in its tick
// due at 20 ms until 105 ms has had 10 periods due (10 … 100 ms); it ticked 2, the engine dropped
// and counted 6 owed ones, and Remove dropped the last 2 owed (90, 100 ms) without counting them.
func TestEngineReview2RemoveDropsOwedUncounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, _ := actor.NewEngine(actor.EngineConfig{Rate: 100, Workers: 4, TimerWorkers: 4})
		r := &removeTicker{e: e, gate: make(chan struct{})}
		r.h = e.Add(r)
		time.Sleep(105 * time.Millisecond)
		close(r.gate)
		synctest.Wait()
		e.Stop()
		if got := e.Ticks() + e.Skipped(); got != 10 {
			t.Errorf("ticked %d + skipped %d = %d of the 10 periods due before Remove", e.Ticks(), e.Skipped(), got)
		}
	})
}
