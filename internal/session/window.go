// Package session keeps a client's side of its compact-form session with one instance (DESIGN 5,
// client sessions): which numbers are open, and which answers the owner still keeps. The Go
// client and tickbench's open-loop generator share it.
package session

import (
	"fmt"
	"slices"

	"github.com/tickfence/tickfence/store"
)

// Window is a client's numbers to one instance. Its owner locks it, and opens numbers under that
// lock in increasing order, so no ack of the instance can cover a number before it is open.
type Window struct {
	open []uint64 // opened and not settled (no final answer, not given up), ascending
	sent []uint64 // opened and not covered by an ack sent yet, ascending: the owner keeps their answers
}

// Ack is the highest number up to which every command to the instance is settled; last is the
// client's highest number yet, the ack while nothing is open.
func (w *Window) Ack(last uint64) uint64 {
	if len(w.open) > 0 {
		return w.open[0] - 1
	}
	return last
}

// Open opens command seq (higher than every number opened before) and returns the ack to send
// with it; false, and nothing opened, if the owner would refuse it: it keeps at most
// store.MaxClientInFlight answers above the ack, and an answered command stays there until every
// older one is settled.
func (w *Window) Open(seq uint64) (ack uint64, ok bool) {
	if n := len(w.open); n > 0 && seq <= w.open[n-1] {
		// Out of order, open[0] would no longer be the lowest open number, and the ack could
		// cover an open command: a caller's bug, never to be sent.
		panic(fmt.Sprintf("session: number %d opened after %d", seq, w.open[n-1]))
	}
	ack = w.Ack(seq - 1)
	k := 0
	for k < len(w.sent) && w.sent[k] <= ack {
		k++
	}
	w.sent = w.sent[k:]
	if len(w.sent) >= store.MaxClientInFlight {
		return 0, false
	}
	w.open = append(w.open, seq)
	w.sent = append(w.sent, seq)
	return ack, true
}

// Settle: command seq has its final answer or was given up, and is never sent again. It reports
// whether nothing is open any more (the ack is then the client's last number, which covers
// everything sent: the window may be dropped).
func (w *Window) Settle(seq uint64) (idle bool) {
	if i := slices.Index(w.open, seq); i >= 0 {
		w.open = slices.Delete(w.open, i, i+1)
	}
	return len(w.open) == 0
}

// Holding reports numbers sent and not covered by an ack sent yet: the owner keeps their answers.
func (w *Window) Holding() bool { return len(w.sent) > 0 }

// Reset empties the window for reuse, keeping its memory: the same as a new Window (a client
// drops an idle one, whose ack covers everything sent, and may reuse it for another instance).
func (w *Window) Reset() {
	w.open, w.sent = w.open[:0], w.sent[:0]
}
