package shard_test

import (
	"context"
	"testing"
	"time"

	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/memstore"
)

// holdList holds the next listing of a shard's instances once armed (the shard stays loading).
type holdList struct {
	store.Store
	gate
}

func (h *holdList) Instances(ctx context.Context, epoch uint64, shard uint32) ([]string, error) {
	h.pass()
	return h.Store.Instances(ctx, epoch, shard)
}

// The key is rewritten with this session's own value while the shard loads: observe drops the
// event (not running) and the high-water mark swallows it. An empty shard never writes, so it
// never learns: the unknown-instance check must adopt the revision it reads (still this
// session's) rather than answer not_owner for ever (found by review).
func TestOwnerThatMissedARewriteOfItsKeyStillDenies(t *testing.T) {
	ctx := context.Background()
	mem := memstore.New()
	hl := &holdList{Store: mem}
	n := newNode(t, hl, "n1", nodeOpt{})
	const s = 4
	a := store.Assignment{Owner: "n1", Session: "n1-s1"}
	tok, err := mem.Assign(ctx, 1, s, a, 0)
	if err != nil {
		t.Fatal(err)
	}
	entered, hold := hl.arm()
	n.host.Apply(store.AssignmentEvent{Shard: s, Revision: tok, Assignment: a})
	<-entered
	g2, err := mem.Rotate(ctx, store.Grant{Epoch: 1, Shard: s, Token: tok, Assignment: a}) // same value, new revision
	if err != nil {
		t.Fatal(err)
	}
	n.host.Apply(store.AssignmentEvent{Shard: s, Revision: g2.Token, Assignment: a})
	close(hold)
	waitFor(t, "running", func() bool { return n.host.Running(s) })
	var codes []string
	for i := 0; i < 20; i++ {
		r := n.send(idIn(s, 51), "g", map[string]any{"type": "get"})
		codes = append(codes, r.Error.Code)
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("20 gets over 2s: %v", codes)
	if codes[len(codes)-1] != wire.CodeUnknownInstance {
		t.Errorf("the owner still answers %s after 2s for an instance that does not exist", codes[len(codes)-1])
	}
}
