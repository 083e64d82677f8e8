package wire

import (
	"errors"
	"strconv"
)

// Frames (DESIGN 8): published on core NATS, not stored.
const (
	FramePrefix = "tickfence.out"
	// The grant and tick a frame was made under. A watcher keeps, per instance, the highest
	// (epoch, token) seen and the last tick under it, and drops any frame below them.
	HeaderEpoch = "Tickfence-Epoch"
	HeaderToken = "Tickfence-Token"
	HeaderTick  = "Tickfence-Tick"
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
	return st, nil
}

// FrameFilter applies the watcher's rule for one instance: a frame passes only if its (epoch,
// token) is the highest seen, and, under that same grant, its tick is above the last one passed.
// A zombie's frames pass only until the new owner's first frame does. The zero value is ready.
type FrameFilter struct {
	seen bool
	last FrameStamp
}

// Pass reports whether a frame with this stamp is shown, and remembers it if so.
func (f *FrameFilter) Pass(st FrameStamp) bool {
	if f.seen {
		switch {
		case st.Epoch < f.last.Epoch, st.Epoch == f.last.Epoch && st.Token < f.last.Token:
			return false // an older grant: a zombie, or a frame overtaken on the wire
		case st.Epoch == f.last.Epoch && st.Token == f.last.Token && st.Tick <= f.last.Tick:
			return false
		}
	}
	f.seen, f.last = true, st
	return true
}
