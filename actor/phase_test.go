package actor_test

import (
	"testing"
	"time"

	"github.com/tickfence/tickfence/actor"
)

// phaseTicker records the scheduled time of its first tick.
type phaseTicker struct{ at time.Time }

func (p *phaseTicker) Tick(scheduled time.Time) {
	if p.at.IsZero() {
		p.at = scheduled
	}
}

// Tickers added with one key tick in one bucket; a key with far more than its share spills into
// the next buckets instead of making one bucket late.
func TestAddInPhaseGroupsByKey(t *testing.T) {
	start := time.Unix(1000, 0)
	e, err := actor.NewEngine(actor.EngineConfig{Rate: 20, Manual: true, Start: start}) // 100 buckets of 500 µs
	if err != nil {
		t.Fatal(err)
	}
	defer e.Stop()
	var a, b, spread []*phaseTicker
	for i := 0; i < 8; i++ {
		a = append(a, &phaseTicker{})
		e.AddInPhase(a[i], 3)
		b = append(b, &phaseTicker{})
		e.AddInPhase(b[i], 103) // the same bucket as key 3
	}
	for i := 0; i < 100; i++ {
		spread = append(spread, &phaseTicker{})
		e.AddInPhase(spread[i], 40)
	}
	e.Advance(start.Add(50 * time.Millisecond))
	for _, p := range append(a, b...) {
		if want := start.Add(3 * 500 * time.Microsecond); !p.at.Equal(want) {
			t.Fatalf("a ticker of key 3 first ticked at +%v, want +%v with the others of its key", p.at.Sub(start), want.Sub(start))
		}
	}
	per := map[time.Duration]int{}
	for _, p := range spread {
		per[p.at.Sub(start)]++
	}
	if per[40*500*time.Microsecond] == 0 || len(per) < 2 || len(per) > 8 {
		t.Fatalf("100 tickers of key 40 ticked in buckets %v: want bucket 40 first and a few adjacent ones", per)
	}
	for d, n := range per {
		if d < 40*500*time.Microsecond || d > 48*500*time.Microsecond || n > 2*116/100+16 {
			t.Errorf("%d tickers of key 40 in the bucket at +%v", n, d)
		}
	}
}
