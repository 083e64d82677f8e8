package natscmd_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/shard"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
)

// noFrame checks that the watch delivers nothing for a while.
func noFrame(t *testing.T, w *natscmd.Watch, d time.Duration) {
	t.Helper()
	select {
	case f := <-w.C:
		t.Fatalf("frame %+v (%q) delivered; want none yet", f.FrameStamp, f.Payload)
	case <-time.After(d):
	}
}

// TestWatchDurable (issue 35.4): the node's publisher stamps every frame with its stored tick
// (Tickfence-Stored) and sends stored notices; a watch of every frame shows each frame at once
// with its Stored, and says Rewound when a new owner's frame goes back below ticks it showed; a
// durable watch holds each frame until a later frame or a notice of its owner says its tick is
// stored, never shows the old owner's frames past its stored tick, and says Rewound on the new
// owner's first frame it shows. A durable watch of one topic gets the notices too.
func TestWatchDurable(t *testing.T) {
	cnc, onc := clientConns(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const id = "d-1"
	c := natscmd.NewClient(cnc, clientShards)
	fast, err := c.Watch(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	durable, err := c.WatchDurable(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	hud, err := c.WatchDurable(ctx, id, "hud")
	if err != nil {
		t.Fatal(err)
	}
	pub := natscmd.NewFramePublisher(onc, 0, nil)
	defer pub.Close()
	s := store.ShardOf(id, clientShards)
	frame := func(token, tick, stored uint64, topic string) {
		pub.Publish(shard.Frame{Shard: s, Instance: id, Topic: topic, Epoch: 1, Token: token, Tick: tick, Stored: stored,
			Payload: fmt.Appendf(nil, "%d@%d", token, tick)})
	}
	notice := func(token, stored uint64) {
		pub.Publish(shard.Frame{Shard: s, Instance: id, Epoch: 1, Token: token, Stored: stored, Notice: true})
	}

	// Owner A (token 5): ticks 10-14 published; its write of tick 11 is acknowledged, then a
	// notice says tick 12 is stored; 13 and 14 never are.
	frame(5, 10, 9, "")
	frame(5, 11, 9, "")
	frame(5, 12, 11, "")
	frame(5, 12, 11, "hud")
	notice(5, 12)
	frame(5, 13, 12, "")
	frame(5, 14, 12, "")
	// Topics are separate subscriptions: their frames are not ordered with the main subject's.
	got := func(w *natscmd.Watch, n int) map[string]bool {
		t.Helper()
		seen := map[string]bool{}
		for range n {
			f := next(t, w)
			if f.Rewound {
				t.Fatalf("frame %+v says Rewound", f.FrameStamp)
			}
			seen[fmt.Sprintf("%s%d", f.Topic, f.Tick)] = true
		}
		return seen
	}
	if seen := got(fast, 6); len(seen) != 6 || !seen["14"] || !seen["hud12"] {
		t.Fatalf("fast watch: %v; want A's ticks 10-14 and the hud frame of 12", seen)
	}
	if seen := got(durable, 4); len(seen) != 4 || !seen["10"] || !seen["11"] || !seen["12"] || !seen["hud12"] {
		t.Fatalf("durable watch: %v; want A's stored ticks 10-12 and the hud frame of 12", seen)
	}
	if f := next(t, hud); f.Topic != "hud" || f.Tick != 12 {
		t.Fatalf("durable watch of topic hud: %+v; want its frame of tick 12, released by the notice", f)
	}
	noFrame(t, durable, 300*time.Millisecond)

	// A fails; owner B (token 7) loaded the record of tick 12 and goes on from there.
	frame(7, 13, 12, "")
	frame(7, 14, 13, "")
	f := next(t, fast)
	if f.Token != 7 || f.Tick != 13 || !f.Rewound {
		t.Fatalf("fast watch: B's first frame %+v rewound %v; want tick 13, back below A's 14, Rewound", f.FrameStamp, f.Rewound)
	}
	if f := next(t, fast); f.Rewound {
		t.Fatalf("fast watch: B's second frame says Rewound")
	}
	f = next(t, durable)
	if f.Token != 7 || f.Tick != 13 || !f.Rewound || string(f.Payload) != "7@13" {
		t.Fatalf("durable watch: %+v %q rewound %v; want B's tick 13, Rewound", f.FrameStamp, f.Payload, f.Rewound)
	}
	if durable.Unconfirmed() != 2 || durable.Rewinds() != 1 || fast.Rewinds() != 1 {
		t.Fatalf("durable watch dropped %d unconfirmed frames, said %d rewinds (fast %d); want A's 13 and 14, one rewind each",
			durable.Unconfirmed(), durable.Rewinds(), fast.Rewinds())
	}
	// The notices of every-topic watches are no frames, and no invalid messages.
	if fast.Invalid() != 0 || durable.Invalid() != 0 || hud.Invalid() != 0 {
		t.Fatalf("invalid: fast %d, durable %d, hud %d; want 0", fast.Invalid(), durable.Invalid(), hud.Invalid())
	}
}

// TestOldWatcherIgnoresNotices (issue 35.4): a watcher that knows nothing of Tickfence-Stored —
// one that subscribes every topic and applies the rule to what has the stamp headers — finds no
// Tickfence-Tick in a stored notice and drops it as no frame, and reads frames as before.
func TestOldWatcherIgnoresNotices(t *testing.T) {
	cnc, onc := clientConns(t)
	const id = "d-2"
	s := store.ShardOf(id, clientShards)
	got := make(chan *nats.Msg, 10)
	base := wire.FrameSubject(s, id, "")
	for _, subj := range []string{base, base + ".*"} {
		if _, err := cnc.ChanSubscribe(subj, got); err != nil {
			t.Fatal(err)
		}
	}
	if err := cnc.Flush(); err != nil {
		t.Fatal(err)
	}
	pub := natscmd.NewFramePublisher(onc, 0, nil)
	defer pub.Close()
	pub.Publish(shard.Frame{Shard: s, Instance: id, Epoch: 1, Token: 5, Stored: 3, Notice: true})
	pub.Publish(shard.Frame{Shard: s, Instance: id, Epoch: 1, Token: 5, Tick: 4, Stored: 3, Payload: []byte("x")})
	for i := range 2 {
		select {
		case m := <-got:
			_, err := wire.ParseFrameStamp(m.Header.Get)
			if notice := m.Subject == base+"."+wire.StoredToken; notice != (err != nil) || notice && len(m.Data) != 0 {
				t.Fatalf("message %d on %s (%d bytes): stamp error %v", i, m.Subject, len(m.Data), err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no message in 5 s")
		}
	}
}
