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
// One frame stamped with a grant no owner holds (a forgery: only a node's credential may publish
// frames, DESIGN 9) would otherwise hide every later frame of the real owner. So the highest grant
// seen holds only while it keeps sending: once it has sent nothing for Stale, a frame under
// another grant is shown and its grant becomes the one to follow. A watcher that can read the
// store also sets Verify, and a newer grant is followed only if the shard's current grant is at
// least that new. The zero value is ready (Stale 0: DefaultFrameStale).
type FrameFilter struct {
	// Stale is how long the followed grant may be silent before another grant's frames are
	// shown (0: DefaultFrameStale; negative: never).
	Stale time.Duration
	// Verify, if set, returns the current grant of the instance's shard (its epoch and token),
	// re-read when a frame claims a newer grant than the one followed: a frame above it is
	// dropped, whatever it claims. An error lets the frame be judged without it.
	Verify func() (epoch, token uint64, err error)

	seen  bool
	epoch uint64
	token uint64
	at    time.Time            // when the followed grant's last frame passed
	last  map[string][2]uint64 // topic → (tick, index) last shown under the current grant
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
	newer := st.Epoch > f.epoch || st.Epoch == f.epoch && st.Token > f.token
	older := st.Epoch < f.epoch || st.Epoch == f.epoch && st.Token < f.token
	switch {
	case !f.seen, newer, older && stale > 0 && now.Sub(f.at) > stale:
		if f.Verify != nil && (!f.seen || newer) {
			if e, tok, err := f.Verify(); err == nil && (st.Epoch > e || st.Epoch == e && st.Token > tok) {
				return false // a grant the shard has not given: forged
			}
		}
		// A grant to follow: a newer one, or another after the followed one fell silent.
		f.seen, f.epoch, f.token = true, st.Epoch, st.Token // every topic starts again
		f.last = map[string][2]uint64{}
	case older:
		return false // an older grant: a zombie, or a frame overtaken on the wire
	default:
		if l, ok := f.last[topic]; ok && (st.Tick < l[0] || st.Tick == l[0] && st.Index <= l[1]) {
			return false // not after the last one shown on this subject
		}
	}
	f.at = now
	f.last[topic] = [2]uint64{st.Tick, st.Index}
	return true
}
