package actor_test

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/tickfence/tickfence/actor"
)

// gateTicker records every scheduled time it is ticked with, and blocks in its n-th tick
// (1-based) until gate is closed.
type gateTicker struct {
	mu     sync.Mutex
	dues   []time.Time
	calls  int
	stopAt int
	gate   chan struct{}
}

func (g *gateTicker) Tick(d time.Time) {
	g.mu.Lock()
	g.dues = append(g.dues, d)
	g.calls++
	block := g.calls == g.stopAt
	g.mu.Unlock()
	if block {
		<-g.gate
	}
}

// A chunk taken but not started (its worker is held in a slow tick of the instance before it)
// reaches an instance whose later tick is running and whose next tick is already owed: the stale
// due overwrites lastDue, and the owed ticks are relabelled from it, so a period already ticked is
// passed to Tick again (and t2's due is never passed).
func TestEngineReviewStaleChunkOwedTickRepeatsAPeriod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const p = 100 * time.Millisecond
		e, err := actor.NewEngine(actor.EngineConfig{Rate: 10, Slot: p, Workers: 8, MaxCatchUp: 2})
		if err != nil {
			t.Fatal(err)
		}
		h1 := &gateTicker{stopAt: 2, gate: make(chan struct{})} // holds its worker in its 2nd tick
		h := &gateTicker{stopAt: 2, gate: make(chan struct{})}  // its 2nd tick (the 3rd period) stalls
		e.Add(h1)
		e.Add(h) // same (only) bucket, after h1: in the same chunk
		// Ticks at S+p (both), S+2p (h1 blocks; h waits behind it in the chunk), S+3p (h blocks),
		// S+4p (h owed, lastDue S+4p).
		time.Sleep(4*p + p/2)
		close(h1.gate) // the worker held in h1 reaches h for S+2p: h is running, owed again
		synctest.Wait()
		close(h.gate)
		synctest.Wait()
		e.Stop()
		h.mu.Lock()
		defer h.mu.Unlock()
		seen := map[time.Time]bool{}
		for i, d := range h.dues {
			if seen[d] {
				t.Errorf("tick %d: scheduled %v passed twice; all: %v", i, d, h.dues)
			}
			seen[d] = true
			if i > 0 && d.Before(h.dues[i-1]) {
				t.Logf("tick %d: scheduled %v before the previous %v", i, d, h.dues[i-1])
			}
		}
	})
}

// A called-in worker (id >= TimerWorkers) never checks stop while ticks stay due: on an engine
// that stays behind, Stop does not return.
type sleepTicker struct {
	fast *atomic.Bool
	d    time.Duration
}

func (s sleepTicker) Tick(time.Time) {
	if !s.fast.Load() {
		time.Sleep(s.d)
	}
}

func TestEngineReviewStopReturnsWhileOverloaded(t *testing.T) {
	stopsWhileOverloaded(t, actor.EngineConfig{Rate: 10, Slot: 100 * time.Millisecond, Workers: 2, TimerWorkers: 1},
		32, 20*time.Millisecond) // 32 x 20 ms per 100 ms period: 3.2 periods of work on 2 workers
}

func TestEngineReviewStopReturnsWhileOverloadedDefaults(t *testing.T) {
	stopsWhileOverloaded(t, actor.EngineConfig{Rate: 10}, 4000, 2*time.Millisecond) // 8 s of work per 100 ms
}

// stopsWhileOverloaded runs n tickers that each take d on an engine that cannot keep up, then
// checks that Stop returns.
func stopsWhileOverloaded(t *testing.T, cfg actor.EngineConfig, n int, d time.Duration) {
	synctest.Test(t, func(t *testing.T) {
		e, err := actor.NewEngine(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var fast atomic.Bool
		for range n {
			e.Add(sleepTicker{fast: &fast, d: d})
		}
		time.Sleep(2 * time.Second)
		done := make(chan struct{})
		go func() { e.Stop(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("Stop did not return within 10 s of an overloaded engine")
			fast.Store(true) // let the engine catch up, so the bubble can end
			<-done
		}
	})
}

// A tick held 20 periods (a GC assist, a store call) must not stop other instances: not when the
// only timer worker is the one held (the called-in workers' fallback timers take over), nor when
// the other instance waits in the held worker's chunk (a one-bucket period: the next worker
// takes its ticks over).
func TestEngineReviewOneStalledTimerWorkerStopsAll(t *testing.T) {
	const p = 10 * time.Millisecond
	for _, cfg := range []actor.EngineConfig{
		{Rate: 100, Workers: 8, TimerWorkers: 1},
		{Rate: 100, Slot: p, Workers: 8, TimerWorkers: 8},
	} {
		synctest.Test(t, func(t *testing.T) {
			e, err := actor.NewEngine(cfg)
			if err != nil {
				t.Fatal(err)
			}
			slow := &gateTicker{stopAt: 3, gate: make(chan struct{})}
			steady := &countTicker{}
			e.Add(slow) // with Slot p: one bucket, so one chunk, slow first
			e.Add(steady)
			time.Sleep(10 * p)
			before := steady.n.Load()
			time.Sleep(20 * p)
			after := steady.n.Load()
			close(slow.gate)
			synctest.Wait()
			e.Stop()
			if after-before < 15 {
				t.Errorf("%+v: steady instance ticked %d times in 20 periods while another instance's tick stalled (skipped %d)",
					cfg, after-before, e.Skipped())
			}
		})
	}
}

// As many instances as timer workers stalled in a tick (a store call, a lock) must not stop every
// other instance while called-in workers sit idle.
func TestEngineReviewTimerWorkersAllStalled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const p = 10 * time.Millisecond
		e, err := actor.NewEngine(actor.EngineConfig{Rate: 100, Workers: 32, TimerWorkers: 8})
		if err != nil {
			t.Fatal(err)
		}
		var slow []*gateTicker
		for range 8 {
			g := &gateTicker{stopAt: 3, gate: make(chan struct{})}
			slow = append(slow, g)
			e.Add(g)
		}
		steady := &countTicker{}
		e.Add(steady)
		time.Sleep(10 * p)
		before := steady.n.Load()
		time.Sleep(20 * p)
		after := steady.n.Load()
		for _, g := range slow {
			close(g.gate)
		}
		synctest.Wait()
		e.Stop()
		if after-before < 15 {
			t.Errorf("steady instance ticked %d times in 20 periods while %d instances' ticks stalled", after-before, len(slow))
		}
	})
}

type removeTicker struct {
	e    *actor.Engine
	h    *actor.Handle
	n    atomic.Int64
	gate chan struct{}
}

func (r *removeTicker) Tick(time.Time) {
	n := r.n.Add(1)
	if n == 2 {
		<-r.gate // owes ticks meanwhile
		r.e.Remove(r.h)
	}
}

// Remove from inside a stalled tick: no tick after it, and every period due before it ticked or
// counted as skipped. Stalled in its tick due at 20 ms until 105 ms, the instance has had 10 periods
// due (10 … 100 ms): it ticked 2, 6 owed ones were dropped past MaxCatchUp (2, given: the default
// would owe them all) and the last 2 by Remove, all 8 counted.
func TestEngineReviewRemoveInsideStalledTickDropsOwed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, _ := actor.NewEngine(actor.EngineConfig{Rate: 100, Workers: 4, TimerWorkers: 2, MaxCatchUp: 2})
		r := &removeTicker{e: e, gate: make(chan struct{})}
		r.h = e.Add(r)
		time.Sleep(105 * time.Millisecond)
		close(r.gate)
		time.Sleep(100 * time.Millisecond)
		e.Stop()
		if n := r.n.Load(); n != 2 {
			t.Errorf("ticked %d times, want 2", n)
		}
		if got := e.Ticks() + e.Skipped(); got != 10 {
			t.Errorf("ticked %d + skipped %d = %d of the 10 periods due before Remove", e.Ticks(), e.Skipped(), got)
		}
	})
}

type sleepOnce struct {
	n  atomic.Int64
	at int64
	d  time.Duration
}

func (s *sleepOnce) Tick(time.Time) {
	if s.n.Add(1) == s.at {
		time.Sleep(s.d)
	}
}

// While both workers are held (h in its tick due at S+200ms, x in a 500 ms tick), the engine
// falls more than MaxCatchUp periods behind and jumps to the present, counting S+300..S+700 of h
// and S+350..S+650 of x as skipped; h's ticks due at S+800 and S+900 fall due while h's worker is
// still held and are owed. Every due passed is a real period of h, in order, and every period
// due is either ticked or counted as skipped.
func TestEngineOwedTicksAcrossAJumpKeepTheirDueTimes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		S := time.Now()
		e, err := actor.NewEngine(actor.EngineConfig{Rate: 10, Slot: 50 * time.Millisecond, Workers: 2, Start: S})
		if err != nil {
			t.Fatal(err)
		}
		h := &gateTicker{stopAt: 2, gate: make(chan struct{})}
		x := &sleepOnce{at: 3, d: 500 * time.Millisecond}
		e.Add(h) // slot 0: due S+100, S+200, ...
		e.Add(x) // slot 1: due S+50, S+150, ...
		time.Sleep(920 * time.Millisecond)
		close(h.gate)
		synctest.Wait()
		e.Stop()
		h.mu.Lock()
		defer h.mu.Unlock()
		var rel []time.Duration
		for _, d := range h.dues {
			rel = append(rel, d.Sub(S))
		}
		if want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 800 * time.Millisecond, 900 * time.Millisecond}; !slices.Equal(rel, want) {
			t.Errorf("h ticked for %v, want %v", rel, want)
		}
		// h: 9 periods due by S+920ms, x: 9 (S+50 … S+850).
		if got := e.Ticks() + e.Skipped(); got != 18 || e.Skipped() != 9 {
			t.Errorf("ticked %d + skipped %d = %d, want 9 skipped of 18", e.Ticks(), e.Skipped(), got)
		}
	})
}

func TestEngineReviewNoLeakWithCalledWorkers(t *testing.T) {
	defer goleak.VerifyNone(t)
	synctest.Test(t, func(t *testing.T) { // and the bubble ends only when every goroutine has
		e, _ := actor.NewEngine(actor.EngineConfig{Rate: 100, Workers: 16, TimerWorkers: 2})
		for range 2000 {
			e.Add(&countTicker{})
		}
		time.Sleep(200 * time.Millisecond)
		e.Stop()
		if e.Ticks() < 2000*19 || e.Skipped() != 0 {
			t.Errorf("ticks %d, skipped %d in 20 periods of 2000 instances", e.Ticks(), e.Skipped())
		}
	})
}
