package wire

// Frames leave before the write that makes them durable is stored (DESIGN 8). A frame says which
// of its instance's ticks were stored when it left (FrameStamp.Stored), so a watcher chooses:
// show every frame as it comes, and learn with Rewinds when what it showed was undone; or show a
// frame only once a later message of its line says its tick is stored (Holdback).

// Rewinds tells a watcher that shows frames as they come (those FrameFilter passes) when frames
// it showed were undone: a frame of another line than the frames shown before it, whose Stored is
// below the highest tick shown under that line. What was shown after Stored is gone — a new owner
// restarted from its stored tick (the tick goes back), or the owner went back to its stored state
// after the store refused a write — and this frame shows what replaced it. The zero value is
// ready.
type Rewinds struct {
	seen bool
	line Line
	high uint64 // the highest tick shown under line
}

// Shown records a frame the watcher shows and reports whether it rewinds what was shown before.
func (r *Rewinds) Shown(st FrameStamp) (rewound bool) {
	if r.seen && st.Line() != r.line {
		rewound = r.high > st.Stored
		r.high = 0
	}
	r.seen, r.line = true, st.Line()
	r.high = max(r.high, st.Tick)
	return rewound
}

// DefaultHoldback is Holdback's Max unless set.
const DefaultHoldback = 1024

// Holdback holds the frames a watcher would show (those FrameFilter passes) until a message of
// their line — a later frame, or a stored notice — says their tick is stored, then releases them
// in the order they came: a watcher that never shows what a failover undoes. When the line
// changes (a new owner's frame, or its owner went back to its stored state) the frames still held
// are dropped, never shown (a message of another line cannot say they are stored: the history it
// stored may not be theirs); if the old line had reached a tick above the new line's Stored, what
// it made after that was undone, and the next frame released says so (rewound). The zero value is
// ready.
type Holdback[T any] struct {
	// Max bounds the frames held (0: DefaultHoldback); past it the oldest is dropped.
	Max int

	seen        bool
	line        Line
	stored      uint64 // the highest Stored heard under line
	high        uint64 // the highest tick taken under line
	held        []heldFrame[T]
	rewound     bool // frames were undone since the last release
	unconfirmed uint64
	overflowed  uint64
}

type heldFrame[T any] struct {
	tick uint64
	v    T
}

// Frame takes a frame (with its stamp) that passed the rule. It returns the frames it releases,
// oldest first — this one too if its tick is stored already — and whether the first of them
// rewinds (frames taken before it were undone).
func (h *Holdback[T]) Frame(st FrameStamp, v T) (released []T, rewound bool) {
	h.follow(st.Line(), st.Stored)
	h.high = max(h.high, st.Tick)
	limit := h.Max
	if limit <= 0 {
		limit = DefaultHoldback
	}
	if len(h.held) >= limit && st.Tick > h.stored {
		var zero heldFrame[T]
		copy(h.held, h.held[1:])
		h.held[len(h.held)-1] = zero
		h.held = h.held[:len(h.held)-1]
		h.overflowed++
	}
	h.held = append(h.held, heldFrame[T]{st.Tick, v})
	return h.release()
}

// Notice takes a stored notice and returns what it releases, as Frame does. A notice of another
// line than the frames taken is ignored: that line's own frames say what it stored.
func (h *Holdback[T]) Notice(n StoredNotice) (released []T, rewound bool) {
	if !h.seen || n.Line != h.line {
		return nil, false
	}
	h.stored = max(h.stored, n.Stored)
	return h.release()
}

// Held is how many frames wait for their tick to be stored.
func (h *Holdback[T]) Held() int { return len(h.held) }

// Unconfirmed counts the frames dropped because their line ended before a message said their tick
// was stored.
func (h *Holdback[T]) Unconfirmed() uint64 { return h.unconfirmed }

// Overflowed counts the frames dropped because Max were held.
func (h *Holdback[T]) Overflowed() uint64 { return h.overflowed }

func (h *Holdback[T]) follow(l Line, stored uint64) {
	if h.seen && l != h.line {
		if h.high > stored {
			h.rewound = true
		}
		h.unconfirmed += uint64(len(h.held))
		clear(h.held)
		h.held = h.held[:0]
		h.stored, h.high = 0, 0
	}
	h.seen, h.line = true, l
	h.stored = max(h.stored, stored)
}

func (h *Holdback[T]) release() (released []T, rewound bool) {
	keep := h.held[:0]
	for _, x := range h.held {
		if x.tick <= h.stored {
			released = append(released, x.v)
		} else {
			keep = append(keep, x)
		}
	}
	clear(h.held[len(keep):])
	h.held = keep
	if len(released) > 0 {
		rewound, h.rewound = h.rewound, false
	}
	return released, rewound
}
