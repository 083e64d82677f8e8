package natskv_test

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/natskv"
	"github.com/tickfence/tickfence/store/storetest"
)

func TestBatchConformance(t *testing.T) {
	storetest.RunBatch(t, storetest.Backend{New: newStore})
}

// The strategy's real home: R3 data buckets on three clustered servers.
func TestBatchConformanceR3(t *testing.T) {
	storetest.RunBatch(t, storetest.Backend{New: func(t *testing.T) store.Store {
		srvs, err := natsserver.StartCluster(3, t.TempDir())
		if err != nil {
			t.Fatalf("three clustered servers: %v", err)
		}
		t.Cleanup(func() {
			for _, s := range srvs {
				s.Stop()
			}
		})
		nc, err := natskv.Connect(srvs[0].ClientURL())
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		t.Cleanup(nc.Close)
		s, err := natskv.Open(nc, natskv.Options{Replicas: 3})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}})
}

// A data stream made without atomic publishing (an older tickd, or by hand) refuses a batch with
// ErrBatchesOff, a definite refusal: nothing stored.
func TestBatchOnAStreamWithoutAtomicPublish(t *testing.T) {
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
	ctx := context.Background()
	if _, err := s.Bootstrap(ctx, store.Cluster{Shards: 4, Partitions: 1, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, "KV_"+store.DataBucket(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := info.Config
	cfg.AllowAtomicPublish = false
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatalf("turn atomic publishing off: %v", err)
	}
	a := store.Assignment{Owner: "A", Session: "A-1"}
	tok, err := s.Assign(ctx, 1, 2, a, 0)
	if err != nil {
		t.Fatal(err)
	}
	g := store.Grant{Epoch: 1, Shard: 2, Token: tok, Assignment: a}
	var id string
	for i := 0; ; i++ {
		if id = "x" + string(rune('a'+i)); store.ShardOf(id, 4) == 2 {
			break
		}
	}
	if _, err := s.Create(ctx, g, id, store.Record{Kind: "test"}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	s.WriteBatch(g, []store.BatchWrite{{ID: id, Rec: store.Record{Kind: "test", State: []byte("s")}}},
		func(_ int, _ uint64, err error) { done <- err })
	err = <-done
	if !errors.Is(err, store.ErrBatchesOff) || !store.Refused(err) {
		t.Fatalf("batch on a stream without atomic publishing: %v; want ErrBatchesOff, a definite refusal", err)
	}
	rec, _, err := s.Load(ctx, 1, 2, id)
	if err != nil || len(rec.State) != 0 {
		t.Fatalf("after the refused batch: state %q, err %v; want the placeholder", rec.State, err)
	}
}
