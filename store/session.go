package store

import (
	"slices"
	"time"
)

// The compact request form (DESIGN 5, client sessions): a client names itself once (a client ID,
// unique to one run of it) and numbers its commands to each instance 1, 2, 3…; with each command
// it also says up to which number it has every answer (its ack). The instance keeps, per client,
// only the answers it could still be asked for again: those of the applied commands above the
// ack. What a record remembers is then bounded by what clients have in flight, not by how many
// commands it has seen — the Raft dissertation's client sessions, Kafka's idempotent producer.
const (
	// MaxClientInFlight bounds the applied, unacknowledged commands of one client to one
	// instance; a client past it is refused until it acknowledges answers.
	MaxClientInFlight = 64
	// MaxClientSessions bounds the client sessions one record keeps; past it the least recently
	// seen one is forgotten (its retransmissions would then be new commands).
	MaxClientSessions = 64
	// ClientSessionTTL is how long a session is kept after its last command: a client must not
	// retransmit a command for longer than this.
	ClientSessionTTL = 5 * time.Minute
)

// ClientSession is what a record keeps of one client.
type ClientSession struct {
	ID string `msgpack:"id"`
	// Ack: the client has every answer up to this sequence number and never sends them again.
	Ack uint64 `msgpack:"ack"`
	// Seen is the owner's wall clock (Unix ms) at the client's last command: only to expire it.
	Seen int64 `msgpack:"seen"`
	// Done are the applied commands above Ack with their first answers, by ascending Seq.
	Done []SeqResult `msgpack:"done,omitempty"`
}

// SeqResult is one applied command of a session.
type SeqResult struct {
	Seq         uint64 `msgpack:"seq"`
	Fingerprint uint64 `msgpack:"fp"`
	Result      []byte `msgpack:"res"`
}

// SessionCheck is what a record knows of one numbered command.
type SessionCheck int

const (
	SessionNew       SessionCheck = iota // not applied: apply it
	SessionDuplicate                     // applied: answer with the first result (SeqResult)
	SessionStale                         // at or below the client's ack: the client promised never to send it again
	SessionFull                          // MaxClientInFlight unacknowledged answers already: refuse it
)

func (r *Record) session(client string) int {
	for i := range r.Clients {
		if r.Clients[i].ID == client {
			return i
		}
	}
	return -1
}

// CheckSession looks up command seq of client, as if the client's ack had been applied first.
// It changes nothing.
func (r *Record) CheckSession(client string, seq, ack uint64) (SessionCheck, SeqResult) {
	i := r.session(client)
	if i < 0 {
		return SessionNew, SeqResult{}
	}
	s := &r.Clients[i]
	if seq <= s.Ack {
		return SessionStale, SeqResult{}
	}
	live := 0
	for _, d := range s.Done {
		if d.Seq == seq {
			return SessionDuplicate, d
		}
		if d.Seq > ack {
			live++
		}
	}
	if live >= MaxClientInFlight {
		return SessionFull, SeqResult{}
	}
	return SessionNew, SeqResult{}
}

// RememberSession records an applied command of a client and the client's ack, at the owner's
// wall clock now. It never modifies what the record held (records in flight share it): the
// sessions are copied.
func (r *Record) RememberSession(client string, ack uint64, q SeqResult, now time.Time) {
	ms := now.UnixMilli()
	out := make([]ClientSession, 0, len(r.Clients)+1)
	var mine *ClientSession
	for _, s := range r.Clients {
		switch {
		case s.ID == client:
			out = append(out, s)
			mine = &out[len(out)-1]
		case ms-s.Seen <= ClientSessionTTL.Milliseconds():
			out = append(out, s)
		}
	}
	if mine == nil {
		if len(out) >= MaxClientSessions {
			oldest := 0
			for i := range out {
				if out[i].Seen < out[oldest].Seen {
					oldest = i
				}
			}
			out = slices.Delete(out, oldest, oldest+1)
		}
		out = append(out, ClientSession{ID: client})
		mine = &out[len(out)-1]
	}
	mine.Seen = ms
	mine.Ack = max(mine.Ack, ack)
	done := make([]SeqResult, 0, len(mine.Done)+1)
	for _, d := range mine.Done {
		if d.Seq > mine.Ack {
			done = append(done, d)
		}
	}
	if q.Seq > mine.Ack {
		i, _ := slices.BinarySearchFunc(done, q.Seq, func(d SeqResult, seq uint64) int {
			switch {
			case d.Seq < seq:
				return -1
			case d.Seq > seq:
				return 1
			}
			return 0
		})
		done = slices.Insert(done, i, q)
	}
	mine.Done = done
	r.Clients = out
}
