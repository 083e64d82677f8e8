package actor

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

type countTicker struct{ n atomic.Int64 }

func (c *countTicker) Tick(time.Time) { c.n.Add(1) }

// Issue 35: one engine ticks several rates on the same workers; each instance ticks at its own
// schedule's rate, and the engine's own rate is its base schedule.
func TestEngineSeveralRates(t *testing.T) {
	start := time.Unix(1000, 0)
	e, err := NewEngine(EngineConfig{Rate: 20, Workers: 1, Start: start, Manual: true})
	if err != nil {
		t.Fatal(err)
	}
	if s, err := e.Schedule(20); err != nil || s != e.Base() {
		t.Fatalf("Schedule(20) on a 20 Hz engine: %v, %v; want its base", s, err)
	}
	fast, err := e.Schedule(60)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := e.Schedule(60); again != fast {
		t.Fatal("Schedule(60) twice made two schedules")
	}
	slow, err := e.Schedule(1)
	if err != nil {
		t.Fatal(err)
	}
	if fast.Period() != time.Second/60 && (fast.Period() < 16660*time.Microsecond || fast.Period() > time.Second/60) {
		t.Fatalf("60 Hz period %v", fast.Period())
	}
	var base, f, s [10]countTicker
	for i := range base {
		e.Add(&base[i])
		fast.Add(&f[i])
		slow.AddInPhase(&s[i], uint64(i))
	}
	ran := 0
	for ms := 1; ms <= 3000; ms++ {
		ran += e.Advance(start.Add(time.Duration(ms) * time.Millisecond))
	}
	for i := range base {
		if b, ff, ss := base[i].n.Load(), f[i].n.Load(), s[i].n.Load(); b < 59 || b > 61 || ff < 179 || ff > 181 || ss < 2 || ss > 4 {
			t.Fatalf("instance %d ticked %d (20 Hz), %d (60 Hz), %d (1 Hz) times in 3 s", i, b, ff, ss)
		}
	}
	if e.Skipped() != 0 || uint64(ran) != e.Ticks() {
		t.Fatalf("skipped %d, ran %d, ticks %d", e.Skipped(), ran, e.Ticks())
	}
	for _, bad := range []float64{0, -1, 1001} {
		if _, err := e.Schedule(bad); err == nil {
			t.Errorf("Schedule(%v) made a schedule", bad)
		}
	}
	for r := 2.0; ; r++ {
		if _, err := e.Schedule(r); err != nil {
			if len(e.rates) != MaxSchedules {
				t.Fatalf("refused at %d rates: %v", len(e.rates), err)
			}
			break
		}
	}
}

// Issue 35: an engine without instances (every one passivated) sets no timer: its workers sleep
// until an instance is added, which then ticks within a period; a schedule that had none for a
// while takes up from the present and counts none of the time it had none as skipped.
func TestEngineWithoutInstancesSleeps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var woke atomic.Int64
		e, err := NewEngine(EngineConfig{Rate: 20, Workers: 4, woke: func() { woke.Add(1) }})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Stop()
		time.Sleep(10 * time.Second)
		if n := woke.Load(); n > 4 {
			t.Fatalf("an engine without instances woke %d times in 10 s", n)
		}
		fast, _ := e.Schedule(50)
		var c countTicker
		h := fast.Add(&c)
		time.Sleep(time.Second)
		if n := c.n.Load(); n < 49 || n > 51 {
			t.Fatalf("an instance added to a sleeping engine ticked %d times in 1 s at 50 Hz", n)
		}
		if e.Skipped() != 0 {
			t.Fatalf("%d ticks skipped: the time without instances counted", e.Skipped())
		}
		e.Remove(h)
		time.Sleep(100 * time.Millisecond)
		before := woke.Load()
		time.Sleep(10 * time.Second)
		if n := woke.Load() - before; n > 4 {
			t.Fatalf("an engine whose last instance was removed woke %d times in 10 s", n)
		}
		var d countTicker
		e.Add(&d)
		time.Sleep(time.Second)
		if n := d.n.Load(); n < 19 || n > 21 || e.Skipped() != 0 {
			t.Fatalf("after 10 s without instances: ticked %d times in 1 s at 20 Hz, %d skipped", n, e.Skipped())
		}
	})
}

// Issue 35: with several rates, the workers take first the ticks due longest: a late schedule
// is not starved by another that keeps ticks due.
func TestEngineRatesRealTime(t *testing.T) {
	e, err := NewEngine(EngineConfig{Rate: 20, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Stop()
	s60, _ := e.Schedule(60)
	var a, b countTicker
	e.Add(&a)
	s60.Add(&b)
	time.Sleep(time.Second)
	if x, y := a.n.Load(), b.n.Load(); x < 15 || x > 22 || y < 50 || y > 62 {
		t.Fatalf("in 1 s: %d ticks at 20 Hz, %d at 60 Hz", x, y)
	}
}

// Issue 35: AddSoon puts an instance in the bucket after the next to open (a woken instance
// whose command waits for its first tick), not up to a period away.
func TestEngineAddSoon(t *testing.T) {
	start := time.Unix(1000, 0)
	e, err := NewEngine(EngineConfig{Rate: 20, Workers: 1, Start: start, Manual: true})
	if err != nil {
		t.Fatal(err)
	}
	var filler [40]countTicker
	for i := range filler {
		e.Add(&filler[i]) // the round-robin slots 0..39: Add's next is 40, 20 ms from 0
	}
	e.Advance(start.Add(10200 * time.Microsecond)) // bucket 20 open
	var soon countTicker
	e.Base().AddSoon(&soon)
	e.Advance(start.Add(11500 * time.Microsecond))
	if soon.n.Load() != 1 {
		t.Fatalf("an instance added soon at 10.2 ms ticked %d times by 11.5 ms, want once (bucket 22)", soon.n.Load())
	}
}
