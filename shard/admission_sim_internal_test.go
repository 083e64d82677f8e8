package shard

import (
	"math"
	"testing"
	"time"
)

// simulate drives the admission type ms by ms in front of a FIFO node that answers capC commands/s,
// each after a base latency plus its wait in the queue, with an open loop offering k times that.
// It returns how many admitted commands were answered after the client's timeout, and how many
// were admitted.
func simulate(capC, k float64, maxPending int, base, timeout, dur time.Duration) (late, admitted int) {
	t0 := time.Unix(1000, 0)
	a := newTestAdmission(maxPending)
	a.begin(t0)
	var q []time.Time
	arr, svc := 0.0, 0.0
	for ms := 0; ms < int(dur/time.Millisecond); ms++ {
		now := t0.Add(time.Duration(ms) * time.Millisecond)
		for arr += capC * k / 1000; arr >= 1; arr-- {
			if a.admit(now, false) {
				q = append(q, now)
				admitted++
			}
		}
		for svc += capC / 1000; svc >= 1 && len(q) > 0; svc-- {
			soj := now.Sub(q[0]) + base
			q = q[1:]
			a.done(soj, now)
			if soj > timeout {
				late++
			}
		}
		if len(q) == 0 {
			svc = math.Min(svc, 1)
		}
	}
	return late, admitted
}

// A sudden overload of three times a node's capacity must not build a queue that outlasts the
// clients' timeout before admission has cut it: the cut for a standing queue far over the target
// is deep (a tenth per interval took 2 s of answers that came after the client gave up, at 20 k/s
// with the default bound of 50 000 pending commands).
func TestSuddenOverloadIsCutBeforeClientsTimeOut(t *testing.T) {
	for _, c := range []struct{ capC, k float64 }{{20000, 3}, {20000, 2}, {64000, 3}, {64000, 10}} {
		late, adm := simulate(c.capC, c.k, 50000, 100*time.Millisecond, time.Second, 10*time.Second)
		t.Logf("capacity %.0f/s at %.0f×: %d admitted, %d answered after 1 s", c.capC, c.k, adm, late)
		if late > 0 {
			t.Errorf("capacity %.0f/s at %.0f×: %d of %d admitted commands answered after the 1 s client timeout", c.capC, c.k, late, adm)
		}
	}
}
