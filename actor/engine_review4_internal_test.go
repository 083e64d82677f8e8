package actor

import (
	"math"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

type review4Count struct{ n int }

func (c *review4Count) Tick(time.Time) { c.n++ }

type review4StallOnce struct {
	n atomic.Int64
	d time.Duration
}

func (s *review4StallOnce) Tick(time.Time) {
	if s.n.Add(1) == 2 {
		time.Sleep(s.d)
	}
}

// Review 4: an instance that owed many ticks in a long catch-up (60 Hz: 15; 1000 Hz: 250) gets
// its small room for queued ticks back once it has caught up, instead of keeping the grown one
// for life (8 KB per instance that once stalled at 1000 Hz).
func TestEngineReview4DuesShrinkAfterCatchUp(t *testing.T) {
	for _, tc := range []struct {
		rate  float64
		stall time.Duration
	}{{60, 200 * time.Millisecond}, {1000, 240 * time.Millisecond}} {
		synctest.Test(t, func(t *testing.T) {
			e, err := NewEngine(EngineConfig{Rate: tc.rate, Workers: 4})
			if err != nil {
				t.Fatal(err)
			}
			s := &review4StallOnce{d: tc.stall}
			h := e.Add(s)
			time.Sleep(tc.stall + 100*time.Millisecond)
			e.Stop()
			h.mu.Lock()
			c := cap(h.dues)
			h.mu.Unlock()
			if c > duesRoom {
				t.Errorf("%v Hz, MaxCatchUp %d: the instance kept room for %d owed ticks after catching up (skipped %d), want at most %d",
					tc.rate, e.cfg.MaxCatchUp, c, e.Skipped(), duesRoom)
			}
		})
	}
}

// Review 4: a catch-up of "forever" (a huge Options.MaxCatchUp) must not wrap around into a
// negative limit that skips on any lag.
func TestEngineReview4HugeCatchUpNeverSkips(t *testing.T) {
	for _, rate := range []float64{1, 20, 1000} {
		start := time.Unix(1000, 0)
		e, err := NewEngine(EngineConfig{Rate: rate, Workers: 1, Start: start, Manual: true, MaxCatchUp: CatchUpPeriods(math.MaxInt64, rate)})
		if err != nil {
			t.Fatal(err)
		}
		c := &review4Count{}
		e.Add(c)
		p := e.Period()
		e.Advance(start.Add(p + p/10))
		e.Advance(start.Add(2*p + p/2)) // the second tick, half a period late
		if e.Skipped() != 0 || c.n != 2 {
			t.Errorf("%v Hz, MaxCatchUp %d: ran %d, skipped %d after half a period late; want 2 run, 0 skipped", rate, e.cfg.MaxCatchUp, c.n, e.Skipped())
		}
	}
}

// Review 4: tickd passes its --max-catch-up default through CatchUpPeriods; at a low tick rate
// that must not give less than the engine's own default (2 periods).
func TestEngineReview4CatchUpPeriodsAtLowRates(t *testing.T) {
	for _, rate := range []float64{1, 4, 7.9} {
		if got := CatchUpPeriods(DefaultCatchUp, rate); got < 2 {
			t.Errorf("CatchUpPeriods(DefaultCatchUp, %v) = %d, want at least 2 (the engine's own default)", rate, got)
		}
	}
}
