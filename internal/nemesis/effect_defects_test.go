package nemesis

// Three effect defects of shard/instance.go the nemesis work found (issue 12.2), each the smallest
// test that failed before its fix: one node, one shard, the ledger kind (every add emits an
// effect carrying its op ID), a publisher that keeps what it is given.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/shard"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/memstore"
)

// keptEffects is an EffectPublisher that keeps every effect it is given (or fails while failing).
type keptEffects struct {
	mu      sync.Mutex
	got     []store.Effect
	failing bool
}

func (k *keptEffects) Publish(_ string, e store.Effect, done func(error)) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.failing {
		go done(errFxUnavailable)
		return
	}
	k.got = append(k.got, e)
	go done(nil)
}

func (k *keptEffects) effects() []store.Effect {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]store.Effect(nil), k.got...)
}

func (k *keptEffects) fail(on bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.failing = on
}

type oneNode struct {
	t   *testing.T
	mem *memstore.Store
	h   *shard.Host
	pub *keptEffects
}

// newOneNode runs a host owning shard 0 of a one-shard cluster (call inside a synctest bubble).
func newOneNode(t *testing.T, tombstoneTTL time.Duration) *oneNode {
	return newOneNodeWith(t, tombstoneTTL, nil)
}

// newOneNodeWith is newOneNode with before run on the store before the host takes the shard.
func newOneNodeWith(t *testing.T, tombstoneTTL time.Duration, before func(*memstore.Store)) *oneNode {
	ctx := context.Background()
	mem := memstore.New()
	if _, err := mem.Bootstrap(ctx, store.Cluster{Shards: 1, Partitions: 1, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	if before != nil {
		before(mem)
	}
	eng, err := actor.NewEngine(actor.EngineConfig{Rate: 10, Workers: 1, Slot: 100 * time.Millisecond, Start: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	kinds, _ := actor.NewKinds(ledgerKind{})
	pub := &keptEffects{}
	h, err := shard.New(ctx, shard.Config{Node: "n1", Session: "s1", Store: mem, Kinds: kinds, Engine: eng, Effects: pub,
		TombstoneTTL: tombstoneTTL, Registerer: prometheus.NewRegistry(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close(ctx); eng.Stop() })
	a := store.Assignment{Owner: "n1", Session: "s1"}
	tok, err := mem.Assign(ctx, 1, 0, a, 0)
	if err != nil {
		t.Fatal(err)
	}
	h.Apply(store.AssignmentEvent{Shard: 0, Revision: tok, Assignment: a})
	for !h.Running(0) {
		time.Sleep(10 * time.Millisecond)
	}
	return &oneNode{t: t, mem: mem, h: h, pub: pub}
}

// submit sends a command to instance i1; its answer arrives on the channel.
func (n *oneNode) submit(reqID string, cmd map[string]any) <-chan wire.Reply {
	return n.submitTo("i1", reqID, cmd)
}

// submitTo sends a command to instance id.
func (n *oneNode) submitTo(id, reqID string, cmd map[string]any) <-chan wire.Reply {
	body, _ := wire.Canonical(cmd)
	req, err := wire.DecodeRequest(wire.Subject(0, id), reqID, "", body, 1)
	if err != nil {
		n.t.Fatal(err)
	}
	ch := make(chan wire.Reply, 1)
	n.h.Submit(shard.Command{Request: req, Received: time.Now(), Reply: func(b []byte) {
		r, _ := wire.DecodeReply(b, false)
		ch <- r
	}})
	return ch
}

func (n *oneNode) mustOK(reqID string, ch <-chan wire.Reply) {
	if r := <-ch; !r.OK {
		n.t.Fatalf("%s: %+v, want ok", reqID, r.Error)
	}
}

// TestEffectOfCommandEndedInSameTick: an add and an end reach the instance in the same tick; both
// are acknowledged, but the add's effect never reaches the outbox (tickBody returns for the ended
// record before it takes the Logic's effects), so it is lost.
func TestEffectOfCommandEndedInSameTick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newOneNode(t, 0)
		n.mustOK("c1", n.submit("c1", map[string]any{"type": "create", "kind": "ledger"}))
		add := n.submit("a1", map[string]any{"type": "add", "op": "a1"}) // both in one tick's mailbox
		end := n.submit("e1", map[string]any{"type": "end"})
		n.mustOK("a1", add)
		n.mustOK("e1", end)
		time.Sleep(2 * time.Second)
		if got := n.pub.effects(); len(got) != 1 {
			t.Fatalf("effects of the acknowledged add: %d published, want 1", len(got))
		}
	})
}

// TestTombstoneExpiryDropsUndeliveredEffects: while the effects stream is down an add is
// acknowledged (its effect stored in the outbox) and the instance is ended in a later tick; the
// tombstone expires (TombstoneTTL) before the stream is back, and its delete marker takes the
// undelivered effect with it.
func TestTombstoneExpiryDropsUndeliveredEffects(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newOneNode(t, time.Second)
		n.pub.fail(true)
		n.mustOK("c1", n.submit("c1", map[string]any{"type": "create", "kind": "ledger"}))
		n.mustOK("a1", n.submit("a1", map[string]any{"type": "add", "op": "a1"}))
		if rec, _, _ := n.mem.Load(context.Background(), 1, 0, "i1"); len(rec.Fx) != 1 {
			t.Fatalf("outbox after the add: %v, want its effect", rec.Fx)
		}
		n.mustOK("e1", n.submit("e1", map[string]any{"type": "end"}))
		time.Sleep(3 * time.Second) // past the tombstone's TTL
		n.pub.fail(false)           // the stream is back
		time.Sleep(3 * time.Second)
		if got := n.pub.effects(); len(got) != 1 {
			t.Fatalf("effects of the acknowledged add: %d published, want 1", len(got))
		}
	})
}

// TestEffectKeyReusedAfterTombstoneExpiry: an instance ID that was ended, whose tombstone expired,
// and that is created again in the same epoch starts its effect sequence again: its first effect
// gets the key of the first instance's first effect (<id>:<epoch>:1), which a consumer keying on
// effect keys (examples/loot) drops as applied already.
func TestEffectKeyReusedAfterTombstoneExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newOneNode(t, time.Second)
		n.mustOK("c1", n.submit("c1", map[string]any{"type": "create", "kind": "ledger"}))
		n.mustOK("a1", n.submit("a1", map[string]any{"type": "add", "op": "a1"}))
		n.mustOK("e1", n.submit("e1", map[string]any{"type": "end"}))
		time.Sleep(3 * time.Second) // the tombstone expires
		n.mustOK("c2", n.submit("c2", map[string]any{"type": "create", "kind": "ledger"}))
		n.mustOK("a2", n.submit("a2", map[string]any{"type": "add", "op": "a2"}))
		time.Sleep(time.Second)
		seen := map[string]string{}
		for _, e := range n.pub.effects() {
			if p, dup := seen[e.Key]; dup && p != string(e.Payload) {
				t.Fatalf("key %s carried %q and then %q: one key, two effects", e.Key, p, e.Payload)
			}
			seen[e.Key] = string(e.Payload)
		}
	})
}

// TestEffectKeyReusedAfterARestore (issue 34.3): a restore copies a record into a new epoch, whose
// bucket's revisions start again at 1. The restored life of i1 was created at revision 30 of the
// earlier epoch (its effect sequence at 30<<24 + 5); here it is ended, and i1 is created again at
// revision 30 of this epoch's bucket. Keys were <id>:<epoch now>:<seq from the creation's base>,
// so the restored life's next effects and the new life's first ones had the same keys.
func TestEffectKeyReusedAfterARestore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		restored, err := store.EncodeRecord(store.Record{V: store.SchemaVersion, Kind: "ledger", Tick: 50,
			State: mustState(t, ledger{Ops: []string{"old"}}), FxSeq: store.FxSeqBase(30) + 5, FxEpoch: 0})
		if err != nil {
			t.Fatal(err)
		}
		n := newOneNodeWith(t, time.Second, func(mem *memstore.Store) {
			mem.PutRaw(1, 0, "i1", restored) // what a restore wrote: revision 1 of this bucket
		})
		for i := range 3 {
			id := fmt.Sprintf("r%d", i)
			n.mustOK(id, n.submit(id, map[string]any{"type": "add", "op": id}))
		}
		n.mustOK("e1", n.submit("e1", map[string]any{"type": "end"}))
		time.Sleep(3 * time.Second) // the tombstone expires
		// Another instance's writes take the revisions up to 29, one at a time: the new life of
		// i1 is created at revision 30, as the restored one was in its epoch.
		n.mustOK("pc", n.submitTo("pad", "pc", map[string]any{"type": "create", "kind": "ledger"}))
		for i := 0; ; i++ {
			_, rev, err := n.mem.Load(context.Background(), 1, 0, "pad")
			if err != nil {
				t.Fatal(err)
			}
			if rev >= 29 {
				if rev > 29 {
					t.Fatalf("padding reached revision %d, want 29", rev)
				}
				break
			}
			id := fmt.Sprintf("p%d", i)
			n.mustOK(id, n.submitTo("pad", id, map[string]any{"type": "add", "op": id}))
		}
		n.mustOK("c2", n.submit("c2", map[string]any{"type": "create", "kind": "ledger"}))
		for i := range 8 {
			id := fmt.Sprintf("n%d", i)
			n.mustOK(id, n.submit(id, map[string]any{"type": "add", "op": id}))
		}
		time.Sleep(time.Second)
		seen := map[string]string{}
		for _, e := range n.pub.effects() {
			if p, dup := seen[e.Key]; dup && p != string(e.Payload) {
				t.Fatalf("key %s carried %q and then %q: one key, two effects", e.Key, p, e.Payload)
			}
			seen[e.Key] = string(e.Payload)
		}
		if len(seen) < 11 {
			t.Fatalf("%d effect keys, want 11 (3 of the restored life, 8 of the new one)", len(seen))
		}
	})
}

func mustState(t *testing.T, l ledger) []byte {
	b, err := l.MarshalState()
	if err != nil {
		t.Fatal(err)
	}
	return b
}
