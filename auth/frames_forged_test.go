package auth_test

import (
	"context"
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
