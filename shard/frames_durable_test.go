package shard_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tickfence/tickfence/shard"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store/memstore"
)

// jetFrames is the JetStream backend and a frame publisher factory on its server.
func jetFrames(t *testing.T) (backend, func(prometheus.Registerer) shard.FramePublisher) {
	var jet backend
	for _, b := range backends(t) {
		if b.nc != nil {
			jet = b
		}
	}
	return jet, func(reg prometheus.Registerer) shard.FramePublisher {
		p := natscmd.NewFramePublisher(jet.nc(t), 0, reg)
		t.Cleanup(p.Close)
		return p
	}
}

// nextFrame receives a watch's next frame within 10 s.
func nextFrame(t *testing.T, w *natscmd.Watch, what string) natscmd.Frame {
	t.Helper()
	select {
	case f, ok := <-w.C:
		if !ok {
			t.Fatalf("%s: the watch ended", what)
		}
		return f
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no frame in 10 s", what)
	}
	return natscmd.Frame{}
}

// TestDurableWatchAcrossFailover (issue 35.4: a player saw the boss die, come back at 170 HP and
// die again): owner A's write is held (a node about to die), and A goes on publishing frames past
// its stored tick; then B is granted the shard and goes on from A's stored tick. A watch of every
// frame shows A's frames past the stored tick, then B's first frame, back below them, saying
// Rewound; a durable watch never shows a frame of A past its stored tick, and says Rewound on
// B's first frame it shows. Every frame says its instance's stored tick, which B's first one
// shows to be A's.
func TestDurableWatchAcrossFailover(t *testing.T) {
	jet, pubFor := jetFrames(t)
	a := newNode(t, jet.open(t), "a", nodeOpt{frames: pubFor})
	b := newNode(t, jet.open(t), "b", nodeOpt{frames: pubFor})
	const s = 2
	ga := a.grant(s)
	id := idIn(s, 5)
	mustOK(t, a.send(id, "c1", map[string]any{"type": "create", "kind": "shower"}), "create")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := natscmd.NewClient(jet.nc(t), testShards)
	fast, err := c.Watch(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	durable, err := c.WatchDurable(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	// Durable frames come once a checkpoint (every 20 ticks) is stored.
	if f := nextFrame(t, durable, "durable watch, owner A"); f.Token != ga.Token || f.Rewound {
		t.Fatalf("durable frame %+v rewound %v", f.FrameStamp, f.Rewound)
	}
	frozen := a.freeze.arm(id) // A's next write never leaves: its stored tick stays
	select {
	case <-frozen:
	case <-time.After(10 * time.Second):
		t.Fatal("A wrote nothing in 10 s")
	}
	// A runs 25 ticks past its stored tick, publishing every one.
	var stored, high uint64
	for high < stored+25 || stored == 0 {
		f := nextFrame(t, fast, "fast watch, owner A")
		if f.Stored > f.Tick || f.Token != ga.Token || f.Rewound {
			t.Fatalf("fast watch, owner A: %+v rewound %v", f.FrameStamp, f.Rewound)
		}
		stored, high = max(stored, f.Stored), f.Tick
	}
	gb := b.grant(s)
	var first natscmd.Frame
	for first.Token != gb.Token {
		first = nextFrame(t, fast, "fast watch, owner B")
		if first.Token == ga.Token {
			high = max(high, first.Tick)
			stored = max(stored, first.Stored)
		}
	}
	if first.Tick > stored+1 || first.Tick >= high || !first.Rewound || first.Stored != stored {
		t.Fatalf("fast watch: B's first frame %+v rewound %v; want tick %d (A stored %d, showed up to %d), back below, Rewound",
			first.FrameStamp, first.Rewound, stored+1, stored, high)
	}
	shown := 0
	for {
		f := nextFrame(t, durable, "durable watch")
		if f.Token == ga.Token {
			if f.Tick > stored || f.Rewound {
				t.Fatalf("durable watch: A's frame of tick %d (rewound %v) shown; A's stored tick is %d", f.Tick, f.Rewound, stored)
			}
			shown++
			continue
		}
		if f.Token != gb.Token || !f.Rewound || f.Tick > f.Stored && f.Tick != stored+1 {
			t.Fatalf("durable watch: B's first frame %+v rewound %v; want B's, Rewound", f.FrameStamp, f.Rewound)
		}
		break
	}
	if durable.Unconfirmed() == 0 || durable.Rewinds() != 1 {
		t.Fatalf("durable watch: %d frames of A dropped unconfirmed, %d rewinds; want A's past tick %d dropped, one rewind",
			durable.Unconfirmed(), durable.Rewinds(), stored)
	}
	t.Logf("A stored tick %d and showed up to %d; the durable watch showed %d more of A's, dropped %d, then B's from %d",
		stored, high, shown, durable.Unconfirmed(), first.Tick)
}

// TestDurableWatchOfAQuietTopic (issue 35.4): a frame on a topic its instance publishes only on
// a command is shown by a durable watch of that topic alone once the command's write is stored:
// no later frame of the topic will say so, so the node sends a stored notice. An instance whose
// main subject is framed every tick needs none for it.
func TestDurableWatchOfAQuietTopic(t *testing.T) {
	jet, pubFor := jetFrames(t)
	a := newNode(t, jet.open(t), "a", nodeOpt{frames: pubFor})
	const s = 3
	a.grant(s)
	id := idIn(s, 2)
	mustOK(t, a.send(id, "c1", map[string]any{"type": "create", "kind": "shower"}), "create")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hp, err := natscmd.NewClient(jet.nc(t), testShards).WatchDurable(ctx, id, "hp")
	if err != nil {
		t.Fatal(err)
	}
	main, err := natscmd.NewClient(jet.nc(t), testShards).Watch(ctx, id, "")
	if err != nil {
		t.Fatal(err)
	}
	a.ticked(30)
	if n := testutil.ToFloat64(a.metrics.FrameNotices); n != 0 {
		t.Fatalf("%v stored notices for an instance framing every tick; want none (its frames say it)", n)
	}
	sent := time.Now()
	mustOK(t, a.send(id, "t1", map[string]any{"type": "topic"}), "topic")
	f := nextFrame(t, hp, "durable watch of hp")
	if f.Topic != "hp" {
		t.Fatalf("frame %+v on %q", f.FrameStamp, f.Topic)
	}
	if f.Tick > f.Stored { // a notice released it: counted once the publisher is past PublishMsg
		waitFor(t, "the stored notice counted", func() bool { return testutil.ToFloat64(a.metrics.FrameNotices) > 0 })
	}
	t.Logf("the hp frame of tick %d (stored %d when it left) shown %v after the command was sent; %v notices",
		f.Tick, f.Stored, time.Since(sent).Round(time.Millisecond), testutil.ToFloat64(a.metrics.FrameNotices))
	// The notice left in a tick that framed the main subject too: that frame is still a frame.
	var last uint64
	for last <= f.Tick+5 {
		m := nextFrame(t, main, "the main subject")
		if last != 0 && m.Tick != last+1 {
			t.Fatalf("main subject: tick %d after %d; want every tick's frame", m.Tick, last)
		}
		last = m.Tick
	}
}

// TestRefusedWriteRewinds (issue 35.4): when the store refuses a write (the state grew too large)
// the owner goes back to its stored state under the same grant; the frames it made since are
// undone though its tick goes on. Its frames then say Reverts 1: a watcher of every frame learns
// of the rewind, and a durable one never shows the undone frames.
func TestRefusedWriteRewinds(t *testing.T) {
	pub := &collect{}
	n := newNode(t, memstore.New(), "n1", nodeOpt{frames: func(prometheus.Registerer) shard.FramePublisher { return pub }})
	const s = 4
	n.grant(s)
	id := idIn(s, 2)
	mustOK(t, n.send(id, "c1", map[string]any{"type": "create", "kind": "shower"}), "create")
	waitFor(t, "a stored frame", func() bool {
		for _, f := range pub.take() {
			if f.Stored > 0 {
				return true
			}
		}
		return false
	})
	wantCode(t, n.send(id, "g1", map[string]any{"type": "grow"}), wire.CodeTooLarge, "grow")
	var frames []shard.Frame
	waitFor(t, "frames after the revert", func() bool {
		frames = append(frames, pub.take()...)
		return len(frames) > 0 && frames[len(frames)-1].Reverts == 1
	})
	var filter wire.FrameFilter
	var rewinds wire.Rewinds
	var hold wire.Holdback[shard.Frame]
	var released []shard.Frame
	rewound, back, undone := false, uint64(0), 0
	for _, f := range frames {
		if f.Notice {
			continue
		}
		st := wire.FrameStamp{Epoch: f.Epoch, Token: f.Token, Tick: f.Tick, Index: f.Index, Stored: f.Stored, Reverts: f.Reverts}
		if !filter.Pass(f.Topic, st) {
			t.Fatalf("frame %+v dropped by the rule", st)
		}
		if rewinds.Shown(st) {
			if rewound || f.Reverts != 1 {
				t.Fatalf("a rewind at %+v", st)
			}
			rewound, back = true, f.Stored
		}
		if f.Reverts == 0 && f.Tick > f.Stored {
			undone++
		}
		r, _ := hold.Frame(st, f)
		released = append(released, r...)
	}
	if !rewound || undone == 0 {
		t.Fatalf("rewound %v, %d frames past the stored tick before the revert; want a rewind at the first frame saying Reverts 1", rewound, undone)
	}
	for _, r := range released {
		if r.Reverts == 0 && r.Tick > back {
			t.Fatalf("the durable rule showed the frame of tick %d, undone when the owner went back to tick %d", r.Tick, back)
		}
	}
}
