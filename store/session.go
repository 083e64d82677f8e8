package store

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"slices"
	"strings"
	"time"
)

// TTLTicks converts a duration into ticks of an instance ticking every period (at least 1).
func TTLTicks(d, period time.Duration) uint64 {
	if period <= 0 {
		return 1
	}
	return max(uint64(d/period), 1)
}

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
	// MaxClientSessions bounds the client sessions one record keeps. Past it, a new client takes
	// the place of the least recently seen session that holds no unacknowledged answer; if every
	// one holds some, of the least recently seen one that holds at most MaxGoneAnswers, which the
	// record then remembers as let go of (GoneSession): its commands are never applied again,
	// and a retransmission of one is answered answer_forgotten. Only when neither exists (or
	// MaxGoneSessions are remembered already) is the new client refused (busy) until a session
	// acknowledges or expires.
	MaxClientSessions = 64
	// MaxGoneSessions bounds the sessions a record remembers as let go of while they held
	// answers (a client that vanished, or whose acknowledgement was lost); each is forgotten
	// when it would have expired (ClientSessionTTL after its last command).
	MaxGoneSessions = 128
	// MaxGoneAnswers: a session holding more unacknowledged answers than this is not let go of
	// (a client with many commands in flight is no vanished one).
	MaxGoneAnswers = 4
	// GoneSilence: a session seen within this share of ClientSessionTTL (2 s of its 5 minutes)
	// is not let go of: its client is active, and an answer of it may still be on its way.
	GoneSilence = 150 // ClientSessionTTL / GoneSilence
	// MaxSenderGone bounds the live GoneSessions of one untrusted sender's sessions that its own
	// new clients let go of (MaxSenderSessions): past it, its new client is refused, so that one
	// player cycling client IDs cannot fill MaxGoneSessions and lock every client out.
	MaxSenderGone = 4
	// ClientSessionTTL is how long a session is kept after its last command, measured in the
	// instance's own ticks (never by comparing wall clocks of different owners): a client must
	// not retransmit a command for longer than this.
	ClientSessionTTL = 5 * time.Minute
	// MaxSenderSessions bounds the client sessions one untrusted sender (SenderOf) holds in one
	// record: past it, its new client takes the place of its own least recently seen session
	// that holds no unacknowledged answer, or is refused. One player cannot fill an instance's
	// sessions and lock the others out (DESIGN 9: exactly-once state is per sender).
	MaxSenderSessions = 4
	// MaxSenderRequests bounds the opaque request IDs one untrusted sender holds in a record's
	// window: past it, its own oldest is forgotten, never another sender's.
	MaxSenderRequests = 32
)

// SenderOf is the sender an ID is filed under: the "s:<digest> " prefix the command transport
// puts before the request and client IDs of an untrusted sender (no ID a client writes holds a
// space), or "" for a trusted sender's.
func SenderOf(id string) string {
	if len(id) > 2 && id[0] == 's' && id[1] == ':' {
		if i := strings.IndexByte(id, ' '); i > 0 {
			return id[:i+1]
		}
	}
	return ""
}

// ClientSession is what a record keeps of one client.
type ClientSession struct {
	ID string `msgpack:"id"`
	// Ack: the client has every answer up to this sequence number and never sends them again.
	Ack uint64 `msgpack:"ack"`
	// Seen is the instance's tick at the client's last command: only to expire it.
	Seen uint64 `msgpack:"seen"`
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
	SessionNew        SessionCheck = iota // not applied: apply it
	SessionDuplicate                      // applied: answer with the first result (SeqResult)
	SessionStale                          // at or below the client's ack: the client promised never to send it again
	SessionFull                           // MaxClientInFlight unacknowledged answers already: refuse it
	SessionNoRoom                         // a new client, and every session holds unacknowledged answers
	SessionSenderFull                     // a new client of a sender whose MaxSenderSessions sessions all hold unacknowledged answers
	SessionForgotten                      // applied, but its session was let go of with its answer (GoneSession): never apply it again
)

// GoneSession is what a record keeps of a session it let go of while it held answers, to make
// room for a new client: which of the client's commands were applied. Their answers are gone,
// but none of them is applied again: a retransmission is answered answer_forgotten (applied,
// answer no longer kept), and the client's later commands start a new session.
type GoneSession struct {
	// Client is ClientHash of the client's ID (8 bytes instead of up to 80).
	Client uint64 `msgpack:"h"`
	// Ack: every command up to it was applied or acknowledged.
	Ack uint64 `msgpack:"ack"`
	// Done are the numbers above Ack that were applied, ascending (at most MaxGoneAnswers).
	Done []uint64 `msgpack:"done,omitempty"`
	// Seen is the session's last command (tick): the entry expires when the session would have.
	Seen uint64 `msgpack:"seen"`
	// Sender is ClientHash of the client's untrusted sender (SenderOf), 0 for a trusted one.
	Sender uint64 `msgpack:"s,omitempty"`
}

// senderHash is the Sender of a GoneSession of client id.
func senderHash(id string) uint64 {
	if p := SenderOf(id); p != "" {
		return ClientHash(p)
	}
	return 0
}

// ClientHash is the first 8 bytes of the SHA-256 of a client ID, as GoneSession keeps it. Two IDs
// of one hash could only make the later one's commands look applied (answer_forgotten), never
// apply anything twice; and finding an ID with the hash of a given one (another client's, to have
// its commands answered forgotten and dropped) takes about 2^64 tries with SHA-256 — with FNV-1a it
// took a player under a second (review of issue 34).
func ClientHash(id string) uint64 {
	sum := sha256.Sum256([]byte(id))
	return binary.BigEndian.Uint64(sum[:8])
}

func (g *GoneSession) live(tick, ttl uint64) bool { return tick < g.Seen || tick-g.Seen <= ttl }

// applied reports whether command seq of the gone session was applied (or acknowledged).
func (g *GoneSession) applied(seq uint64) bool {
	_, found := slices.BinarySearch(g.Done, seq)
	return seq <= g.Ack || found
}

// gone returns the live entry of a client let go of, or nil.
func (r *Record) gone(h, tick, ttl uint64) *GoneSession {
	for i := range r.Gone {
		if g := &r.Gone[i]; g.Client == h && g.live(tick, ttl) {
			return g
		}
	}
	return nil
}

// goneRoom reports whether a session may be let go of: fewer than MaxGoneSessions live entries,
// and, for the sessions of untrusted sender p making room for its own new client, fewer than
// MaxSenderGone of p's.
func (r *Record) goneRoom(tick, ttl uint64, p string) bool {
	n, mine := 0, 0
	sender := uint64(0)
	if p != "" {
		sender = ClientHash(p)
	}
	for i := range r.Gone {
		if g := &r.Gone[i]; g.live(tick, ttl) {
			n++
			if sender != 0 && g.Sender == sender {
				mine++
			}
		}
	}
	return n < MaxGoneSessions && mine < MaxSenderGone
}

// letGo returns the entry a session holding answers becomes when it is let go of (merged with an
// earlier entry of its client), and whether it may be: at most MaxGoneAnswers numbers above its
// ack.
func (r *Record) letGo(s *ClientSession, tick, ttl uint64) (GoneSession, bool) {
	h := ClientHash(s.ID)
	g := GoneSession{Client: h, Ack: s.Ack, Seen: s.Seen, Sender: senderHash(s.ID)}
	var done []uint64
	if old := r.gone(h, tick, ttl); old != nil {
		g.Ack = max(g.Ack, old.Ack)
		g.Seen = max(g.Seen, old.Seen)
		done = append(done, old.Done...)
	}
	for _, d := range s.Done {
		done = append(done, d.Seq)
	}
	slices.Sort(done)
	done = slices.Compact(done)
	k := 0
	for k < len(done) && done[k] <= g.Ack {
		k++
	}
	if done = done[k:]; len(done) > MaxGoneAnswers {
		return GoneSession{}, false
	}
	if len(done) > 0 {
		g.Done = done
	}
	return g, true
}

// evictable reports whether session s may give its place to a new client: it holds no answer,
// or it may be let go of (letGo) while there is room for one more GoneSession.
func (r *Record) evictable(s *ClientSession, tick, ttl uint64, goneRoom bool) bool {
	if !s.holding() {
		return true
	}
	if !goneRoom || tick < s.Seen || tick-s.Seen < ttl/GoneSilence {
		return false
	}
	_, ok := r.letGo(s, tick, ttl)
	return ok
}

func (s *ClientSession) live(tick, ttl uint64) bool { return tick < s.Seen || tick-s.Seen <= ttl }

// holding reports unacknowledged answers (the client may still ask for them).
func (s *ClientSession) holding() bool { return len(s.Done) > 0 }

func (r *Record) session(client string) int {
	for i := range r.Clients {
		if r.Clients[i].ID == client {
			return i
		}
	}
	return -1
}

// CheckSession looks up command seq of client at instance tick, as if the client's ack had been
// applied first; ttl is ClientSessionTTL in ticks. It changes nothing.
func (r *Record) CheckSession(client string, seq, ack, tick, ttl uint64) (SessionCheck, SeqResult) {
	var g *GoneSession
	if len(r.Gone) > 0 {
		g = r.gone(ClientHash(client), tick, ttl)
	}
	i := r.session(client)
	if i < 0 {
		if g != nil && g.applied(seq) {
			return SessionForgotten, SeqResult{}
		}
		if p := SenderOf(client); p != "" {
			n, free := 0, false
			goneRoom := r.goneRoom(tick, ttl, p)
			for j := range r.Clients {
				if c := &r.Clients[j]; c.live(tick, ttl) && strings.HasPrefix(c.ID, p) {
					n++
					free = free || r.evictable(c, tick, ttl, goneRoom)
				}
			}
			if n >= MaxSenderSessions && !free {
				return SessionSenderFull, SeqResult{}
			}
		}
		live, room := 0, false
		goneRoom := r.goneRoom(tick, ttl, "")
		for j := range r.Clients {
			if c := &r.Clients[j]; c.live(tick, ttl) {
				live++
				room = room || r.evictable(c, tick, ttl, goneRoom)
			}
		}
		if live >= MaxClientSessions && !room {
			return SessionNoRoom, SeqResult{}
		}
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
	if g != nil && g.applied(seq) {
		return SessionForgotten, SeqResult{}
	}
	if live >= MaxClientInFlight {
		return SessionFull, SeqResult{}
	}
	return SessionNew, SeqResult{}
}

// RememberSession records an applied command of a client and the client's ack, at instance
// tick (ttl: ClientSessionTTL in ticks). It never changes what a copy of the record holds: the
// session list is copied, and a session's answers are appended past their length, as
// RememberRequest appends requests. A copy that must keep what it holds while this record goes on
// being remembered into (a write's snapshot) is taken with Capped. CheckSession must have said
// the command is new.
func (r *Record) RememberSession(client string, ack uint64, q SeqResult, tick, ttl uint64) {
	out := make([]ClientSession, 0, len(r.Clients)+1)
	var mine *ClientSession
	for _, s := range r.Clients {
		switch {
		case s.ID == client:
			out = append(out, s)
			mine = &out[len(out)-1]
		case s.live(tick, ttl):
			out = append(out, s)
		}
	}
	if mine == nil {
		if p := SenderOf(client); p != "" {
			if n := ownSessions(out, p); n >= MaxSenderSessions {
				out = r.evict(out, p, tick, ttl)
			}
		}
		if len(out) >= MaxClientSessions {
			out = r.evict(out, "", tick, ttl)
		}
		out = append(out, ClientSession{ID: client})
		mine = &out[len(out)-1]
	}
	mine.Seen = tick
	mine.Ack = max(mine.Ack, ack)
	mine.Done = unacked(mine.Done, mine.Ack)
	if q.Seq > mine.Ack {
		done := mine.Done
		i, _ := slices.BinarySearchFunc(done, q.Seq, func(d SeqResult, seq uint64) int { return cmp.Compare(d.Seq, seq) })
		if i == len(done) {
			done = append(done, q) // past the length of every copy's: theirs is capped
		} else {
			done = slices.Insert(slices.Clip(done), i, q) // a new array: a copy may hold this one
		}
		mine.Done = done
	}
	r.Clients = out
}

// AckSession applies an acknowledgement alone (no command) of client: the answers up to ack are
// dropped, and a session that then holds none may give its place to a new client. It reports
// whether anything changed. Like RememberSession it never changes what a copy holds.
func (r *Record) AckSession(client string, ack uint64) bool {
	i := r.session(client)
	if i < 0 || ack <= r.Clients[i].Ack {
		return false
	}
	out := slices.Clone(r.Clients)
	s := &out[i]
	s.Ack = ack
	s.Done = unacked(s.Done, ack)
	r.Clients = out
	return true
}

// TouchSession records that client was seen at tick (a retransmission, which changes nothing
// else): the sessions let go of first are those of the least recently seen clients. Like
// AckSession it never changes what a copy holds.
func (r *Record) TouchSession(client string, tick uint64) bool {
	i := r.session(client)
	if i < 0 || r.Clients[i].Seen >= tick {
		return false
	}
	out := slices.Clone(r.Clients)
	out[i].Seen = tick
	r.Clients = out
	return true
}

func ownSessions(out []ClientSession, p string) int {
	n := 0
	for i := range out {
		if strings.HasPrefix(out[i].ID, p) {
			n++
		}
	}
	return n
}

// evict removes from out (the caller's own copy of r's sessions, all live) the session that gives
// its place to a new client, among those of sender prefix p (all if p is ""): the least recently
// seen one holding no answer; else the least recently seen one that may be let go of, which r
// then remembers in Gone; else (CheckSession refuses that case: a record that got here anyway)
// the least recently seen.
func (r *Record) evict(out []ClientSession, p string, tick, ttl uint64) []ClientSession {
	free, gone, oldest := -1, -1, -1
	goneRoom := r.goneRoom(tick, ttl, p)
	for i := range out {
		s := &out[i]
		if !strings.HasPrefix(s.ID, p) {
			continue
		}
		if oldest < 0 || s.Seen < out[oldest].Seen {
			oldest = i
		}
		if !s.holding() {
			if free < 0 || s.Seen < out[free].Seen {
				free = i
			}
		} else if r.evictable(s, tick, ttl, goneRoom) && (gone < 0 || s.Seen < out[gone].Seen) {
			gone = i
		}
	}
	switch {
	case free >= 0:
		oldest = free
	case gone >= 0:
		g, _ := r.letGo(&out[gone], tick, ttl)
		kept := make([]GoneSession, 0, len(r.Gone)+1)
		for _, e := range r.Gone {
			if e.Client != g.Client && e.live(tick, ttl) {
				kept = append(kept, e)
			}
		}
		r.Gone = append(kept, g) // a new array: a copy of the record keeps its own
		oldest = gone
	case oldest < 0:
		return out
	}
	return slices.Delete(out, oldest, oldest+1)
}

// unacked returns the answers of done above ack: a tail of done, which is ascending by Seq
// (RememberSession keeps it so; DecodeRecord refuses a record that is not).
func unacked(done []SeqResult, ack uint64) []SeqResult {
	k := 0
	for k < len(done) && done[k].Seq <= ack {
		k++
	}
	return done[k:]
}

// Capped returns r with the remembered requests and every session's answers capped at their
// length (the session list is copied to hold them), so that RememberRequest and RememberSession
// on r, or on the copy, never write into what the other holds. A write's snapshot of a record the
// instance goes on changing is taken this way.
func (r Record) Capped() Record {
	r.Reqs = slices.Clip(r.Reqs)
	if len(r.Clients) > 0 {
		clients := make([]ClientSession, len(r.Clients))
		for i, c := range r.Clients {
			c.Done = slices.Clip(c.Done)
			clients[i] = c
		}
		r.Clients = clients
	}
	return r
}
