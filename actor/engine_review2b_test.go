package actor_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tickfence/tickfence/actor"
)

type chaosTicker struct {
	i    int
	fast *atomic.Bool
	busy atomic.Bool
	mu   sync.Mutex
	dues []time.Time
	bad  []string
}

func (c *chaosTicker) Tick(d time.Time) {
	if c.busy.Swap(true) {
		c.mu.Lock()
		c.bad = append(c.bad, "overlap")
		c.mu.Unlock()
	}
	c.mu.Lock()
	n := len(c.dues)
	if n > 0 && !d.After(c.dues[n-1]) {
		c.bad = append(c.bad, "not increasing")
	}
	c.dues = append(c.dues, d)
	c.mu.Unlock()
	if !c.fast.Load() {
		switch {
		case (n+c.i)%17 == 0:
			time.Sleep(25 * time.Millisecond)
		case c.i%5 == 0:
			time.Sleep(3 * time.Millisecond)
		case c.i%7 == 0:
			time.Sleep(12 * time.Millisecond)
		}
	}
	c.busy.Store(false)
}

func TestEngineReview2Chaos(t *testing.T) {
	for _, cfg := range []struct{ w, tw, mc int }{{6, 2, 2}, {3, 1, 1}, {16, 4, 3}, {2, 2, 2}} {
		synctest.Test(t, func(t *testing.T) {
			S := time.Now()
			const slot = time.Millisecond
			e, err := actor.NewEngine(actor.EngineConfig{Rate: 100, Slot: slot, Workers: cfg.w, TimerWorkers: cfg.tw, MaxCatchUp: cfg.mc, Start: S})
			if err != nil {
				t.Fatal(err)
			}
			var fast atomic.Bool
			cs := make([]*chaosTicker, 40)
			for i := range cs {
				cs[i] = &chaosTicker{i: i, fast: &fast}
				e.Add(cs[i])
			}
			time.Sleep(700 * time.Millisecond)
			fast.Store(true)
			time.Sleep(300*time.Millisecond + slot/2)
			synctest.Wait()
			T := time.Since(S)
			e.Stop()
			K := int64(T / slot)
			var due uint64
			for k := int64(1); k <= K; k++ {
				for i := range cs {
					if int64(i%10) == k%10 {
						due++
					}
				}
			}
			var ran uint64
			for i, c := range cs {
				c.mu.Lock()
				ran += uint64(len(c.dues))
				for _, d := range c.dues {
					if off := d.Sub(S) % (10 * slot); off != time.Duration(i%10)*slot {
						t.Errorf("instance %d ticked for %v, not its slot", i, d.Sub(S))
						break
					}
				}
				if len(c.bad) > 0 {
					t.Errorf("instance %d: %v", i, c.bad[:min(3, len(c.bad))])
				}
				c.mu.Unlock()
			}
			t.Logf("cfg %v: ticks %d skipped %d due %d", cfg, e.Ticks(), e.Skipped(), due)
			if ran != e.Ticks() || e.Ticks()+e.Skipped() != due {
				t.Errorf("cfg %v: instances ran %d, engine ticks %d + skipped %d = %d, due %d", cfg, ran, e.Ticks(), e.Skipped(), e.Ticks()+e.Skipped(), due)
			}
		})
	}
}
