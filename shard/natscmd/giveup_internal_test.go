package natscmd

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/natskv"
)

// TestNoAttemptIsSentAfterGiveUp: an owner that always answers busy keeps Exec in backoff until
// GiveUp; the backoff that reaches the give-up must end the command, not send an attempt whose
// answer nobody awaits (the owner would apply it while the caller was told it was given up).
func TestNoAttemptIsSentAfterGiveUp(t *testing.T) {
	srv, err := natsserver.Start(natsserver.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatalf("embedded NATS server: %v", err)
	}
	t.Cleanup(srv.Stop)
	var conns [2]*nats.Conn
	for i := range conns {
		if conns[i], err = natskv.Connect("", srv.ConnectOption()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(conns[i].Close)
	}
	const shards, id = 8, "busy-1"
	busy := wire.EncodeReply(wire.Reply{Error: wire.Errorf(wire.CodeBusy, "busy")})
	if _, err := conns[1].Subscribe(wire.Subject(store.ShardOf(id, shards), id), func(m *nats.Msg) { _ = m.Respond(busy) }); err != nil {
		t.Fatal(err)
	}
	if err := conns[1].Flush(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var sent []time.Time
	testHookAttempt = func() { mu.Lock(); sent = append(sent, time.Now()); mu.Unlock() }
	t.Cleanup(func() { testHookAttempt = nil })
	c := NewClient(conns[0], shards)
	c.GiveUp = 200 * time.Millisecond
	body, _ := wire.Canonical(map[string]any{"type": "attack"})
	for run := range 5 {
		mu.Lock()
		sent = sent[:0]
		mu.Unlock()
		start := time.Now() // Exec's own give-up time is a little later
		if _, _, err := c.Exec(context.Background(), id, "", body, false); err == nil {
			t.Fatal("Exec answered; want gave up")
		}
		mu.Lock()
		for _, at := range sent {
			if at.Sub(start) >= c.GiveUp {
				t.Errorf("run %d: an attempt was sent %v after the start, past GiveUp %v", run, at.Sub(start), c.GiveUp)
			}
		}
		mu.Unlock()
	}
}
