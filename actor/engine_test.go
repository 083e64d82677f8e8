package actor_test

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/tickfence/tickfence/actor"
)

type countTicker struct {
	n        atomic.Int64
	busy     atomic.Bool
	overlap  atomic.Bool
	sleep    time.Duration
	last     atomic.Int64 // scheduled time of the last tick, ns
	back     atomic.Bool  // a scheduled time went backwards
	stallAt  int64        // the tick (1, 2, …) that takes stallFor
	stallFor time.Duration
	late     atomic.Int64 // the most a tick started after it was due, ns
}

func (c *countTicker) Tick(scheduled time.Time) {
	if c.busy.Swap(true) {
		c.overlap.Store(true)
	}
	if s := scheduled.UnixNano(); s <= c.last.Swap(s) {
		c.back.Store(true)
	}
	if l := time.Since(scheduled); l > time.Duration(c.late.Load()) {
		c.late.Store(int64(l))
	}
	n := c.n.Add(1)
	time.Sleep(c.sleep)
	if n == c.stallAt {
		time.Sleep(c.stallFor)
	}
	c.busy.Store(false)
}

// A worker paused in the middle of a tick for longer than a period (a GC assist, a dedicated mark
// worker holding the P it was readied on, the OS) must not cost the instance its next tick: the
// tick is owed and run late by that worker, within MaxCatchUp; only beyond it are ticks skipped.
func TestEngineStalledTickIsCaughtUpNotSkipped(t *testing.T) {
	for _, tc := range []struct {
		name    string
		stall   time.Duration // at 100 Hz: periods of 10 ms
		skipped uint64        // ticks due while stalled beyond the 2 owed
		late    time.Duration // how late the first owed tick then starts
	}{
		{"2.5 periods", 25 * time.Millisecond, 0, 15 * time.Millisecond},
		{"1.2 periods", 12 * time.Millisecond, 0, 2 * time.Millisecond},
		{"6.5 periods", 65 * time.Millisecond, 4, 15 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e, err := actor.NewEngine(actor.EngineConfig{Rate: 100, Workers: 4, MaxCatchUp: 2})
				if err != nil {
					t.Fatal(err)
				}
				stalled := &countTicker{stallAt: 3, stallFor: tc.stall}
				steady := &countTicker{}
				e.Add(stalled)
				e.Add(steady)
				time.Sleep(time.Second + 5*time.Millisecond)
				e.Stop()
				if e.Skipped() != tc.skipped {
					t.Errorf("skipped %d ticks, want %d", e.Skipped(), tc.skipped)
				}
				// Both fall due about 100 times in the second, in adjacent phases: the stalled one
				// ran every tick but the skipped ones, late.
				if n, s := stalled.n.Load(), steady.n.Load(); s < 100 || s > 101 || n+int64(tc.skipped) < s-1 || n+int64(tc.skipped) > s {
					t.Errorf("stalled instance ticked %d times (+%d skipped), the steady one %d", n, tc.skipped, s)
				}
				if stalled.overlap.Load() || stalled.back.Load() || steady.back.Load() {
					t.Errorf("overlap %v, scheduled time went back %v/%v", stalled.overlap.Load(), stalled.back.Load(), steady.back.Load())
				}
				if l := time.Duration(stalled.late.Load()); l < tc.late || l > tc.late+time.Millisecond {
					t.Errorf("the latest tick started %v late, want %v (the owed one, run when the stall ends)", l, tc.late)
				}
				if got := uint64(stalled.n.Load() + steady.n.Load()); e.Ticks() != got {
					t.Errorf("engine counted %d ticks, the instances %d", e.Ticks(), got)
				}
			})
		})
	}
}

func TestEngineTicksEveryInstanceAtItsRate(t *testing.T) {
	defer goleak.VerifyNone(t)
	var late atomic.Int64
	e, err := actor.NewEngine(actor.EngineConfig{Rate: 100, Workers: 2,
		Observe: func(l, _ time.Duration) { late.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	ts := make([]*countTicker, 50)
	hs := make([]*actor.Handle, len(ts))
	for i := range ts {
		ts[i] = &countTicker{}
		hs[i] = e.Add(ts[i])
	}
	time.Sleep(500 * time.Millisecond)
	e.Remove(hs[0])
	n0 := ts[0].n.Load()
	time.Sleep(100 * time.Millisecond)
	e.Stop()
	if ts[0].n.Load() > n0+1 {
		t.Fatalf("removed instance kept ticking: %d → %d", n0, ts[0].n.Load())
	}
	for i, c := range ts[1:] {
		// 600 ms at 100 Hz is 60 ticks; allow a loaded CI machine plenty of slack either way,
		// but never more than the schedule allows.
		if n := c.n.Load(); n < 20 || n > 62 {
			t.Errorf("instance %d ticked %d times in 600ms at 100 Hz", i+1, n)
		}
		if c.overlap.Load() || c.back.Load() {
			t.Errorf("instance %d: overlapping ticks %v, scheduled time went back %v", i+1, c.overlap.Load(), c.back.Load())
		}
	}
	if late.Load() != int64(e.Ticks()) {
		t.Fatalf("observed %d ticks, engine counted %d", late.Load(), e.Ticks())
	}
}

func TestEngineOverrunSkipsAndCounts(t *testing.T) {
	defer goleak.VerifyNone(t)
	e, err := actor.NewEngine(actor.EngineConfig{Rate: 100, Workers: 1, MaxCatchUp: 2})
	if err != nil {
		t.Fatal(err)
	}
	slow := &countTicker{sleep: 50 * time.Millisecond} // five periods per tick
	fast := &countTicker{}
	e.Add(slow)
	e.Add(fast)
	time.Sleep(600 * time.Millisecond)
	e.Stop()
	if e.Skipped() == 0 {
		t.Fatal("a worker 5 periods behind skipped no ticks")
	}
	if fast.n.Load() == 0 || slow.n.Load() == 0 || slow.overlap.Load() || fast.back.Load() || slow.back.Load() {
		t.Fatalf("fast %d ticks, slow %d ticks, overlap %v", fast.n.Load(), slow.n.Load(), slow.overlap.Load())
	}
}

func TestEngineRejectsBadRate(t *testing.T) {
	for _, r := range []float64{0, -1, 5000} {
		if _, err := actor.NewEngine(actor.EngineConfig{Rate: r}); err == nil {
			t.Errorf("rate %v accepted", r)
		}
	}
}

type nopTicker struct{ n int }

func (t *nopTicker) Tick(time.Time) { t.n++ }

// A manual engine runs exactly the ticks due, spread over the period, and allocates nothing per
// tick once its buckets are warm (one bucket per bucket opened).
func TestEngineManualSpreadsPhasesWithoutAllocating(t *testing.T) {
	start := time.Unix(1000, 0)
	e, err := actor.NewEngine(actor.EngineConfig{Rate: 20, Workers: 2, Slot: time.Millisecond, Start: start, Manual: true})
	if err != nil {
		t.Fatal(err)
	}
	ts := make([]*nopTicker, 100)
	for i := range ts {
		ts[i] = &nopTicker{}
		e.Add(ts[i])
	}
	// 100 instances over 2 workers x 50 buckets: 2 per bucket, so no 1 ms bucket holds more.
	for k := 1; k <= 50; k++ {
		if n := e.Advance(start.Add(time.Duration(k) * time.Millisecond)); n != 2 {
			t.Fatalf("bucket %d ran %d ticks, want 2", k, n)
		}
	}
	for i, c := range ts {
		if c.n != 1 {
			t.Fatalf("instance %d ticked %d times in one period, want 1", i, c.n)
		}
	}
	k := 50
	allocs := testing.AllocsPerRun(200, func() {
		k++
		e.Advance(start.Add(time.Duration(k) * time.Millisecond))
	})
	// One: the bucket opened (workers hand buckets out with compare-and-swap on a fresh one), none
	// per tick.
	if allocs > 1 {
		t.Fatalf("Advance allocates %v times per bucket, want at most 1", allocs)
	}
}

func TestEngineManualOverrunSkipsAndCounts(t *testing.T) {
	start := time.Unix(1000, 0)
	e, err := actor.NewEngine(actor.EngineConfig{Rate: 100, Workers: 1, MaxCatchUp: 2, Start: start, Manual: true})
	if err != nil {
		t.Fatal(err)
	}
	c := &nopTicker{}
	e.Add(c) // bucket 0 of 10: due at 10 ms, 20 ms, ...
	e.Advance(start.Add(15 * time.Millisecond))
	if c.n != 1 {
		t.Fatalf("ticked %d times by 15 ms, want 1", c.n)
	}
	// 10 periods later: catch-up is allowed for 2 periods, the rest is skipped and counted.
	e.Advance(start.Add(115 * time.Millisecond))
	if got := uint64(c.n) + e.Skipped(); got != 11 {
		t.Fatalf("ran %d + skipped %d = %d ticks by 115 ms, want 11", c.n, e.Skipped(), got)
	}
	if e.Skipped() == 0 || c.n >= 11 {
		t.Fatalf("ran %d, skipped %d: a worker 10 periods behind must skip", c.n, e.Skipped())
	}
}

func TestEngineRemoveKeepsOtherInstances(t *testing.T) {
	start := time.Unix(1000, 0)
	e, _ := actor.NewEngine(actor.EngineConfig{Rate: 1000, Workers: 1, Start: start, Manual: true})
	ts := make([]*nopTicker, 5)
	hs := make([]*actor.Handle, 5)
	for i := range ts {
		ts[i] = &nopTicker{}
		hs[i] = e.Add(ts[i]) // one bucket: 1 ms period, 1 ms slot
	}
	e.Remove(hs[1])
	e.Remove(hs[4])
	e.Remove(hs[1]) // twice is harmless
	e.Advance(start.Add(time.Millisecond))
	for i, want := range []int{1, 0, 1, 1, 0} {
		if ts[i].n != want {
			t.Errorf("instance %d ticked %d times, want %d", i, ts[i].n, want)
		}
	}
}

// Workers without a timer are called in when a bucket holds more than one worker takes: one timer
// worker and three called in keep a bucket of 4 chunks of 1 ms ticks within a 10 ms period, which
// one worker alone cannot.
func TestEngineCallsInWorkersForALargeBucket(t *testing.T) {
	for _, tc := range []struct {
		workers, timers int
		keepsUp         bool
	}{
		{4, 1, true},
		{4, 4, true},
		{1, 1, false},
	} {
		synctest.Test(t, func(t *testing.T) {
			e, err := actor.NewEngine(actor.EngineConfig{Rate: 100, Slot: 10 * time.Millisecond,
				Workers: tc.workers, TimerWorkers: tc.timers})
			if err != nil {
				t.Fatal(err)
			}
			ts := make([]*countTicker, 32) // one bucket: 4 chunks of 8
			for i := range ts {
				ts[i] = &countTicker{sleep: time.Millisecond}
				e.Add(ts[i])
			}
			time.Sleep(time.Second)
			e.Stop()
			var late time.Duration
			for _, c := range ts {
				late = max(late, time.Duration(c.late.Load()))
			}
			if keptUp := e.Skipped() == 0 && late < 10*time.Millisecond; keptUp != tc.keepsUp {
				t.Errorf("%d workers, %d on timers: skipped %d, latest tick %v late; want keeping up %v",
					tc.workers, tc.timers, e.Skipped(), late, tc.keepsUp)
			}
		})
	}
}

// By default an engine rides out a stall of up to a quarter second (actor.DefaultCatchUp) and runs
// every tick late, as the tick engine of a node beside a saturated CPU must (a node at twice its
// command capacity stalled 150–190 ms now and then and, with 2 periods, skipped a tick of every
// instance at once); past it, it skips and counts. An explicit MaxCatchUp still rules.
func TestEngineDefaultCatchUpRidesOutAQuarterSecond(t *testing.T) {
	for _, tc := range []struct {
		name       string
		maxCatchUp int
		stall      time.Duration
		skips      bool
	}{
		{"default, 200 ms", 0, 200 * time.Millisecond, false},
		{"default, 240 ms", 0, 240 * time.Millisecond, false},
		{"default, 400 ms", 0, 400 * time.Millisecond, true},
		{"2 periods, 200 ms", 2, 200 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Unix(1000, 0)
			e, err := actor.NewEngine(actor.EngineConfig{Rate: 20, Workers: 1, MaxCatchUp: tc.maxCatchUp, Start: start, Manual: true})
			if err != nil {
				t.Fatal(err)
			}
			c := &nopTicker{}
			e.Add(c) // bucket 0: due at 50 ms, 100 ms, …
			e.Advance(start.Add(60 * time.Millisecond))
			if c.n != 1 {
				t.Fatalf("ticked %d times by 60 ms, want 1", c.n)
			}
			at := start.Add(60*time.Millisecond + tc.stall)
			e.Advance(at)
			due := int(at.Sub(start) / (50 * time.Millisecond))
			if got := uint64(c.n) + e.Skipped(); got != uint64(due) {
				t.Fatalf("ran %d + skipped %d, want %d ticks due", c.n, e.Skipped(), due)
			}
			if (e.Skipped() > 0) != tc.skips {
				t.Fatalf("after a %v stall: ran %d, skipped %d; want skipping %v", tc.stall, c.n, e.Skipped(), tc.skips)
			}
		})
	}
}

func TestCatchUpPeriods(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		rate float64
		want int
	}{
		{250 * time.Millisecond, 20, 5}, {250 * time.Millisecond, 60, 15}, {250 * time.Millisecond, 10, 3},
		{100 * time.Millisecond, 20, 2}, {time.Millisecond, 20, 2}, {250 * time.Millisecond, 4, 2}, {0, 20, 0}, {-time.Second, 20, 0},
	} {
		if got := actor.CatchUpPeriods(tc.d, tc.rate); got != tc.want {
			t.Errorf("CatchUpPeriods(%v, %v) = %d, want %d", tc.d, tc.rate, got, tc.want)
		}
	}
}
