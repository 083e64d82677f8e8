package nemesis

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/shard"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/memstore"
)

// nodeInEpoch is newOneNodeWith in a cluster of epoch epoch (a restored cluster), with raw put
// as instance i1 of its bucket before the host takes shard 0.
func nodeInEpoch(t *testing.T, epoch uint64, raw []byte) *oneNode {
	ctx := context.Background()
	mem := memstore.New()
	if _, err := mem.Bootstrap(ctx, store.Cluster{Shards: 1, Partitions: 1, Epoch: epoch}); err != nil {
		t.Fatal(err)
	}
	mem.PutRaw(epoch, 0, "i1", raw)
	eng, err := actor.NewEngine(actor.EngineConfig{Rate: 10, Workers: 1, Slot: 100 * time.Millisecond, Start: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	kinds, _ := actor.NewKinds(ledgerKind{})
	pub := &keptEffects{}
	h, err := shard.New(ctx, shard.Config{Node: "n1", Session: "s1", Store: mem, Kinds: kinds, Engine: eng, Effects: pub,
		TombstoneTTL: time.Hour, Registerer: prometheus.NewRegistry(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close(ctx); eng.Stop() })
	a := store.Assignment{Owner: "n1", Session: "s1"}
	tok, err := mem.Assign(ctx, epoch, 0, a, 0)
	if err != nil {
		t.Fatal(err)
	}
	h.Apply(store.AssignmentEvent{Shard: 0, Revision: tok, Assignment: a})
	for !h.Running(0) {
		time.Sleep(10 * time.Millisecond)
	}
	return &oneNode{t: t, mem: mem, h: h, pub: pub}
}

// TestEffectKeyReusedByARestoredTombstone (a review of issue 34.3's fix): a tombstone was loaded
// without the FxEpoch rebase (loadOne returned before it), and a create from a tombstone keeps the
// tombstone's FxSeq and FxEpoch. A backup holds i1's
// tombstone (epoch 1). The original cluster (epoch 1) creates i1 again from it after the backup;
// the restored cluster (epoch 2) does the same from the restored copy. Both lives key their first
// effect i1:1:<seq+1>: one key, two effects.
func TestEffectKeyReusedByARestoredTombstone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tomb, err := store.EncodeRecord(store.Record{V: store.SchemaVersion, Kind: "ledger", Tick: 50, Ended: true,
			EndedAt: time.Now().UnixMilli(), FxSeq: store.FxSeqBase(30) + 5, FxEpoch: 1})
		if err != nil {
			t.Fatal(err)
		}
		orig := nodeInEpoch(t, 1, tomb)
		restored := nodeInEpoch(t, 2, tomb)
		seen := map[string]string{}
		for name, n := range map[string]*oneNode{"original": orig, "restored": restored} {
			n.mustOK("c-"+name, n.submit("c-"+name, map[string]any{"type": "create", "kind": "ledger"}))
			n.mustOK("a-"+name, n.submit("a-"+name, map[string]any{"type": "add", "op": name}))
		}
		time.Sleep(time.Second)
		if len(orig.pub.effects()) == 0 || len(restored.pub.effects()) == 0 {
			t.Fatal("no effects published")
		}
		for _, n := range []*oneNode{orig, restored} {
			for _, e := range n.pub.effects() {
				if p, dup := seen[e.Key]; dup && p != string(e.Payload) {
					t.Errorf("key %s carried %q and then %q: one key, two effects", e.Key, p, e.Payload)
				}
				seen[e.Key] = string(e.Payload)
			}
		}
	})
}
