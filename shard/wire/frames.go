package wire

import (
	"errors"
	"strconv"
	"time"
)

// Frames (DESIGN 8): published on core NATS, not stored.
const (
	FramePrefix = "tickfence.out"
	// The grant and tick a frame was made under, and its number among that tick's frames (0,
	// 1, …; absent means 0). A watcher drops a frame of an older grant than one it has seen, and,
	// under the same grant and on the same subject, one that is not after the last it showed.
	HeaderEpoch = "Tickfence-Epoch"
	HeaderToken = "Tickfence-Token"
	HeaderTick  = "Tickfence-Tick"
	HeaderFrame = "Tickfence-Frame"
	// HeaderStored is the instance's stored tick when the frame left: the last tick whose write
	// the store had acknowledged (every frame of a tick up to it is durable: no failover undoes
	// it). HeaderReverts counts how many times, under this grant, the owner went back to its
	// stored state after the store refused a write (absent: 0): the frames it made after its
	// stored tick before that were undone, though the tick goes on. Old clients ignore both.
	HeaderStored  = "Tickfence-Stored"
	HeaderReverts = "Tickfence-Reverts"
	// StoredToken is the last subject token of an instance's stored notices,
	// tickfence.out.<S>.<id>.~stored (StoredSubject): a message without payload and without
	// Tickfence-Tick, with Epoch, Token, Stored (and Reverts) headers, which the owner publishes
	// when an acknowledged write makes a frame it published stored and no frame of the tick that
	// follows says so. No topic can be named so (a topic is letters, digits, _ and -); an old
	// client that subscribes every topic finds no tick header in it and drops it as no frame.
	StoredToken = "~stored"
)

// StoredSubject is where an instance's stored notices are published:
// tickfence.out.<S>.<id>.~stored.
func StoredSubject(shard uint32, id string) string {
	return FrameSubject(shard, id, "") + "." + StoredToken
}

// FrameSubject is where an instance's frames are published: tickfence.out.<S>.<id>[.<topic>].
func FrameSubject(shard uint32, id, topic string) string {
	s := FramePrefix + "." + strconv.FormatUint(uint64(shard), 10) + "." + id
	if topic != "" {
		s += "." + topic
	}
	return s
}

// FrameStamp is what a frame's headers say about where it comes from.
type FrameStamp struct {
	Epoch, Token, Tick uint64
	Index              uint64 // among the frames of its tick
	// Stored is the instance's stored tick when the frame left (HeaderStored): a frame whose Tick
	// is at most the Stored of a later message of the same line (Line) is durable. A node that
	// sends no such header (one older than it) is taken at its word that nothing is undone:
	// Stored is then Tick.
	Stored uint64
	// Reverts is HeaderReverts (absent: 0).
	Reverts uint64
}

// Line is what frames share when they belong to one history of the instance: its grant and how
// often its owner went back to its stored state under it. A frame whose Line is newer than the
// one shown before may have a lower tick (a new owner restarts from its stored tick) or undo what
// was shown after its Stored.
type Line struct{ Epoch, Token, Reverts uint64 }

// Line is the stamp's line.
func (st FrameStamp) Line() Line { return Line{st.Epoch, st.Token, st.Reverts} }

// after reports whether l is newer than m: a higher epoch, token or (under one grant) reverts.
func (l Line) after(m Line) bool {
	if l.Epoch != m.Epoch {
		return l.Epoch > m.Epoch
	}
	if l.Token != m.Token {
		return l.Token > m.Token
	}
	return l.Reverts > m.Reverts
}

// ParseFrameStamp reads a frame's stamp headers (get is nats.Header.Get or the like).
func ParseFrameStamp(get func(string) string) (FrameStamp, error) {
	var st FrameStamp
	for _, f := range []struct {
		h string
		v *uint64
	}{{HeaderEpoch, &st.Epoch}, {HeaderToken, &st.Token}, {HeaderTick, &st.Tick}} {
		n, err := strconv.ParseUint(get(f.h), 10, 64)
		if err != nil {
			return FrameStamp{}, errors.New("frame without a valid " + f.h + " header")
		}
		*f.v = n
	}
	if v := get(HeaderFrame); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return FrameStamp{}, errors.New("frame with an invalid " + HeaderFrame + " header")
		}
		st.Index = n
	}
	st.Stored = st.Tick
	for _, f := range []struct {
		h string
		v *uint64
	}{{HeaderStored, &st.Stored}, {HeaderReverts, &st.Reverts}} {
		if v := get(f.h); v != "" {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return FrameStamp{}, errors.New("frame with an invalid " + f.h + " header")
			}
			*f.v = n
		}
	}
	return st, nil
}

// StoredNotice is what a stored notice says: under the line, the instance's ticks up to Stored
// are stored.
type StoredNotice struct {
	Line
	Stored uint64
}

// ParseStoredNotice reads a stored notice's headers (get is nats.Header.Get or the like).
func ParseStoredNotice(get func(string) string) (StoredNotice, error) {
	var n StoredNotice
	for _, f := range []struct {
		h   string
		v   *uint64
		opt bool
	}{{HeaderEpoch, &n.Epoch, false}, {HeaderToken, &n.Token, false}, {HeaderStored, &n.Stored, false}, {HeaderReverts, &n.Reverts, true}} {
		v := get(f.h)
		if v == "" && f.opt {
			continue
		}
		x, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return StoredNotice{}, errors.New("stored notice without a valid " + f.h + " header")
		}
		*f.v = x
	}
	return n, nil
}

// FrameFilter applies the watcher's rule for one instance: a frame passes only if its (epoch,
// token) is the highest seen on any of the instance's subjects, and, under that grant, it comes
// after the last frame shown on its own subject (topic) by (tick, index). A zombie's frames pass
// only until the new owner's first frame does; frames of one tick all pass, in order; topics are
// ordered each on its own (NATS orders one publisher's messages per subject, not across them).
// Under one grant, a frame of fewer Reverts than one seen is dropped too (it was made in a
// history its owner went back from), and one of more starts every topic again, as a new grant
// does: the rule orders frames by Line.
//
// One forged frame (only a node's credential may publish frames, DESIGN 9) must not hide the real
// owner's for long: stamped with a grant no owner holds, or with the owner's own grant and a tick
// far ahead, it would otherwise hide every later frame. So what a watcher follows holds only
// while it is fed: once the followed grant has passed nothing for Stale, a frame under another
// grant is shown and its grant followed; once a topic has passed nothing for Stale while its
// grant's frames keep coming, the next one is shown and that topic starts again from it. A
// watcher that can read the store also sets Verify, and follows a grant only if it is the shard's
// current one. The zero value is ready (Stale 0: DefaultFrameStale).
type FrameFilter struct {
	// Stale is how long what is followed may pass nothing before other frames are shown
	// (0: DefaultFrameStale; negative: never).
	Stale time.Duration
	// Verify, if set, returns the current grant of the instance's shard (its epoch and token),
	// read when a frame would make the watcher follow another grant: a frame under a grant that
	// is not the shard's current one is dropped. An error lets the frame be judged without it.
	Verify func() (epoch, token uint64, err error)

	seen    bool
	epoch   uint64
	token   uint64
	reverts uint64
	at      time.Time            // when a frame of the followed grant last passed
	last    map[string]lastShown // per topic, under the followed grant
}

type lastShown struct {
	tick, index uint64
	at          time.Time
}

// DefaultFrameStale is FrameFilter's Stale unless set: a few frames' time at any tick rate.
const DefaultFrameStale = 2 * time.Second

// Pass reports whether a frame on topic ("" for the main subject) with this stamp is shown, and
// remembers it if so.
func (f *FrameFilter) Pass(topic string, st FrameStamp) bool { return f.PassAt(topic, st, time.Now()) }

// PassAt is Pass at time now.
func (f *FrameFilter) PassAt(topic string, st FrameStamp, now time.Time) bool {
	stale := f.Stale
	if stale == 0 {
		stale = DefaultFrameStale
	}
	silent := func(since time.Time) bool { return stale > 0 && now.Sub(since) > stale }
	followed := Line{f.epoch, f.token, f.reverts}
	newer, older := st.Line().after(followed), followed.after(st.Line())
	switch {
	case !f.seen, newer, older && silent(f.at):
		if f.Verify != nil {
			if e, tok, err := f.Verify(); err == nil && (st.Epoch != e || st.Token != tok) {
				return false // not the shard's current grant: a zombie's, or forged
			}
		}
		// A grant to follow: a newer one, or another after the followed one fell silent.
		f.seen, f.epoch, f.token, f.reverts = true, st.Epoch, st.Token, st.Reverts // every topic starts again
		f.last = map[string]lastShown{}
	case older:
		return false // an older grant: a zombie, or a frame overtaken on the wire
	default:
		if l, ok := f.last[topic]; ok && (st.Tick < l.tick || st.Tick == l.tick && st.Index <= l.index) && !silent(l.at) {
			return false // not after the last one shown on this subject
		}
	}
	f.at = now
	f.last[topic] = lastShown{st.Tick, st.Index, now}
	return true
}
