package wire

import (
	"fmt"
	"slices"
	"testing"
)

// TestParseStoredHeaders (issue 35.4): a frame's Tickfence-Stored and Tickfence-Reverts are read;
// without them (a node older than the headers) Stored is the frame's tick and Reverts 0; a bad one
// is refused. A stored notice has no tick and needs its grant and Stored.
func TestParseStoredHeaders(t *testing.T) {
	h := map[string]string{HeaderEpoch: "2", HeaderToken: "17", HeaderTick: "4096", HeaderStored: "4090", HeaderReverts: "1"}
	get := func(k string) string { return h[k] }
	if st, err := ParseFrameStamp(get); err != nil || st != (FrameStamp{Epoch: 2, Token: 17, Tick: 4096, Stored: 4090, Reverts: 1}) {
		t.Fatalf("stamp %+v, %v", st, err)
	}
	if n, err := ParseStoredNotice(get); err != nil || n != (StoredNotice{Line{2, 17, 1}, 4090}) {
		t.Fatalf("notice %+v, %v", n, err)
	}
	delete(h, HeaderStored)
	delete(h, HeaderReverts)
	if st, err := ParseFrameStamp(get); err != nil || st.Stored != 4096 || st.Reverts != 0 {
		t.Fatalf("a frame without %s: %+v, %v; want Stored = its tick", HeaderStored, st, err)
	}
	if _, err := ParseStoredNotice(get); err == nil {
		t.Fatal("a stored notice without a stored tick was accepted")
	}
	h[HeaderStored] = "x"
	if _, err := ParseFrameStamp(get); err == nil {
		t.Fatal("a bad stored header was accepted")
	}
	if got := StoredSubject(3, "dungeon-7"); got != "tickfence.out.3.dungeon-7.~stored" {
		t.Fatalf("StoredSubject = %s", got)
	}
}

// TestFrameFilterReverts (issue 35.4): under one grant, a frame of fewer reverts than one seen was
// made in a history its owner went back from, and is dropped; one of more starts every topic
// again, as a new grant does. A new grant wins whatever the reverts.
func TestFrameFilterReverts(t *testing.T) {
	var f FrameFilter
	steps := []struct {
		topic string
		st    FrameStamp
		pass  bool
		why   string
	}{
		{"", FrameStamp{Epoch: 1, Token: 5, Tick: 100}, true, "the first frame"},
		{"hp", FrameStamp{Epoch: 1, Token: 5, Tick: 102}, true, "a topic"},
		{"", FrameStamp{Epoch: 1, Token: 5, Tick: 103, Reverts: 1}, true, "the owner went back to its stored state: the tick goes on"},
		{"hp", FrameStamp{Epoch: 1, Token: 5, Tick: 104}, false, "a frame of the undone history, late on its topic"},
		{"hp", FrameStamp{Epoch: 1, Token: 5, Tick: 101, Reverts: 1}, true, "the topic starts again under the new line"},
		{"", FrameStamp{Epoch: 1, Token: 6, Tick: 99}, true, "a new owner: its reverts start at 0"},
		{"", FrameStamp{Epoch: 1, Token: 5, Tick: 105, Reverts: 3}, false, "the old owner, however often it went back"},
	}
	for _, s := range steps {
		if got := f.Pass(s.topic, s.st); got != s.pass {
			t.Fatalf("%s (topic %q, %+v): pass = %v, want %v", s.why, s.topic, s.st, got, s.pass)
		}
	}
}

// TestRewinds (issue 35.4): a watcher that shows every frame learns when what it showed was
// undone — a new owner's frames restart below ticks it showed, or the owner went back under its
// grant — and is not told so when a failover lost nothing (the new owner restarts from a tick
// at or above every one shown).
func TestRewinds(t *testing.T) {
	var r Rewinds
	steps := []struct {
		st     FrameStamp
		rewind bool
		why    string
	}{
		{FrameStamp{Epoch: 1, Token: 5, Tick: 10, Stored: 8}, false, "the first frame"},
		{FrameStamp{Epoch: 1, Token: 5, Tick: 15, Stored: 12}, false, "the owner's next"},
		{FrameStamp{Epoch: 1, Token: 7, Tick: 13, Stored: 12}, true, "a new owner restarted from tick 12: 13-15 shown were undone"},
		{FrameStamp{Epoch: 1, Token: 7, Tick: 14, Stored: 12}, false, "its next"},
		{FrameStamp{Epoch: 1, Token: 9, Tick: 15, Stored: 14}, false, "another owner from tick 14: nothing shown was lost"},
		{FrameStamp{Epoch: 1, Token: 9, Tick: 20, Stored: 15}, false, "its next"},
		{FrameStamp{Epoch: 1, Token: 9, Tick: 21, Stored: 15, Reverts: 1}, true, "it went back to tick 15: 16-20 were undone, though the tick goes on"},
		{FrameStamp{Epoch: 2, Token: 1, Tick: 5, Stored: 3}, true, "a restore from a backup: a new epoch, far back"},
	}
	for _, s := range steps {
		if got := r.Shown(s.st); got != s.rewind {
			t.Fatalf("%s (%+v): rewind = %v, want %v", s.why, s.st, got, s.rewind)
		}
	}
}

// TestHoldback (issue 35.4): a durable watcher's frames wait until a later message of their line
// — a frame or a stored notice — says their tick is stored, and come out in order; a new line
// drops what is held (never shown) and says rewound on the next frame released if the old line
// had gone past the new one's stored tick; a notice of another line releases nothing.
func TestHoldback(t *testing.T) {
	var h Holdback[string]
	name := func(st FrameStamp) string { return fmt.Sprintf("%d/%d@%d", st.Token, st.Reverts, st.Tick) }
	steps := []struct {
		st      *FrameStamp
		notice  *StoredNotice
		release []string
		rewound bool
		why     string
	}{
		{st: &FrameStamp{Epoch: 1, Token: 5, Tick: 10, Stored: 10}, release: []string{"5/0@10"}, why: "a frame whose own tick is stored (a node without the header)"},
		{st: &FrameStamp{Epoch: 1, Token: 5, Tick: 11, Stored: 10}, why: "held: its tick is not stored"},
		{st: &FrameStamp{Epoch: 1, Token: 5, Tick: 12, Stored: 10}, why: "held"},
		{st: &FrameStamp{Epoch: 1, Token: 5, Tick: 13, Stored: 11}, release: []string{"5/0@11"}, why: "a later frame says 11 is stored"},
		{notice: &StoredNotice{Line{1, 5, 0}, 13}, release: []string{"5/0@12", "5/0@13"}, why: "a stored notice: no frame is coming"},
		{notice: &StoredNotice{Line{1, 6, 0}, 99}, why: "a notice of another line releases nothing"},
		{st: &FrameStamp{Epoch: 1, Token: 5, Tick: 14, Stored: 13}, why: "held"},
		{st: &FrameStamp{Epoch: 1, Token: 5, Tick: 15, Stored: 13}, why: "held"},
		{st: &FrameStamp{Epoch: 1, Token: 7, Tick: 14, Stored: 13}, why: "a new owner from tick 13: 14 and 15 of the old one dropped; its own 14 held"},
		{notice: &StoredNotice{Line{1, 5, 0}, 15}, why: "the old owner's late notice: its frames are gone already"},
		{st: &FrameStamp{Epoch: 1, Token: 7, Tick: 15, Stored: 14}, release: []string{"7/0@14"}, rewound: true, why: "the new owner's 14 is stored: released, saying frames were undone"},
		{st: &FrameStamp{Epoch: 1, Token: 7, Tick: 16, Stored: 15, Reverts: 1}, why: "it went back to 15: its 15 dropped, but 15 is not past the new line's stored tick"},
		{st: &FrameStamp{Epoch: 1, Token: 7, Tick: 17, Stored: 16, Reverts: 1}, release: []string{"7/1@16"}, why: "no rewind: nothing past 15 had been taken"},
	}
	for _, s := range steps {
		var got []string
		var rewound bool
		if s.st != nil {
			got, rewound = h.Frame(*s.st, name(*s.st))
		} else {
			got, rewound = h.Notice(*s.notice)
		}
		if !slices.Equal(got, s.release) || rewound != s.rewound {
			t.Fatalf("%s: released %v rewound %v; want %v rewound %v", s.why, got, rewound, s.release, s.rewound)
		}
	}
	if h.Unconfirmed() != 3 || h.Held() != 1 {
		t.Fatalf("unconfirmed %d held %d; want 3 dropped at line changes, tick 17 held", h.Unconfirmed(), h.Held())
	}
	small := Holdback[int]{Max: 2}
	for tick := uint64(1); tick <= 3; tick++ {
		small.Frame(FrameStamp{Epoch: 1, Token: 1, Tick: tick}, int(tick))
	}
	if got, _ := small.Notice(StoredNotice{Line{1, 1, 0}, 3}); !slices.Equal(got, []int{2, 3}) || small.Overflowed() != 1 {
		t.Fatalf("Max 2: released %v, overflowed %d; want 2 and 3, one dropped", got, small.Overflowed())
	}
}
