package shard_test

import (
	"context"
	"testing"
	"time"

	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/memstore"
)

// gateStore holds the next LatestControl (the first read of shardRun.deny) once armed.
type gateStore struct {
	store.Store
	gate
}

func (g *gateStore) LatestControl(ctx context.Context, key string) (store.Entry, error) {
	g.pass()
	return g.Store.LatestControl(ctx, key)
}

// A zombie (n1, key moved to n2 without n1 hearing) looks up X in its stale map: missing (n2
// created it). Before its check reads shard.<S>, the coordinator grants the shard back to n1's
// same session (new Grant value) and n1 adopts that revision (observe -> rebuild, adopt). The
// check must compare the read revision with the grant the map lookup was made under, not the
// adopted one, or it answers unknown_instance for an instance that exists (found by review).
func TestZombieAdoptingARegrantMidCheckDoesNotDeny(t *testing.T) {
	ctx := context.Background()
	mem := memstore.New()
	gs := &gateStore{Store: mem}
	n1 := newNode(t, gs, "n1", nodeOpt{})
	n2 := newNode(t, mem, "n2", nodeOpt{})
	const s = 6
	n1.grant(s)
	n2.grant(s) // n1 never hears of it: a zombie
	id := idIn(s, 41)
	mustOK(t, n2.send(id, "c1", map[string]any{"type": "create", "kind": "counter"}), "create on n2")

	// The coordinator grants the shard back to n1's (same) session: a new grant value.
	_, rev, err := mem.Assignment(ctx, 1, s)
	if err != nil {
		t.Fatal(err)
	}
	back := store.Assignment{Owner: "n1", Session: "n1-s1", Grant: "99.1"}
	tok3, err := mem.Assign(ctx, 1, s, back, rev)
	if err != nil {
		t.Fatal(err)
	}
	n2.host.Apply(store.AssignmentEvent{Shard: s, Revision: tok3, Assignment: back}) // n2 stops

	entered, release := gs.arm()
	ch := n1.submit(id, "g1", mustBody(t, map[string]any{"type": "get"}))
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("deny never started its check")
	}
	// n1 now hears of the revision naming its session: it adopts it and reloads (X included).
	n1.host.Apply(store.AssignmentEvent{Shard: s, Revision: tok3, Assignment: back})
	waitFor(t, "n1 reloaded shard with X", func() bool { return n1.host.Running(s) && n1.host.Instances() == 1 })
	close(release)
	var r wire.Reply
	select {
	case b := <-ch:
		r, _ = wire.DecodeReply(b, false)
	case <-time.After(10 * time.Second):
		t.Fatal("no answer")
	}
	t.Logf("answer to get of %s: %+v", id, r)
	mustOK(t, n1.send(id, "g2", map[string]any{"type": "get"}), "X exists on n1 now")
	if !r.OK && r.Error.Code == wire.CodeUnknownInstance {
		t.Fatalf("n1 answered unknown_instance for %s, which existed (n2 created it) when the command arrived and still does", id)
	}
}
