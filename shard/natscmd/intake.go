package natscmd

import "time"

// intake estimates how long the command being handled waited in its subscription's queue, between
// the connection reading it and the handler getting it. The NATS client does not stamp messages,
// so this waiting is invisible from the handler, and under overload it is most of a command's
// round trip: a node that can neither answer nor refuse as fast as commands arrive builds a queue
// there, answers commands whose clients have given up, and the admission control, timing commands
// from the handler on, never sees why.
//
// Each time the handler runs it sees how many messages have arrived so far (delivered to it plus
// queued behind the current one). The queue is first in, first out, so the k-th message had
// arrived by the first of those sightings that counted at least k arrivals: its wait is at least
// the time since that sighting. The estimate is that lower bound. It never exceeds the real wait
// (a burst into an idle subscription is seen whole at once, so its commands are not refused for
// an imagined wait), and while a queue stands, when sightings are as frequent as the handler runs,
// it falls short by about the time between two of them. A handler stalled (a slow tick holding
// its instance, a starved CPU) sights nothing: what arrived meanwhile is dated by the run after
// the stall, and its wait is underestimated by up to the stall. One per subscription, used from
// its handler only (the client calls it one message at a time).
type intake struct {
	// sightings in order, oldest first, from head on; arrivals strictly increasing.
	seen []sighting
	head int
}

type sighting struct {
	at      time.Time
	arrived uint64
}

// maxSightings bounds the memory of a queue that stands long: at it, the sightings are thinned.
const maxSightings = 1024

// thin keeps, of the live sightings, the first, the last, and those at least 1/512 of the time
// between them apart, about half of them. The messages a dropped sighting dated are dated by the
// next one kept, later: their estimate is lower, never higher, by at most that 1/512 of the
// queue's span. (Refusing new sightings instead, as a first version did, dated every message that
// arrived while the handler worked through a burst by one later sighting, and that gap grew with
// each generation of sightings: 500 ms short of a 1 s wait in a review's simulation.)
func (q *intake) thin() {
	live := q.seen[q.head:]
	step := max(live[len(live)-1].at.Sub(live[0].at)/(maxSightings/2), 1)
	kept := q.seen[:1]
	kept[0] = live[0]
	for i, s := range live[1:] {
		if i == len(live)-2 || s.at.Sub(kept[len(kept)-1].at) >= step {
			kept = append(kept, s) // in place: kept never passes the one being read
		}
	}
	q.seen, q.head = kept, 0
}

// wait takes now, the messages delivered to the handler so far (this one included) and the
// messages still queued behind it, and returns the estimated wait of this one.
func (q *intake) wait(now time.Time, delivered, behind uint64) time.Duration {
	arrived := delivered + behind
	if n := len(q.seen); n == q.head || q.seen[n-1].arrived < arrived {
		if n-q.head >= maxSightings {
			q.thin()
			n = len(q.seen)
		}
		if q.head > 0 && q.head >= n/2 { // reuse the front's space
			n = copy(q.seen, q.seen[q.head:])
			q.seen, q.head = q.seen[:n], 0
		}
		q.seen = append(q.seen, sighting{now, arrived})
	}
	for q.head < len(q.seen) && q.seen[q.head].arrived < delivered {
		q.head++
	}
	waited := now.Sub(q.seen[q.head].at) // there is one: the newest sighting counts this one
	if behind == 0 {
		// Everything that arrived has been delivered: no sighting is needed again.
		q.seen, q.head = q.seen[:0], 0
	}
	return waited
}
