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
)

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
	return st, nil
}

// FrameFilter applies the watcher's rule for one instance: a frame passes only if its (epoch,
// token) is the highest seen on any of the instance's subjects, and, under that grant, it comes
// after the last frame shown on its own subject (topic) by (tick, index). A zombie's frames pass
// only until the new owner's first frame does; frames of one tick all pass, in order; topics are
// ordered each on its own (NATS orders one publisher's messages per subject, not across them).
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

	seen  bool
	epoch uint64
	token uint64
	at    time.Time            // when a frame of the followed grant last passed
	last  map[string]lastShown // per topic, under the followed grant
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
	newer := st.Epoch > f.epoch || st.Epoch == f.epoch && st.Token > f.token
	older := st.Epoch < f.epoch || st.Epoch == f.epoch && st.Token < f.token
	switch {
	case !f.seen, newer, older && silent(f.at):
		if f.Verify != nil {
			if e, tok, err := f.Verify(); err == nil && (st.Epoch != e || st.Token != tok) {
				return false // not the shard's current grant: a zombie's, or forged
			}
		}
		// A grant to follow: a newer one, or another after the followed one fell silent.
		f.seen, f.epoch, f.token = true, st.Epoch, st.Token // every topic starts again
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
