package shard

import (
	"slices"
	"testing"

	"github.com/tickfence/tickfence/actor"
)

// TestStoredNoticeOnlyWhenOwed (issue 35.4): a stored notice leaves only when an acknowledged
// write covers a frame that no later message a watcher of its topic receives said was stored, and
// its topic's next frame is not due: an instance framing regularly sends none until it stops; a
// topic framed now and then gets one at the first tick after the write; a frame of one topic is
// not said stored by a frame of another (a watcher of one topic receives only it and the notices).
func TestStoredNoticeOnlyWhenOwed(t *testing.T) {
	main, hp := []actor.Frame{{}}, []actor.Frame{{Topic: "hp"}}
	var u unstoredFrames
	steps := []struct {
		tick, stored uint64
		frames       []actor.Frame
		notice       bool
		why          string
	}{
		{1, 0, main, false, "a frame, its tick not stored"},
		{2, 1, main, false, "the next frame says tick 1 is stored"},
		{3, 2, main, false, "every tick framed: the frames say it"},
		{4, 2, nil, false, "no frame, nothing new stored"},
		{5, 3, nil, true, "tick 3 stored, and the next frame (due at 4: every tick) did not come"},
		{6, 3, nil, false, "said already"},
		{7, 5, nil, false, "nothing framed since"},
		{8, 7, hp, false, "a frame on topic hp"},
		{9, 8, main, true, "tick 8 stored: the main subject's frame does not say it to hp's watchers"},
		{10, 8, nil, false, "said by the notice: main's frame of 9 is not stored yet"},
		{11, 9, nil, true, "tick 9 stored; main framed 6 ticks apart is not expected soon"},
	}
	for _, s := range steps {
		if got := u.tick(s.tick, s.stored, s.frames); got != s.notice {
			t.Fatalf("tick %d, stored %d (%s): notice %v, want %v", s.tick, s.stored, s.why, got, s.notice)
		}
	}
	// Frames every 5 ticks until tick 100, then none; a write every 20 ticks, acknowledged 1 tick
	// later (the demo's defaults without commands): each frame's next says it is stored, so no
	// notice, until the frames stop: tick 100's is said once its next is overdue (tick 105).
	var d unstoredFrames
	var at []uint64
	stored := uint64(0)
	for tick := uint64(1); tick <= 200; tick++ {
		var fr []actor.Frame
		if tick%5 == 0 && tick <= 100 {
			fr = main
		}
		if tick%20 == 1 && tick > 1 {
			stored = tick - 1
		}
		if d.tick(tick, stored, fr) {
			at = append(at, tick)
		}
	}
	if !slices.Equal(at, []uint64{105}) {
		t.Fatalf("notices at ticks %v; want one, at 105 (tick 100's frame stored at 101, its next due at 105)", at)
	}
}
