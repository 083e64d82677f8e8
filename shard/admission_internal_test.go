package shard

import (
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func newTestAdmission(max int) *admission {
	g := func() prometheus.Gauge { return prometheus.NewGauge(prometheus.GaugeOpts{Name: "g"}) }
	return newAdmission(200*time.Millisecond, max, g(), g(), slog.New(slog.DiscardHandler))
}

// admitted counts how many of n arrivals at now are admitted (and answers them at once with a
// quick sojourn only if quick is set: otherwise they stay pending).
func admitted(a *admission, n int, now time.Time) int {
	k := 0
	for range n {
		if a.admit(now, false) {
			k++
		}
	}
	return k
}

// A standing queue (every answer of an interval slower than the target) cuts the admitted share
// by a tenth per interval, down to a floor that keeps probing (ticks running late cut it by a
// third); intervals with a quick answer, or with nothing answered, give it back 2 % at a time. Quick answers mixed with slow ones (a burst that
// drains) cut nothing. Refusals are spread over the arrivals.
func TestAdmissionShedsAShareOnAStandingQueue(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	a := newTestAdmission(1 << 20)
	a.begin(t0)
	// A burst: some answers slow, one quick in the same interval — no standing queue.
	if k := admitted(a, 10, at(0)); k != 10 {
		t.Fatalf("admitted %d of 10 while idle", k)
	}
	for i := range 9 {
		a.done(500*time.Millisecond, at(10+i))
	}
	a.done(20*time.Millisecond, at(50))
	if k := admitted(a, 100, at(110)); k != 100 {
		t.Fatalf("admitted %d of 100 after an interval that had a quick answer", k)
	}
	// A standing queue just over the target (220 ms for 200), interval after interval: the share
	// falls by a tenth each time; far over it (at least 250 ms), by a third.
	ms := 110
	var shares []float64
	for i := range 8 {
		soj := 220 * time.Millisecond
		if i >= 6 {
			soj = 260 * time.Millisecond
		}
		a.done(soj, at(ms+10))
		ms += 110
		k := admitted(a, 300, at(ms))
		shares = append(shares, a.admittedShare())
		if want := a.admittedShare() * 300; float64(k) < want-2 || float64(k) > want+2 {
			t.Fatalf("admitted %d of 300 at share %.3f: refusals not spread over arrivals", k, a.admittedShare())
		}
	}
	t.Logf("shares over six slow intervals and two far over: %.3f", shares)
	for i, got := range shares {
		want := math.Pow(0.9, float64(min(i+1, 6))) * math.Pow(2.0/3, float64(max(i-5, 0)))
		if math.Abs(got-want) > 0.002 {
			t.Fatalf("shares %.3f: want a tenth less per slow interval, a third less per interval far over (%.3f after %d)", shares, want, i+1)
		}
	}
	for i := 1; i < len(shares); i++ {
		if shares[i] >= shares[i-1] && shares[i] > float64(shareMin)/shareOne {
			t.Fatalf("the share did not fall: %.3f", shares)
		}
	}
	// Quick answers give it back, 2 % per interval.
	low := a.admittedShare()
	for range 3 {
		a.done(time.Millisecond, at(ms+10))
		ms += 110
		admitted(a, 1, at(ms))
	}
	if got := a.admittedShare(); got < low+0.055 || got > low+0.065 {
		t.Fatalf("share %.3f after three quick intervals from %.3f: want +0.06", got, low)
	}
	// Intervals with nothing answered while commands wait (stuck, not slow) give it back in
	// steps too.
	low = a.admittedShare()
	waiting := 0
	for waiting == 0 {
		waiting = admitted(a, 1, at(ms)) // admitted and not answered
	}
	for range 3 {
		ms += 110
		admitted(a, 1, at(ms))
	}
	if got := a.admittedShare(); got < low+0.055 || got > low+0.065 {
		t.Fatalf("share %.3f after three intervals without answers from %.3f, a command waiting: want +0.06", got, low)
	}
	// Idle (nothing answered, nothing waiting): all of it at once.
	a.done(time.Millisecond, at(ms+1))
	ms += 110
	admitted(a, 1, at(ms)) // ends the interval with that quick answer: +2 %
	for a.pending.Load() > 0 {
		a.done(time.Millisecond, at(ms+1))
	}
	ms += 110
	a.refusing(at(ms)) // the answers above were in this interval: +2 % again
	ms += 110
	a.refusing(at(ms)) // idle
	if got := a.admittedShare(); got != 1 {
		t.Fatalf("share %.3f after an idle interval: want 1", got)
	}
	if k := admitted(a, 50, at(ms)); k != 50 {
		t.Fatalf("admitted %d of 50 at a whole share", k)
	}
	// The hard bound.
	b := newTestAdmission(2)
	b.begin(t0)
	if !b.admit(at(0), false) || !b.admit(at(0), false) || b.admit(at(0), false) {
		t.Fatal("the bound on pending commands does not hold")
	}
	if p := b.pending.Load(); p != 2 {
		t.Fatalf("pending = %d, want 2", p)
	}
	// Ticks running late shed too, whatever the answers; on time again, the share comes back.
	c := newTestAdmission(1 << 20)
	c.begin(t0)
	late := time.Second
	c.lag, c.lagLimit = func() time.Duration { return late }, 25*time.Millisecond
	admitted(c, 1, at(0))
	c.done(time.Millisecond, at(10))
	admitted(c, 1, at(120))
	if got := c.admittedShare(); math.Abs(got-2.0/3) > 0.002 {
		t.Fatalf("share %.3f after an interval with the engine a second behind its schedule (and a quick answer): want a third less", got)
	}
	// Late ticks and a standing queue together: the deeper cut.
	c.done(time.Second, at(130))
	admitted(c, 1, at(240))
	if got := c.admittedShare(); math.Abs(got-4.0/9) > 0.002 {
		t.Fatalf("share %.3f after late ticks and a standing queue from 2/3: want a third less again", got)
	}
	late = 0
	for i := range 5 {
		admitted(c, 1, at(360+110*i))
	}
	if c.admittedShare() != 1 {
		t.Fatalf("share %.3f once the engine was on time", c.admittedShare())
	}
	// A transport that asks before decoding (no admit, no answer) moves the state on as well.
	d := newTestAdmission(1 << 20)
	d.begin(t0)
	d.admit(at(0), false)
	d.done(time.Second, at(10))
	refused := 0
	for range 100 {
		if d.refusing(at(110)) {
			refused++
		}
	}
	if refused == 0 {
		t.Fatal("nothing refused after a slow interval")
	}
	for i := range 5 {
		d.refusing(at(220 + 110*i))
	}
	if d.admittedShare() != 1 {
		t.Fatalf("share %.3f five intervals later with nothing admitted: the state never moves without admit", d.admittedShare())
	}
	// Off.
	var off *admission = newAdmission(-1, 1, nil, nil, nil)
	if !off.admit(at(0), false) || !off.admit(at(0), false) {
		t.Fatal("admission control off refused a command")
	}
}

// admittedShare is the share of arrivals admitted now (1: all).
func (a *admission) admittedShare() float64 { return float64(a.share.Load()) / shareOne }

// A transport that asks refusing before decoding (natscmd) draws each command against the share
// once: the commands it lets in are then admitted (screened), so the share admitted is the
// share, not its square, and none is decoded only to be refused after.
func TestScreenedCommandsDrawTheShareOnce(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	a := newTestAdmission(1 << 20)
	a.begin(t0)
	admitted(a, 1, at(0))
	a.done(300*time.Millisecond, at(10)) // a standing queue: the share falls
	ms := 110
	for range 3 {
		ms += 110
		a.refusing(at(ms)) // ends the interval (nothing answered quickly in it)
		a.done(300*time.Millisecond, at(ms+1))
	}
	ms += 110
	a.refusing(at(ms))
	share := a.admittedShare()
	if share >= 0.9 || share <= 0.1 {
		t.Fatalf("share %.3f: the setup did not cut it", share)
	}
	in, after := 0, 0
	for range 1000 {
		if a.refusing(at(ms)) {
			continue // busy at the door, before decoding
		}
		in++
		if a.admit(at(ms), true) {
			after++
		}
	}
	if want := share * 1000; float64(in) < want-3 || float64(in) > want+3 {
		t.Fatalf("let in %d of 1000 at share %.3f", in, share)
	}
	if after != in {
		t.Fatalf("%d let in at the door, %d of them admitted after decoding: screened commands were drawn again", in, after)
	}
}
