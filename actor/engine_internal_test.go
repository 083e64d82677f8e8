package actor

import (
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
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

// pausedTicker records its ticks' scheduled times and how late each started.
type pausedTicker struct {
	busy    atomic.Bool
	overlap atomic.Bool
	mu      sync.Mutex
	n       int
	last    time.Time
	back    bool
	late    time.Duration
}

func (p *pausedTicker) Tick(due time.Time) {
	if p.busy.Swap(true) {
		p.overlap.Store(true)
	}
	defer p.busy.Store(false)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	if !due.After(p.last) {
		p.back = true
	}
	p.last = due
	p.late = max(p.late, time.Since(due))
}

// A worker the runtime pauses right after taking its chunk (preempted for a GC stack scan or a
// stop-the-world, then left waiting in the global run queue behind every runnable goroutine: 27
// and 65 ms in a flight recording at 5 000 demo dungeons) must hold up only the ticks it took. When
// the engine handed chunks out under one lock, every other worker waited for the paused one and
// the whole engine stalled: 12 000 ticks skipped at once in 10-minute runs.
func TestEngineWorkerPausedWhileTakingHoldsUpOnlyItsChunk(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var paused sync.Map  // *pausedTicker → true: in the paused worker's chunk
		var once atomic.Bool // not a sync.Once: the others would wait on its mutex, which synctest cannot see through
		start := time.Now()
		cfg := EngineConfig{Rate: 100, Workers: 4, MaxCatchUp: 2, claimed: func(hs []*Handle) {
			if time.Since(start) < 100*time.Millisecond || len(hs) == 0 {
				return
			}
			if once.Swap(true) {
				return
			}
			for _, h := range hs {
				paused.Store(h.t, true)
			}
			time.Sleep(35 * time.Millisecond) // three and a half periods
		}}
		e, err := NewEngine(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ts := make([]*pausedTicker, 40)
		for i := range ts {
			ts[i] = &pausedTicker{}
			e.Add(ts[i])
		}
		time.Sleep(time.Second)
		e.Stop()
		var inChunk, ticks int
		for i, p := range ts {
			p.mu.Lock()
			ticks += p.n
			if p.back || p.overlap.Load() {
				t.Errorf("instance %d: a scheduled time went back (%v), or two ticks overlapped (%v)", i, p.back, p.overlap.Load())
			}
			if _, ok := paused.Load(p); ok {
				inChunk++
			} else if p.late > time.Millisecond || p.n < 99 {
				t.Errorf("instance %d, not in the paused chunk: %d ticks, the latest %v late", i, p.n, p.late)
			}
			p.mu.Unlock()
		}
		if inChunk == 0 {
			t.Fatal("no worker paused")
		}
		// The paused chunk's ticks were overtaken by their instances' next ones, run by the other
		// workers: each is skipped and counted, once.
		if e.Skipped() != uint64(inChunk) {
			t.Errorf("skipped %d ticks, want %d (the paused chunk's)", e.Skipped(), inChunk)
		}
		if uint64(ticks) != e.Ticks() {
			t.Errorf("engine counted %d ticks, the instances %d", e.Ticks(), ticks)
		}
	})
}
