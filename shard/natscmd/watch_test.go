package natscmd_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
)

// publishFrame publishes a frame of id as its owner would: on its topic's subject, stamped.
func publishFrame(t *testing.T, nc *nats.Conn, id, topic string, tick uint64, payload string) {
	t.Helper()
	m := nats.NewMsg(wire.FrameSubject(store.ShardOf(id, clientShards), id, topic))
	m.Header.Set(wire.HeaderEpoch, "1")
	m.Header.Set(wire.HeaderToken, "7")
	m.Header.Set(wire.HeaderTick, strconv.FormatUint(tick, 10))
	m.Data = []byte(payload)
	if err := nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
}

// next receives the watch's next frame within 5 s.
func next(t *testing.T, w *natscmd.Watch) natscmd.Frame {
	t.Helper()
	select {
	case f, ok := <-w.C:
		if !ok {
			t.Fatal("the watch's channel closed; want a frame")
		}
		return f
	case <-time.After(5 * time.Second):
		t.Fatal("no frame in 5 s")
	}
	return natscmd.Frame{}
}

// TestWatchWithoutDeadline (issue 35.3): Watch runs until its context ends, and a context
// without a deadline (signal.NotifyContext's, a plain cancel) is such a context. It failed with
// "nats: context requires a deadline" (its flush of the subscriptions took the caller's ctx).
func TestWatchWithoutDeadline(t *testing.T) {
	cnc, onc := clientConns(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := natscmd.NewClient(cnc, clientShards).Watch(ctx, "w-1")
	if err != nil {
		t.Fatalf("Watch with a context without a deadline: %v", err)
	}
	publishFrame(t, onc, "w-1", "", 1, "one")
	if f := next(t, w); string(f.Payload) != "one" || f.Tick != 1 {
		t.Fatalf("frame %+v; want tick 1, payload one", f)
	}
	cancel()
	select {
	case f, ok := <-w.C:
		if ok {
			t.Fatalf("frame %+v after the context ended; want the channel closed", f)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the channel did not close within 5 s of the context's end")
	}
}

// TestWatchChosenTopics (issue 35.3): a watch of chosen topics subscribes their subjects only, so
// the server sends the connection nothing else — not the other players' HUD frames — and what it
// delivers passes the watcher's rule per topic as before. Without topics, every topic comes.
func TestWatchChosenTopics(t *testing.T) {
	cnc, onc := clientConns(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := natscmd.NewClient(cnc, clientShards)
	if _, err := c.Watch(ctx, "w-2", "a.b"); err == nil {
		t.Fatal("Watch of topic a.b: no error; want one (a topic is one subject token)")
	}
	mine, err := c.Watch(ctx, "w-2", "hud-ada", "")
	if err != nil {
		t.Fatal(err)
	}
	all, err := natscmd.NewClient(onc, clientShards).Watch(ctx, "w-2")
	if err != nil {
		t.Fatal(err)
	}
	before := cnc.Stats().InMsgs
	for tick := uint64(1); tick <= 3; tick++ {
		publishFrame(t, onc, "w-2", "", tick, "main")
		publishFrame(t, onc, "w-2", "hud-ada", tick, "ada")
		publishFrame(t, onc, "w-2", "hud-bob", tick, "bob")
	}
	got := map[string]int{}
	for range 6 {
		f := next(t, mine)
		got[f.Topic]++
	}
	if got[""] != 3 || got["hud-ada"] != 3 || len(got) != 2 {
		t.Fatalf("frames by topic %v; want 3 of the main subject and 3 of hud-ada", got)
	}
	seen := map[string]int{}
	for range 9 {
		seen[next(t, all).Topic]++
	}
	if seen[""] != 3 || seen["hud-ada"] != 3 || seen["hud-bob"] != 3 {
		t.Fatalf("the watch of every topic got %v; want 3 of each", seen)
	}
	// Everything published has reached the other connection: had the server sent hud-bob here,
	// it would be counted by now.
	if err := cnc.Flush(); err != nil {
		t.Fatal(err)
	}
	if in := cnc.Stats().InMsgs - before; in != 6 || mine.Invalid() != 0 || mine.Stale() != 0 {
		t.Fatalf("the connection received %d messages (invalid %d, stale %d); want the 6 frames it subscribed",
			in, mine.Invalid(), mine.Stale())
	}
}
