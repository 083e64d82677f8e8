package natscmd

import (
	"math/rand/v2"
	"testing"
	"time"
)

// simulated is one command through the simulated handler.
type simulated struct {
	estimated, waited time.Duration
	refused           bool
}

// simulate runs Serve's handler against arrival times (offsets, sorted): a first-in, first-out
// queue handled one message at a time, taking serve for a command let in and refuse for one refused
// (estimated wait over limit), and returns what the estimate said of each against its real wait.
func simulate(arrivals []time.Duration, serve, refuse, limit time.Duration) []simulated {
	var q intake
	t0 := time.Unix(1000, 0)
	out := make([]simulated, 0, len(arrivals))
	now := time.Duration(0)
	n := 0 // arrived by now
	for k := range arrivals {
		now = max(now, arrivals[k]) // idle until it arrives
		for n < len(arrivals) && arrivals[n] <= now {
			n++
		}
		est := q.wait(t0.Add(now), uint64(k+1), uint64(n-k-1))
		c := simulated{estimated: est, waited: now - arrivals[k], refused: est > limit}
		out = append(out, c)
		if c.refused {
			now += refuse
		} else {
			now += serve
		}
	}
	return out
}

func uniform(from, to time.Duration, perSec float64, out []time.Duration) []time.Duration {
	step := time.Duration(float64(time.Second) / perSec)
	for t := from; t < to; t += step {
		out = append(out, t)
	}
	return out
}

func burst(at time.Duration, n int, out []time.Duration) []time.Duration {
	for range n {
		out = append(out, at)
	}
	return out
}

// The estimate is a lower bound of the real wait, short of it by about the time between two runs
// of the handler: never a refusal for a wait that did not happen, and, while the handler keeps
// running, no late command let in as fresh. Scenarios from two reviews: of a first version, which
// divided the queue by the arrival rate of the last 50 ms and refused bursts for waits of 25 s
// that lasted 50 ms, and let in commands that had waited 860 ms once arrivals stopped; and of the
// second, whose bound on sightings let a gap grow (the burst into 15 000/s: 132 ms short).
func TestIntakeEstimateIsALowerBoundOfTheWait(t *testing.T) {
	const limit = 250 * time.Millisecond
	poisson := func(perSec float64, d time.Duration) []time.Duration {
		rng := rand.New(rand.NewPCG(1, 2))
		var a []time.Duration
		for t := time.Duration(0); t < d; {
			t += time.Duration(rng.ExpFloat64() / perSec * float64(time.Second))
			a = append(a, t)
		}
		return a
	}
	for _, c := range []struct {
		name           string
		arrivals       []time.Duration
		serve, refuse  time.Duration
		wantRefusals   bool // a queue over the limit stands at some point
		wantNoRefusals bool // no wait ever reaches the limit
	}{
		{"standing queue, 1 000/s against 500/s", uniform(0, 2*time.Second, 1000, nil), 2 * time.Millisecond, 5 * time.Microsecond, true, false},
		{"burst of 5 000 into an idle subscription with 100/s besides",
			uniform(100*time.Millisecond+time.Microsecond, 400*time.Millisecond, 100, burst(100*time.Millisecond, 5000, uniform(0, 100*time.Millisecond, 100, nil))),
			20 * time.Microsecond, 2 * time.Microsecond, false, true},
		{"burst of 300 onto a low-rate standing queue (120/s against 100/s)",
			uniform(501*time.Millisecond, 800*time.Millisecond, 120, burst(500*time.Millisecond, 300, uniform(0, 500*time.Millisecond, 120, nil))),
			10 * time.Millisecond, 5 * time.Microsecond, true, false},
		{"overload that stops: 1 500/s for 300 ms against 1 000/s", uniform(0, 300*time.Millisecond, 1500, nil), time.Millisecond, 5 * time.Microsecond, false, true},
		{"overload that stops after a second: 2 000/s against 500/s", uniform(0, time.Second, 2000, nil), 2 * time.Millisecond, 5 * time.Microsecond, true, false},
		{"a burst of 2 000 into 15 000/s against 10 000/s (queues over maxSightings runs long)",
			uniform(300*time.Millisecond+time.Microsecond, 5*time.Second, 15000, burst(300*time.Millisecond, 2000, uniform(0, 300*time.Millisecond, 15000, nil))),
			100 * time.Microsecond, 3 * time.Microsecond, true, false},
		{"Poisson at 45/s, 90 % busy", poisson(45, 60*time.Second), 20 * time.Millisecond, 5 * time.Microsecond, false, false},
		{"Poisson at 900/s, 90 % busy", poisson(900, 20*time.Second), time.Millisecond, 5 * time.Microsecond, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			refused, worstShort := 0, time.Duration(0)
			for k, s := range simulate(c.arrivals, c.serve, c.refuse, limit) {
				if s.estimated > s.waited {
					t.Fatalf("command %d: estimated %v, waited %v", k, s.estimated, s.waited)
				}
				worstShort = max(worstShort, s.waited-s.estimated)
				if s.refused {
					refused++
				}
			}
			t.Logf("%d commands, %d refused, estimate short of the wait by at most %v", len(c.arrivals), refused, worstShort)
			// One run of the handler, plus what thinning the sightings may cost: a few 512ths of a wait.
			if bound := max(c.serve, c.refuse) + limit/128; worstShort > bound {
				t.Errorf("estimate short of the wait by %v, more than one run of the handler and 1/128 of the limit (%v)", worstShort, bound)
			}
			if c.wantRefusals && refused == 0 {
				t.Error("none refused")
			}
			if c.wantNoRefusals && refused > 0 {
				t.Errorf("%d refused", refused)
			}
		})
	}
}

// A queue standing longer than maxSightings runs of the handler keeps a bounded memory (the
// sightings live, and their slice, reused from the front) and still never overestimates.
func TestIntakeMemoryIsBounded(t *testing.T) {
	r := simulate(uniform(0, 10*time.Second, 2000, nil), time.Millisecond, time.Millisecond, time.Hour) // never refuses: the queue grows to 10 000
	for k, s := range r {
		if s.estimated > s.waited {
			t.Fatalf("command %d: estimated %v, waited %v", k, s.estimated, s.waited)
		}
	}
	last := r[len(r)-1]
	t.Logf("last command waited %v, estimated %v", last.waited, last.estimated)
	if last.estimated < last.waited/2 {
		t.Errorf("last command estimated %v of a %v wait", last.estimated, last.waited)
	}
	// The intake itself: drive it directly and look at its memory.
	q2 := intake{}
	t0 := time.Unix(0, 0)
	for k := uint64(1); k <= 100000; k++ {
		q2.wait(t0.Add(time.Duration(k)*time.Millisecond), k, k) // twice as many arrived as delivered
	}
	if len(q2.seen)-q2.head > maxSightings || cap(q2.seen) > 3*maxSightings {
		t.Errorf("%d sightings kept (capacity %d), bound %d", len(q2.seen)-q2.head, cap(q2.seen), maxSightings)
	}
}
