package natskv_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/natskv"
)

// TestServerRefusalIsDefinite: the server refuses a fenced write for a reason of its own (here the
// data stream's message size limit, lowered by an operator). The error says so — a definite
// refusal, not a stale owner and not an unknown outcome — and nothing changed: the record and the
// shard key are as before, so the writer may keep its token.
func TestServerRefusalIsDefinite(t *testing.T) {
	ctx := context.Background()
	s, nc := storeAndConn(t)
	cl, err := s.Bootstrap(ctx, store.Cluster{Shards: 8, Partitions: 1, Epoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	const shard = 3
	a := store.Assignment{Owner: "n1", Session: "n1-s1"}
	tok, err := s.Assign(ctx, cl.Epoch, shard, a, 0)
	if err != nil {
		t.Fatal(err)
	}
	g := store.Grant{Epoch: cl.Epoch, Shard: shard, Token: tok, Assignment: a}
	id := idInShard(t, cl, shard)
	if _, err := s.Create(ctx, g, id, store.Record{Kind: "counter", State: []byte{0x80}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(ctx, g, id, store.Record{Kind: "counter", Tick: 1, State: []byte{0x80}}); err != nil {
		t.Fatal(err)
	}
	before, _, err := s.Load(ctx, cl.Epoch, shard, id)
	if err != nil {
		t.Fatal(err)
	}

	// An operator lowers the data stream's message size limit under the running node.
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	name := ""
	for n := range js.StreamNames(ctx).Name() {
		if strings.Contains(n, "data") {
			name = n
		}
	}
	if name == "" {
		t.Fatal("no data stream found")
	}
	stream, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	cfg := stream.CachedInfo().Config
	cfg.MaxMsgSize = 256
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}

	big := store.Record{Kind: "counter", Tick: 2, State: make([]byte, 1024)}
	_, err = s.Write(ctx, g, id, big)
	check := func(op string, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s over the stream's limit was stored", op)
		}
		if !store.Refused(err) || !errors.Is(err, store.ErrRefused) {
			t.Fatalf("%s: %v; want a definite refusal (store.Refused)", op, err)
		}
		if errors.Is(err, store.ErrStaleOwner) || errors.Is(err, store.ErrUnknownOutcome) {
			t.Fatalf("%s: %v is classified as stale owner or unknown outcome", op, err)
		}
	}
	check("Write", err)
	done := make(chan error, 1)
	s.WriteAsync(g, id, big, func(_ uint64, err error) { done <- err })
	check("WriteAsync", <-done)

	after, _, err := s.Load(ctx, cl.Epoch, shard, id)
	if err != nil {
		t.Fatal(err)
	}
	if after.Tick != before.Tick {
		t.Fatalf("record changed by a refused write: tick %d → %d", before.Tick, after.Tick)
	}
	if _, rev, err := s.Assignment(ctx, cl.Epoch, shard); err != nil || rev != tok {
		t.Fatalf("shard key after the refusals: revision %d, %v; want %d (the token is still good)", rev, err, tok)
	}
	// The token is still good: a write that fits is stored under it.
	if _, err := s.Write(ctx, g, id, store.Record{Kind: "counter", Tick: 3, State: []byte{0x80}}); err != nil {
		t.Fatalf("a write under the same token after a refusal: %v", err)
	}
}

func idInShard(t *testing.T, cl store.Cluster, shard uint32) string {
	t.Helper()
	for i := 0; ; i++ {
		if id := fmt.Sprintf("inst-%d", i); store.ShardOf(id, cl.Shards) == shard {
			return id
		}
	}
}

// storeAndConn starts a real embedded JetStream server for one test and returns a store on it
// and its connection (to change the streams under the store, as an operator would).
func storeAndConn(t *testing.T) (*natskv.Store, *nats.Conn) {
	t.Helper()
	srv, err := natsserver.Start(natsserver.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatalf("embedded NATS server: %v", err)
	}
	t.Cleanup(srv.Stop)
	nc, err := natskv.Connect("", srv.ConnectOption())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	s, err := natskv.Open(nc, natskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, nc
}
