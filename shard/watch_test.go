package shard_test

import (
	"context"
	"testing"
	"time"

	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/memstore"
)

// Reconcile takes up a shard assigned to this session that does not run here (its grant event
// was missed), under a rotated token; a shard it handed on stays with the coordinator.
func TestReconcileStartsMissedShardsUnderRotatedToken(t *testing.T) {
	ctx := context.Background()
	mem := memstore.New()
	n := newNode(t, mem, "n1", nodeOpt{})
	const s = 4
	a := store.Assignment{Owner: "n1", Session: "n1-s1"}
	tok, err := mem.Assign(ctx, 1, s, a, 0) // the host is never told
	if err != nil {
		t.Fatal(err)
	}
	n.host.Reconcile(ctx)
	waitFor(t, "reconcile starts the shard", func() bool { return n.host.Running(s) })
	if _, rev, _ := mem.Assignment(ctx, 1, s); rev <= tok {
		t.Fatalf("shard key revision after reconcile: got %d, want a rotation past %d", rev, tok)
	}

	// Handed on: the key still names this session until the coordinator grants it elsewhere.
	if err := n.host.HandOff(ctx, s, func(time.Time) error { return nil }); err != nil {
		t.Fatal(err)
	}
	n.host.Reconcile(ctx)
	time.Sleep(50 * time.Millisecond)
	if n.host.Running(s) {
		t.Fatal("reconcile took back a shard this session handed on")
	}
}

// A replayed, older value of shard.<S> (a reopened watch, a lagging replica) changes nothing.
func TestApplyDropsOlderRevisions(t *testing.T) {
	mem := memstore.New()
	n := newNode(t, mem, "n1", nodeOpt{})
	const s = 6
	g := n.grant(s)
	n.host.Apply(store.AssignmentEvent{Shard: s, Revision: g.Token - 1, Assignment: store.Assignment{Owner: "n0", Session: "old"}})
	time.Sleep(20 * time.Millisecond)
	if !n.host.Running(s) {
		t.Fatal("an older revision naming another owner stopped the shard")
	}
}
