package natskv_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/natskv"
	"github.com/tickfence/tickfence/store/storetest"
)

// newStore starts a real embedded JetStream server for one test; there is no fallback.
func newStore(t *testing.T) store.Store {
	t.Helper()
	srv, err := natsserver.Start(natsserver.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatalf("embedded NATS server: %v", err)
	}
	t.Cleanup(srv.Stop)
	nc, err := natskv.Connect("", srv.ConnectOption())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	s, err := natskv.Open(nc, natskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Backend{
		New: newStore,
		PutRaw: func(t *testing.T, s store.Store, epoch uint64, shard uint32, id string, data []byte) {
			ns := s.(*natskv.Store)
			if err := ns.PutRaw(context.Background(), epoch, shard, id, data); err != nil {
				t.Fatal(err)
			}
		},
	})
}

func TestControlConformance(t *testing.T) {
	storetest.RunControl(t, storetest.Backend{
		New: newStore,
		PutRaw: func(t *testing.T, s store.Store, epoch uint64, shard uint32, id string, data []byte) {
			ns := s.(*natskv.Store)
			if err := ns.PutRaw(context.Background(), epoch, shard, id, data); err != nil {
				t.Fatal(err)
			}
		},
	})
}

// TestRestoreConformance runs the restore cases with two operators' connections to one server.
func TestRestoreConformance(t *testing.T) {
	var mu sync.Mutex
	servers := map[store.Store]*natsserver.Server{}
	storetest.RunRestore(t, storetest.Backend{
		New: func(t *testing.T) store.Store {
			srv, err := natsserver.Start(natsserver.Config{DataDir: t.TempDir()})
			if err != nil {
				t.Fatalf("embedded NATS server: %v", err)
			}
			t.Cleanup(srv.Stop)
			s := openOn(t, srv)
			mu.Lock()
			servers[s] = srv
			mu.Unlock()
			return s
		},
		PutRaw: func(t *testing.T, s store.Store, epoch uint64, shard uint32, id string, data []byte) {
			if err := s.(*natskv.Store).PutRaw(context.Background(), epoch, shard, id, data); err != nil {
				t.Fatal(err)
			}
		},
		Peer: func(t *testing.T, s store.Store) store.Store {
			mu.Lock()
			defer mu.Unlock()
			return openOn(t, servers[s])
		},
	})
}

func TestOpenRefusesReconnectBuffer(t *testing.T) {
	srv, err := natsserver.Start(natsserver.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	nc, err := nats.Connect("", srv.ConnectOption())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := natskv.Open(nc, natskv.Options{}); err == nil {
		t.Fatal("Open accepted a connection that buffers publishes while reconnecting")
	}
}

// TestRestoreFencesPreRestoreTokens: after a restore (DESIGN 6) a zombie holding a grant of the old
// epoch can write nowhere: its epoch's stream is sealed, and in the new epoch every shard key was
// rewritten after the data. Without the rule — no seal, shard revisions restored as they were —
// the same write is accepted in both places.
func TestRestoreFencesPreRestoreTokens(t *testing.T) {
	ctx := context.Background()
	setup := func(t *testing.T) (*natskv.Store, store.Grant, string) {
		st := newStore(t).(*natskv.Store)
		if _, err := st.Bootstrap(ctx, store.Cluster{Shards: 8, Partitions: 1, Epoch: 1}); err != nil {
			t.Fatal(err)
		}
		a := store.Assignment{Owner: "A", Session: "a1"}
		tok, err := st.Assign(ctx, 1, 3, a, 0)
		if err != nil {
			t.Fatal(err)
		}
		g := store.Grant{Epoch: 1, Shard: 3, Token: tok, Assignment: a}
		id := ""
		for i := 0; id == "" || store.ShardOf(id, 8) != 3; i++ {
			id = fmt.Sprintf("i%d", i)
		}
		if _, err := st.Create(ctx, g, id, store.Record{Kind: "k"}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Write(ctx, g, id, store.Record{Kind: "k", Tick: 1, State: []byte("before")}); err != nil {
			t.Fatal(err)
		}
		return st, g, id
	}
	zombie := store.Record{Kind: "k", Tick: 2, State: []byte("zombie")}

	t.Run("with the rule", func(t *testing.T) {
		st, g, id := setup(t)
		b, err := st.Backup(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		cl, err := st.Restore(ctx, b, natskv.RestoreOptions{})
		if err != nil || cl.Epoch != 2 {
			t.Fatalf("Restore = %+v, %v", cl, err)
		}
		if _, err := st.Write(ctx, g, id, zombie); !errors.Is(err, store.ErrStaleOwner) {
			t.Fatalf("zombie write into the sealed epoch 1: err = %v, want ErrStaleOwner", err)
		}
		g2 := g
		g2.Epoch = 2
		if _, err := st.Write(ctx, g2, id, zombie); !errors.Is(err, store.ErrStaleOwner) {
			t.Fatalf("zombie token in epoch 2: err = %v, want ErrStaleOwner", err)
		}
		rec, _, err := st.Load(ctx, 2, 3, id)
		if err != nil || string(rec.State) != "before" {
			t.Fatalf("restored record %q, %v; want the backup's", rec.State, err)
		}
		if a, _, err := st.Assignment(ctx, 2, 3); err != nil || a.Owner != "" {
			t.Fatalf("shard 3 in epoch 2 = %+v, %v; want unassigned", a, err)
		}
	})
	t.Run("without the rule", func(t *testing.T) {
		st, g, id := setup(t)
		b, err := st.Backup(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Restore(ctx, b, natskv.RestoreOptions{SkipSeal: true, KeepShardRevision: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Write(ctx, g, id, zombie); err != nil {
			t.Fatalf("unsealed epoch 1: the zombie's write was refused (%v); the demonstration needs it accepted", err)
		}
		g2 := g
		g2.Epoch = 2
		if _, err := st.Write(ctx, g2, id, zombie); err != nil {
			t.Fatalf("epoch 2 with restored shard revisions: zombie refused (%v); the demonstration needs it accepted", err)
		}
		if rec, _, _ := st.Load(ctx, 2, 3, id); string(rec.State) != "zombie" {
			t.Fatalf("epoch 2 holds %q", rec.State)
		}
	})
}

// A read that fails changed nothing: its error is the cause, never "write outcome unknown" (which
// tells an operator a write may have landed).
func TestFailedReadsAreNotUnknownWrites(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	if _, err := s.Bootstrap(ctx, store.Cluster{Epoch: 1, Shards: 4, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	// Once, to open the buckets: what follows fails at the read itself.
	if _, err := s.Cluster(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Assignment(ctx, 1, 0); err != nil && !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	_, errCluster := s.Cluster(done)
	_, _, errShard := s.Assignment(done, 1, 0)
	_, errGet := s.(store.Control).ControlGet(done, "leader")
	for what, err := range map[string]error{"cluster record": errCluster, "shard": errShard, "control get": errGet} {
		if err == nil || errors.Is(err, store.ErrUnknownOutcome) || !errors.Is(err, context.Canceled) {
			t.Errorf("%s read on a cancelled context: %v; want context.Canceled, not an unknown outcome", what, err)
		}
	}
}
