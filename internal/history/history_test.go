package history_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickfence/tickfence/internal/history"
	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/memstore"
	"github.com/tickfence/tickfence/store/natskv"
)

// world is a real embedded server with a bootstrapped cluster whose data bucket keeps history.
func world(t *testing.T, keep int64) (*natskv.Store, jetstream.JetStream) {
	t.Helper()
	srv, err := natsserver.Start(natsserver.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	nc, err := natskv.Connect("", srv.ConnectOption())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	st, err := natskv.Open(nc, natskv.Options{History: keep})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Bootstrap(context.Background(), store.Cluster{Shards: 4, Partitions: 1, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	return st, js
}

func TestCheckFindsStaleWritesAndBackwardsTicks(t *testing.T) {
	ctx := context.Background()
	st, js := world(t, 1000)
	a := store.Assignment{Owner: "A", Session: "a"}
	tok, _ := st.Assign(ctx, 1, 0, a, 0)
	ga := store.Grant{Epoch: 1, Shard: 0, Token: tok, Assignment: a}
	id := idIn(0)
	if _, err := st.Create(ctx, ga, id, store.Record{Kind: "k"}); err != nil { // a Create: allowed
		t.Fatal(err)
	}
	if _, err := st.Write(ctx, ga, id, store.Record{Kind: "k", Tick: 5, State: []byte("a5")}); err != nil {
		t.Fatal(err)
	}
	b := store.Assignment{Owner: "B", Session: "b"}
	tokB, _ := st.Assign(ctx, 1, 0, b, tok)
	gb := store.Grant{Epoch: 1, Shard: 0, Token: tokB, Assignment: b}
	rec, rev, _ := st.Load(ctx, 1, 0, id)
	if _, err := st.Register(ctx, gb, id, rec, rev); err != nil { // a registration: allowed
		t.Fatal(err)
	}
	if _, err := st.Write(ctx, gb, id, store.Record{Kind: "k", Tick: 6, State: []byte("b6")}); err != nil {
		t.Fatal(err)
	}
	rep, err := history.Check(ctx, js, store.DataBucket(1, 0))
	if err != nil || !rep.OK() || rep.Records != 4 {
		t.Fatalf("a fenced history: %s, %v; want OK with 4 records", rep, err)
	}
	// The zombie A writes its old view with a plain put, as a store without the fence would let it.
	zombie, _ := store.EncodeRecord(store.Record{Token: tok, Kind: "k", Tick: 5, State: []byte("a5-again")})
	if err := st.PutRaw(ctx, 1, 0, id, zombie); err != nil {
		t.Fatal(err)
	}
	rep, err = history.Check(ctx, js, store.DataBucket(1, 0))
	if err != nil || rep.OK() || len(rep.Stale) != 1 || len(rep.Backwards) != 1 {
		t.Fatalf("after a zombie's plain put: %s, %v; want 1 stale record and 1 tick backwards", rep, err)
	}
	if !strings.Contains(rep.Stale[0], "under token") {
		t.Fatalf("stale report %q", rep.Stale[0])
	}
}

func TestCheckReportsLostHistoryAsIncomplete(t *testing.T) {
	ctx := context.Background()
	st, js := world(t, 1) // one revision per key: older ones are dropped
	a := store.Assignment{Owner: "A", Session: "a"}
	tok, _ := st.Assign(ctx, 1, 1, a, 0)
	g := store.Grant{Epoch: 1, Shard: 1, Token: tok, Assignment: a}
	id := idIn(1)
	if _, err := st.Create(ctx, g, id, store.Record{Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := st.Write(ctx, g, id, store.Record{Kind: "k", Tick: uint64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := history.Check(ctx, js, store.DataBucket(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || rep.Incomplete == "" {
		t.Fatalf("a history with dropped revisions passed: %s", rep)
	}
}

func idIn(shard uint32) string {
	for i := 0; ; i++ {
		if id := fmt.Sprintf("i%d", i); store.ShardOf(id, 4) == shard {
			return id
		}
	}
}

// The same check over memstore's message log: a fenced history passes; a zombie's plain put and a
// stale end are reported.
func TestCheckMemstoreHistory(t *testing.T) {
	ctx := context.Background()
	st := memstore.NewWithHistory()
	if _, err := st.Bootstrap(ctx, store.Cluster{Shards: 4, Partitions: 1, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	a := store.Assignment{Owner: "A", Session: "a"}
	tok, _ := st.Assign(ctx, 1, 0, a, 0)
	ga := store.Grant{Epoch: 1, Shard: 0, Token: tok, Assignment: a}
	id, id2 := idIn(0), idIn2(0)
	for _, x := range []string{id, id2} {
		if _, err := st.Create(ctx, ga, x, store.Record{Kind: "k"}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Write(ctx, ga, x, store.Record{Kind: "k", Tick: 5, State: []byte("a5")}); err != nil {
			t.Fatal(err)
		}
	}
	b := store.Assignment{Owner: "B", Session: "b"}
	tokB, _ := st.Assign(ctx, 1, 0, b, tok)
	gb := store.Grant{Epoch: 1, Shard: 0, Token: tokB, Assignment: b}
	rec, rev, _ := st.Load(ctx, 1, 0, id)
	if _, err := st.Register(ctx, gb, id, rec, rev); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Write(ctx, gb, id, store.Record{Kind: "k", Tick: 6, State: []byte("b6")}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.End(ctx, gb, id2); err != nil {
		t.Fatal(err)
	}
	rep, err := history.Memstore(st, store.DataBucket(1, 0))
	if err != nil || !rep.OK() || rep.Records != 6 {
		t.Fatalf("a fenced history: %s, %v; want OK with 6 records", rep, err)
	}
	zombie, _ := store.EncodeRecord(store.Record{Token: tok, Kind: "k", Tick: 5, State: []byte("a5-again")})
	st.PutRaw(1, 0, id, zombie)
	rep, err = history.Memstore(st, store.DataBucket(1, 0))
	if err != nil || rep.OK() || len(rep.Stale) != 1 || len(rep.Backwards) != 1 {
		t.Fatalf("after a zombie's plain put: %s, %v; want 1 stale record and 1 tick backwards", rep, err)
	}
	// A stale end, as the message log would hold it if a store let it through.
	msgs := []history.Message{
		{Seq: 1, Key: "shard.0", Value: []byte(`{}`)},
		{Seq: 2, Key: "shard.0", Value: []byte(`{}`)},
		{Seq: 3, Key: "inst.0.x", Deleted: true, Token: 1},
	}
	rep, err = history.CheckMessages(store.DataBucket(1, 0), msgs)
	if err != nil || len(rep.Stale) != 1 {
		t.Fatalf("stale end: %s, %v", rep, err)
	}
	if rep, _ := history.CheckMessages(store.DataBucket(1, 0), msgs[1:]); rep.Incomplete == "" {
		t.Fatal("a history with a gap passed")
	}
}

func idIn2(shard uint32) string {
	for i := 1000; ; i++ {
		if id := fmt.Sprintf("i%d", i); store.ShardOf(id, 4) == shard {
			return id
		}
	}
}
