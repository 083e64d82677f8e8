package actor_test

import (
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
