package demo

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/natskv"
)

// tickd gives the demo's creation a minute (dctx); Start now sets GiveUp = 10 s on the client
// before creating, so a dungeon whose owner says retry for 11 s (a node still taking its shards)
// fails the demo where it used to be created.
func TestCreateIsBoundedByItsContextNotGiveUp(t *testing.T) {
	srv, err := natsserver.Start(natsserver.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	conn := func() *nats.Conn {
		nc, err := natskv.Connect("", srv.ConnectOption())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	cnc, onc := conn(), conn()
	const shards = 8
	ready := time.Now().Add(11 * time.Second)
	retry := wire.EncodeReply(wire.Reply{Error: wire.Errorf(wire.CodeRetry, "not ready")})
	ok := wire.EncodeReply(wire.Reply{OK: true})
	sub, err := onc.Subscribe(wire.ShardSubject(store.ShardOf(ID(0), shards)), func(m *nats.Msg) {
		if time.Now().Before(ready) {
			_ = m.Respond(retry)
			return
		}
		_ = m.Respond(ok)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	_ = onc.Flush()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // as tickd's dctx
	defer cancel()
	d, err := Start(ctx, Config{Client: natscmd.NewClient(cnc, shards), Instances: 1, Players: 1,
		Every: time.Hour, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("Start with a minute to create: %v", err)
	}
	d.Stop()
}
