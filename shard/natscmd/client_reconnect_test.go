package natscmd_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/store/natskv"
)

// The replies' inbox subscription must survive a server restart (nats.go resubscribes).
func TestExecAcrossAReconnect(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	srv, err := natsserver.Start(natsserver.Config{DataDir: dir, Listen: addr})
	if err != nil {
		t.Fatal(err)
	}
	conn := func() *nats.Conn {
		nc, err := natskv.Connect("nats://"+addr, nats.ReconnectWait(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	cnc, onc := conn(), conn()
	id := "reconnect-1"
	fakeOwner(t, onc, id, func(int, *nats.Msg) ([]byte, time.Duration) { return okWith("ok"), 0 })
	c := natscmd.NewClient(cnc, clientShards)
	c.GiveUp = 10 * time.Second
	if _, _, err := c.Exec(context.Background(), id, "", attack, false); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	time.Sleep(200 * time.Millisecond)
	done := make(chan error, 1)
	go func() { _, _, err := c.Exec(context.Background(), id, "", attack, false); done <- err }()
	time.Sleep(300 * time.Millisecond)
	srv2, err := natsserver.Start(natsserver.Config{DataDir: dir, Listen: addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv2.Stop)
	start := time.Now()
	if err := <-done; err != nil {
		t.Fatalf("Exec across a reconnect: %v", err)
	}
	t.Logf("answered %v after the server came back", time.Since(start))
	if _, _, err := c.Exec(context.Background(), id, "", attack, false); err != nil {
		t.Fatalf("Exec after reconnect: %v", err)
	}
}
