package tickfence_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/tickfence/tickfence"
	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/actor/dungeon"
	"github.com/tickfence/tickfence/internal/natsserver"
)

// TestStartBeforeItsServer (issue 36, item 5): a node started at the same moment as its NATS server
// (a new cluster brought up at once) waits for the server to listen instead of exiting with "no
// servers available for connection".
func TestStartBeforeItsServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	go func() {
		time.Sleep(1500 * time.Millisecond)
		srv, err := natsserver.Start(natsserver.Config{DataDir: t.TempDir(), Listen: addr})
		if err != nil {
			t.Error(err)
			return
		}
		t.Cleanup(srv.Stop)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := tickfence.Start(ctx, tickfence.Options{Kinds: []actor.Kind{dungeon.Kind{}}, NodeID: "n1", NATS: "nats://" + addr, Shards: 4})
	if err != nil {
		t.Fatalf("a node started 1.5 s before its server: %v", err)
	}
	n.Close()
}
