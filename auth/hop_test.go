package auth_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/auth"
	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/shard/wire"
)

// BenchmarkCommandAccountHop measures what the trust boundary costs a command's round trip: the
// same responder (on node credentials, answering at once) asked by an operator within the
// trusted account, and by a trusted gateway and a player from the players' account, whose
// requests cross the service imports (the server rewrites the reply subject). Run it interleaved and compare the ratios within one run:
//
//	go test -run '^$' -bench CommandAccountHop -count 5 ./auth
func BenchmarkCommandAccountHop(b *testing.B) {
	dir := b.TempDir()
	adir := filepath.Join(dir, "auth")
	if _, err := auth.Init(adir); err != nil {
		b.Fatal(err)
	}
	if _, err := auth.NewUser(adir, auth.Gateway, "ann"); err != nil {
		b.Fatal(err)
	}
	srv, err := natsserver.Start(natsserver.Config{DataDir: filepath.Join(dir, "js"), Listen: "127.0.0.1:0", AuthDir: adir})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Stop)
	connect := func(name string) *nats.Conn {
		opts, err := auth.ClientOptions(auth.CredsFile(adir, name), nil)
		if err != nil {
			b.Fatal(err)
		}
		nc, err := nats.Connect(srv.ClientURL(), opts...)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(nc.Close)
		return nc
	}
	node := connect("node")
	ok := wire.EncodeReply(wire.Reply{OK: true})
	for _, subj := range []string{wire.ShardSubject(0), wire.PlayerShardSubject(0)} {
		if _, err := node.Subscribe(subj, func(m *nats.Msg) {
			if natscmd.InboxReply(m.Reply) {
				_ = m.Respond(ok)
			}
		}); err != nil {
			b.Fatal(err)
		}
	}
	if err := node.Flush(); err != nil {
		b.Fatal(err)
	}
	for _, who := range []string{"operator", "gateway", "ann"} {
		c := natscmd.NewClient(connect(who), 1)
		if who == "ann" {
			c.Player = who // a player: its own subjects
		}
		b.Run(who, func(b *testing.B) {
			for b.Loop() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				r, err := c.Once(ctx, "bench-1", "", map[string]any{"type": "status"})
				cancel()
				if err != nil || !r.OK {
					b.Fatalf("%+v %v", r, err)
				}
			}
		})
	}
}
