package natscmd

import "time"

// intake estimates how long the command being handled waited in its subscription's queue, between
// the connection reading it and the handler getting it. The NATS client does not stamp messages,
// so this waiting is invisible from the handler, and under overload it is most of a command's
// round trip: a node that can neither answer nor refuse as fast as commands arrive builds a queue
// there, answers commands whose clients have given up, and the admission control, timing commands
// from the handler on, never sees why.
//
// The queue is first in, first out: the commands behind the one being handled are those that
// arrived while it waited, so its wait is their number over the arrival rate. The rate is measured
// over windows of at least intakeWindow during which the queue never emptied (arrivals then all
// queue up; an idle gap before a burst would make the rate look low and the wait long), so the
// estimate is for standing queues, the ones that matter; it is 0 while none is known.
// One per subscription, used from its handler only (the client calls it one message at a time).
type intake struct {
	rate    float64   // arrivals per second over the last whole window; 0: not known
	t0      time.Time // start of the current window; zero: none open
	arrived uint64    // arrivals counted at t0
}

const intakeWindow = 50 * time.Millisecond

// wait takes now, the messages delivered to the handler so far (this one included) and the
// messages still queued behind it, and returns the estimated wait of this one.
func (q *intake) wait(now time.Time, delivered, behind uint64) time.Duration {
	arrived := delivered + behind
	if behind == 0 {
		// The queue is empty behind this one: a window through an idle gap would count the gap.
		q.t0, q.rate = time.Time{}, 0
		return 0
	}
	switch dt := now.Sub(q.t0); {
	case q.t0.IsZero():
		q.t0, q.arrived = now, arrived
	case dt >= intakeWindow:
		q.rate = float64(arrived-q.arrived) / dt.Seconds()
		q.t0, q.arrived = now, arrived
	}
	if q.rate <= 0 {
		return 0
	}
	return time.Duration(float64(behind) / q.rate * float64(time.Second))
}
