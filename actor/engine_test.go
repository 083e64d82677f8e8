package actor_test

import (
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tickfence/tickfence/actor"
)

type countTicker struct {
	n       atomic.Int64
	busy    atomic.Bool
	overlap atomic.Bool
	sleep   time.Duration
	last    atomic.Int64 // scheduled time of the last tick, ns
	back    atomic.Bool  // a scheduled time went backwards
}

func (c *countTicker) Tick(scheduled time.Time) {
	if c.busy.Swap(true) {
		c.overlap.Store(true)
	}
	if s := scheduled.UnixNano(); s <= c.last.Swap(s) {
		c.back.Store(true)
	}
	c.n.Add(1)
	time.Sleep(c.sleep)
	c.busy.Store(false)
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
