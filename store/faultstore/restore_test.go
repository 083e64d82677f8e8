package faultstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"

	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/faultstore"
	"github.com/tickfence/tickfence/store/memstore"
)

// restoreSetup: a memstore cluster of 4 shards, 2 partitions, behind a Net; shard 1 granted to
// A and holding one instance; a backup of it taken through the operator's client.
func restoreSetup(t *testing.T, seed uint64) (*faultstore.Net, store.Grant, string, store.Backup) {
	t.Helper()
	ctx := context.Background()
	n := faultstore.New(memstore.New(), seed, faultstore.Options{})
	c := n.Client("node")
	if _, err := c.Bootstrap(ctx, store.Cluster{Shards: 4, Partitions: 2, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	a := store.Assignment{Owner: "A", Session: "a1"}
	tok, err := c.Assign(ctx, 1, 1, a, 0)
	if err != nil {
		t.Fatal(err)
	}
	g := store.Grant{Epoch: 1, Shard: 1, Token: tok, Assignment: a}
	id := ""
	for i := 0; id == "" || store.ShardOf(id, 4) != 1; i++ {
		id = fmt.Sprintf("i%d", i)
	}
	if _, err := c.Create(ctx, g, id, store.Record{Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(ctx, g, id, store.Record{Kind: "k", Tick: 1, State: []byte("backed up")}); err != nil {
		t.Fatal(err)
	}
	b, err := store.TakeBackup(ctx, n.Client("operator"), nil)
	if err != nil {
		t.Fatal(err)
	}
	return n, g, id, b
}

// goLive grants shard 1 of the live epoch to B and writes acknowledged state there, through the
// wrapped store; wantLive checks it is still there.
func goLive(t *testing.T, st store.Store, id string) store.Grant {
	t.Helper()
	ctx := context.Background()
	cl, err := st.Cluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, rev, err := st.LatestAssignment(ctx, cl.Epoch, 1)
	if err != nil {
		t.Fatal(err)
	}
	b := store.Assignment{Owner: "B", Session: "b1"}
	tok, err := st.Assign(ctx, cl.Epoch, 1, b, rev)
	if err != nil {
		t.Fatal(err)
	}
	g := store.Grant{Epoch: cl.Epoch, Shard: 1, Token: tok, Assignment: b}
	rec, lrev, err := st.Load(ctx, cl.Epoch, 1, id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Register(ctx, g, id, rec, lrev); err != nil {
		t.Fatal(err)
	}
	rec.State = []byte("live")
	if _, err := st.Write(ctx, g, id, rec); err != nil {
		t.Fatal(err)
	}
	return g
}

func wantLive(t *testing.T, st store.Store, g store.Grant, id string) {
	t.Helper()
	ctx := context.Background()
	if cl, err := st.Cluster(ctx); err != nil || cl.Epoch != g.Epoch {
		t.Fatalf("cluster = %+v, %v; want epoch %d", cl, err, g.Epoch)
	}
	if rec, _, err := st.Load(ctx, g.Epoch, 1, id); err != nil || string(rec.State) != "live" {
		t.Fatalf("epoch %d: %s = %q, %v; want the acknowledged %q", g.Epoch, id, rec.State, err, "live")
	}
	if a, tok, err := st.LatestAssignment(ctx, g.Epoch, 1); err != nil || a != g.Assignment || tok != g.Token {
		t.Fatalf("epoch %d shard 1 = %+v@%d, %v; want %+v@%d", g.Epoch, a, tok, err, g.Assignment, g.Token)
	}
}

// A restorer frozen right after its claim check, as it issues the reset of epoch 2's first
// bucket (a GC pause; to its operator it looks crashed), is taken over; the cluster writes
// acknowledged state into epoch 3. When it wakes its reset lands — in epoch 2, never live — and
// it stops at its next check.
func TestFrozenRestorerTakenOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		n, _, id, b := restoreSetup(t, 1)
		op1, op2 := n.Client("op1"), n.Client("op2")
		n.OnWrite(func(client, key string) {
			if client == "op1" && key == store.DataBucket(2, 0) {
				op1.Freeze()
			}
		})
		first := make(chan error, 1)
		go func() {
			_, err := store.Restore(ctx, op1, b, store.RestoreOptions{Operator: "op1"})
			first <- err
		}()
		synctest.Wait()
		if !op1.Frozen() {
			t.Fatalf("op1 did not freeze at its reset: %v", <-first)
		}
		n.OnWrite(nil)
		cl, err := store.Restore(ctx, op2, b, store.RestoreOptions{Operator: "op2", Takeover: true})
		if err != nil || cl.Epoch != 3 {
			t.Fatalf("takeover = %+v, %v; want epoch 3", cl, err)
		}
		g := goLive(t, n.Under(), id)
		op1.Thaw()
		if err := <-first; !errors.Is(err, store.ErrRestoreClaimLost) {
			t.Fatalf("the frozen restorer after waking: %v; want ErrRestoreClaimLost", err)
		}
		wantLive(t, n.Under(), g, id)
	})
}

// A restorer killed half way through its records fails with ErrKilled; the cluster stays at
// epoch 1 with epoch 1 sealed, and a takeover from another process finishes it.
func TestKilledRestorerTakenOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		n, g1, id, b := restoreSetup(t, 2)
		op1, op2 := n.Client("op1"), n.Client("op2")
		n.OnWrite(func(client, key string) {
			if client == "op1" && key == store.ShardKey(0) {
				op1.Kill()
			}
		})
		if _, err := store.Restore(ctx, op1, b, store.RestoreOptions{Operator: "op1"}); !errors.Is(err, faultstore.ErrKilled) {
			t.Fatalf("killed restorer: %v; want ErrKilled", err)
		}
		n.OnWrite(nil)
		if cl, _ := n.Under().Cluster(ctx); cl.Epoch != 1 {
			t.Fatalf("cluster epoch %d after the kill; want 1", cl.Epoch)
		}
		if _, err := n.Under().Write(ctx, g1, id, store.Record{Kind: "k", Tick: 2}); !errors.Is(err, store.ErrSealed) {
			t.Fatalf("write to epoch 1 after the killed restore sealed it: %v; want ErrSealed", err)
		}
		if _, err := store.Restore(ctx, op2, b, store.RestoreOptions{Operator: "op2"}); !errors.Is(err, store.ErrRestoreClaimed) {
			t.Fatalf("restore without takeover: %v; want ErrRestoreClaimed", err)
		}
		cl, err := store.Restore(ctx, op2, b, store.RestoreOptions{Operator: "op2", Takeover: true, FromEpoch: 1})
		if err != nil || cl.Epoch != 3 {
			t.Fatalf("takeover = %+v, %v; want epoch 3", cl, err)
		}
		if rec, _, err := n.Under().Load(ctx, 3, 1, id); err != nil || string(rec.State) != "backed up" {
			t.Fatalf("restored %q, %v", rec.State, err)
		}
	})
}

// Restores under every fault of the Net, retried (with a takeover) until one commits, for many
// seeds: whatever was lost, landed late or never, the live epoch ends up holding the backup,
// every shard unassigned, and epoch 1 sealed; no late step of an earlier attempt touches it.
func TestRestoreUnderFaults(t *testing.T) {
	var counts = map[string]uint64{}
	for seed := uint64(1); seed <= 100; seed++ {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			n, g1, id, b := restoreSetup(t, seed)
			o := faultstore.Chaos()
			o.LoseAnswer = 0.05
			n.SetOptions(o)
			var err error
			attempts := 0
			for ; attempts < 100; attempts++ {
				op := n.Client(fmt.Sprintf("op%d", attempts))
				_, err = store.Restore(ctx, op, b, store.RestoreOptions{Operator: op.Name(), Takeover: attempts > 0, FromEpoch: 1})
				if err == nil || errors.Is(err, store.ErrEpochMoved) {
					break // committed, by this attempt or (an answer lost) an earlier one
				}
			}
			if err != nil && !errors.Is(err, store.ErrEpochMoved) {
				t.Fatalf("seed %d: no restore committed in %d attempts: %v", seed, attempts, err)
			}
			n.Heal()
			synctest.Wait()
			for k, v := range n.Counts() {
				counts[k] += v
			}
			under := n.Under()
			cl, err := under.Cluster(ctx)
			if err != nil || cl.Epoch < 2 {
				t.Fatalf("seed %d: cluster %+v, %v", seed, cl, err)
			}
			if rec, _, err := under.Load(ctx, cl.Epoch, 1, id); err != nil || string(rec.State) != "backed up" {
				t.Fatalf("seed %d: epoch %d holds %q, %v; want the backup", seed, cl.Epoch, rec.State, err)
			}
			for sh := uint32(0); sh < cl.Shards; sh++ {
				if a, _, err := under.LatestAssignment(ctx, cl.Epoch, sh); err != nil || a != (store.Assignment{}) {
					t.Fatalf("seed %d: epoch %d shard %d = %+v, %v; want unassigned", seed, cl.Epoch, sh, a, err)
				}
			}
			if _, err := under.Write(ctx, g1, id, store.Record{Kind: "k", Tick: 9}); !errors.Is(err, store.ErrSealed) {
				t.Fatalf("seed %d: zombie write to epoch 1: %v; want ErrSealed", seed, err)
			}
			g := goLive(t, under, id)
			n.Heal() // nothing may land after the epoch went live
			synctest.Wait()
			wantLive(t, under, g, id)
		})
	}
	t.Logf("%s", faultstore.FormatCounts(counts))
	if counts["lost_answer"] == 0 || counts["transient"] == 0 {
		t.Fatalf("the restores met no faults: %v", counts)
	}
}
