package actor_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/tickfence/tickfence/actor"
)

// Review finding: Engine.Ticks is "the number of ticks run so far". Since the engine counts ticks once per chunk,
// a worker that keeps ticking an instance whose ticks overrun its period (the next one is owed
// while it runs, so runChunk never leaves that instance) never adds its ticks: Ticks() stays at 0
// while the instance has ticked dozens of times (tickd's summary then reports no ticks/s).
func TestTicksCountedWhileAnInstanceOverruns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, err := actor.NewEngine(actor.EngineConfig{Rate: 100, Workers: 2, MaxCatchUp: 2})
		if err != nil {
			t.Fatal(err)
		}
		slow := &countTicker{sleep: 15 * time.Millisecond} // 1.5 periods per tick
		e.Add(slow)
		time.Sleep(time.Second)
		ran, counted := slow.n.Load(), e.Ticks()
		e.Stop()
		t.Logf("after 1 s: instance ticked %d times, Engine.Ticks() = %d; after Stop: %d", ran, counted, e.Ticks())
		if counted+1 < uint64(ran) {
			t.Errorf("instance ticked %d times, Engine.Ticks() = %d", ran, counted)
		}
	})
}
