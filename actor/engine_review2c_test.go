package actor_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tickfence/tickfence/actor"
)

type selfRemover struct {
	e       *actor.Engine
	h       atomic.Pointer[actor.Handle]
	n       atomic.Int64
	removed atomic.Bool
	after   atomic.Int64 // ticks started after Remove returned
	busy    atomic.Bool
	overlap atomic.Bool
}

func (s *selfRemover) Tick(time.Time) {
	if s.busy.Swap(true) {
		s.overlap.Store(true)
	}
	if s.removed.Load() {
		s.after.Add(1)
	}
	if s.n.Add(1) == 3 {
		s.e.Remove(s.h.Load())
		s.e.Remove(s.h.Load())
		s.removed.Store(true)
	}
	s.busy.Store(false)
}

func TestEngineReview2ConcurrentAddRemove(t *testing.T) {
	e, _ := actor.NewEngine(actor.EngineConfig{Rate: 200, Slot: 500 * time.Microsecond, Workers: 8, TimerWorkers: 2})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var all sync.Map
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				s := &selfRemover{e: e}
				var h *actor.Handle
				if i%2 == 0 {
					h = e.AddInPhase(s, uint64(g))
				} else {
					h = e.Add(s)
				}
				s.h.Store(h)
				all.Store(s, true)
				if i%3 == 0 {
					e.Remove(h)
					s.removed.Store(true)
				}
				time.Sleep(50 * time.Microsecond)
			}
		}()
	}
	time.Sleep(400 * time.Millisecond)
	close(stop)
	wg.Wait()
	done := make(chan struct{})
	go func() { e.Stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Stop hung")
	}
	var n, after int
	all.Range(func(k, _ any) bool {
		s := k.(*selfRemover)
		n++
		if s.overlap.Load() {
			t.Errorf("overlap")
		}
		after += int(s.after.Load())
		return true
	})
	t.Logf("%d instances, %d ticks, %d ticks started after Remove returned", n, e.Ticks(), after)
}
