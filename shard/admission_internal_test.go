package shard

import (
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func newTestAdmission(max int) *admission {
	g := func() prometheus.Gauge { return prometheus.NewGauge(prometheus.GaugeOpts{Name: "g"}) }
	return newAdmission(200*time.Millisecond, max, g(), g(), slog.New(slog.DiscardHandler))
}

// A standing queue (every answer of an interval slower than the target) closes the door; an
// interval with a quick answer, or with nothing waiting, opens it again. Quick answers mixed with
// slow ones (a burst that drains) never close it.
func TestAdmissionShedsOnAStandingQueueOnly(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	a := newTestAdmission(1000)
	a.begin(t0)
	// A burst: some answers slow, one quick in the same interval — no standing queue.
	for range 10 {
		if !a.admit(at(0)) {
			t.Fatal("refused while idle")
		}
	}
	for i := range 9 {
		a.done(500*time.Millisecond, at(10+i))
	}
	a.done(20*time.Millisecond, at(50))
	if !a.admit(at(110)) { // the interval rolled with a quick answer
		t.Fatal("refused after an interval that had a quick answer")
	}
	a.done(20*time.Millisecond, at(120))
	// A standing queue: every answer of an interval over the target.
	for range 5 {
		a.admit(at(220))
	}
	for i := range 5 {
		a.done(300*time.Millisecond, at(230+i))
	}
	if a.admit(at(330)) {
		t.Fatal("admitted while every answer of the last interval was slower than the target")
	}
	// Nothing waits and no answer came in an interval: open again.
	if !a.admit(at(440)) {
		t.Fatal("still refusing with nothing waiting")
	}
	// The hard bound.
	b := newTestAdmission(2)
	b.begin(t0)
	if !b.admit(at(0)) || !b.admit(at(0)) || b.admit(at(0)) {
		t.Fatal("the bound on pending commands does not hold")
	}
	if p := b.pending.Load(); p != 2 {
		t.Fatalf("pending = %d, want 2", p)
	}
	// Ticks running late shed too, whatever the answers; on time again, it opens.
	c := newTestAdmission(1000)
	c.begin(t0)
	late := time.Second
	c.lag, c.lagLimit = func() time.Duration { return late }, 25*time.Millisecond
	if !c.admit(at(0)) {
		t.Fatal("refused before any interval ended")
	}
	c.done(time.Millisecond, at(10))
	if c.admit(at(120)) {
		t.Fatal("admitted while the engine was a second behind its schedule")
	}
	late = 0
	if !c.admit(at(240)) {
		t.Fatal("still refusing once the engine was on time and nothing waited")
	}
	// A transport that asks before decoding (no admit, no answer) still sees the door open
	// again after an interval.
	d := newTestAdmission(1000)
	d.begin(t0)
	d.admit(at(0))
	d.done(time.Second, at(10))
	if !d.refusing(at(110)) {
		t.Fatal("not refusing after a slow interval")
	}
	if d.refusing(at(220)) {
		t.Fatal("still refusing an interval later with nothing admitted: the state never moves without admit")
	}
	// Off.
	var off *admission = newAdmission(-1, 1, nil, nil, nil)
	if !off.admit(at(0)) || !off.admit(at(0)) {
		t.Fatal("admission control off refused a command")
	}
}
