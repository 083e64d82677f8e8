package auth_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/auth"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store/natskv"
)

// TestForgedFrameDoesNotBlindWatchers: with a node's credential (the only one that may publish
// frames), one frame for d1 stamped with token 2^62. A player's watcher (no store access) shows
// the real owner's frames again within the rule's stale time; an operator's watcher (it reads the
// store: GrantOf) never stops showing them.
func TestForgedFrameDoesNotBlindWatchers(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	player := e.player(t, "pat")
	opts, err := auth.ClientOptions(auth.CredsFile(e.dir, "operator"), nil)
	if err != nil {
		t.Fatal(err)
	}
	opnc, err := nats.Connect(e.url, append(opts, nats.ReconnectBufSize(-1))...)
	if err != nil {
		t.Fatal(err)
	}
	defer opnc.Close()
	st, err := natskv.Open(opnc, natskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	operator := natscmd.NewClient(opnc, shards)
	operator.GrantOf = natscmd.GrantReader(st)
	wp, err := player.Watch(ctx, "d1")
	if err != nil {
		t.Fatal(err)
	}
	wo, err := operator.Watch(ctx, "d1")
	if err != nil {
		t.Fatal(err)
	}
	// Both see the owner's frames.
	var real wire.FrameStamp
	for _, w := range []*natscmd.Watch{wp, wo} {
		select {
		case f := <-w.C:
			real = f.FrameStamp
		case <-ctx.Done():
			t.Fatal("no frame of d1")
		}
	}
	node, _ := e.connect(t, "node")
	m := nats.NewMsg(wire.FrameSubject(e.shard, "d1", ""))
	m.Header.Set(wire.HeaderEpoch, "1")
	m.Header.Set(wire.HeaderToken, "4611686018427387904") // 2^62
	m.Header.Set(wire.HeaderTick, "1")
	m.Data = []byte("forged")
	if err := node.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	if err := node.Flush(); err != nil {
		t.Fatal(err)
	}
	forgedAt := time.Now()
	// The player's watcher: real frames (the owner's token) again within the stale time.
	var sawForged bool
	for back := false; !back; {
		select {
		case f := <-wp.C:
			if string(f.Payload) == "forged" {
				sawForged = true
			} else if f.Token == real.Token {
				back = true
				if d := time.Since(forgedAt); d > wire.DefaultFrameStale+time.Second {
					t.Errorf("the player's watcher showed the owner's frames again %v after the forgery, want within %v", d, wire.DefaultFrameStale)
				}
			}
		case <-ctx.Done():
			t.Fatal("the player's watcher never showed the owner's frames again after one forged frame")
		}
	}
	t.Logf("player's watcher: forged frame shown %v, owner's frames back after %v", sawForged, time.Since(forgedAt).Round(time.Millisecond))
	// The operator's watcher never showed the forgery, and kept showing the owner's frames.
	deadline := time.After(500 * time.Millisecond)
	shown := 0
	for done := false; !done; {
		select {
		case f := <-wo.C:
			if string(f.Payload) == "forged" {
				t.Fatal("the operator's watcher (GrantOf) showed the forged frame")
			}
			shown++
		case <-deadline:
			done = true
		}
	}
	if shown == 0 {
		t.Error("the operator's watcher showed no frame of the owner after the forgery")
	}
}

// TestForgedFrameTickDoesNotBlindWatchers: a node credential of its own (n2, never granted d1's
// shard) publishes one frame on d1's subject stamped with d1's current grant, read from any frame,
// and tick 2^62. A player's watcher shows d1's real frames again within the stale time. (From the
// review of issue 33.)
func TestForgedFrameTickDoesNotBlindWatchers(t *testing.T) {
	e := newEnv(t)
	alice := e.player(t, "alice")
	if _, err := auth.NewUser(e.dir, auth.Node, "n2"); err != nil {
		t.Fatal(err)
	}
	n2, _ := e.connect(t, "n2")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := alice.Watch(ctx, "d1")
	if err != nil {
		t.Fatal(err)
	}
	var first wire.FrameStamp
	select {
	case f := <-w.C:
		first = f.FrameStamp
	case <-time.After(5 * time.Second):
		t.Fatal("no frame of d1")
	}
	m := nats.NewMsg(wire.FrameSubject(e.shard, "d1", ""))
	m.Header.Set(wire.HeaderEpoch, strconv.FormatUint(first.Epoch, 10))
	m.Header.Set(wire.HeaderToken, strconv.FormatUint(first.Token, 10))
	m.Header.Set(wire.HeaderTick, strconv.FormatUint(1<<62, 10))
	m.Data = []byte("forged")
	if err := n2.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	_ = n2.Flush()
	forgedAt := time.Now()
	sawForged := false
	deadline := time.After(wire.DefaultFrameStale + 3*time.Second)
	for {
		select {
		case f := <-w.C:
			if f.Tick == 1<<62 {
				sawForged = true
				continue
			}
			if sawForged {
				t.Logf("the owner's frames shown again %v after the forged one", time.Since(forgedAt).Round(time.Millisecond))
				return
			}
		case <-deadline:
			t.Fatalf("after one forged frame (d1's own grant %d/%d, tick 2^62) from node credential n2, the watcher showed none of d1's real frames for %v (forged shown: %v, dropped as stale: %d)",
				first.Epoch, first.Token, wire.DefaultFrameStale+3*time.Second, sawForged, w.Stale())
		}
	}
}

// TestAnswerAimedAtFramesIsNoFrame: a player names d1's frame subject as its command's reply
// subject; the server delivers the node's answer there in the players' account (it rewrites
// only the node's side). No watcher shows it: it carries no frame's stamp (natscmd.Watch counts it
// invalid; the player page lists no instance from it).
func TestAnswerAimedAtFramesIsNoFrame(t *testing.T) {
	e := newEnv(t)
	bob, mallory := e.player(t, "bob"), e.player(t, "mallory")
	_ = mallory
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := bob.Watch(ctx, "d1")
	if err != nil {
		t.Fatal(err)
	}
	_, mc := e.connect(t, "mallory")
	for i, reply := range []string{wire.FrameSubject(e.shard, "d1", ""), wire.FrameSubject(e.shard, "d1", "fake")} {
		m := nats.NewMsg(wire.PlayerSubject(e.shard, "d1", "mallory"))
		m.Reply = reply
		m.Header.Set(wire.HeaderRequestID, "m-"+strconv.Itoa(i))
		m.Data = mustCanonical(t, map[string]any{"type": "status"})
		if err := mc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	_ = mc.Flush()
	deadline := time.After(time.Second)
	for done := false; !done; {
		select {
		case f := <-w.C:
			if len(f.Payload) > 0 && looksLikeReply(f.Payload) {
				t.Fatalf("bob's watcher showed a node's answer as a frame: %q", f.Payload)
			}
		case <-deadline:
			done = true
		}
	}
	if w.Invalid() == 0 {
		t.Log("no answer reached the frame subjects (nothing for the watcher to drop)")
	}
}
