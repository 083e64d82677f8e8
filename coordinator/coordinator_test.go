package coordinator_test

import (
	"context"
	"testing"

	"github.com/tickfence/tickfence/coordinator"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/memstore"
)

func TestPlanIsSticky(t *testing.T) {
	me := store.Assignment{Owner: "n1", Session: "s2"}
	old := store.Assignment{Owner: "n1", Session: "s1"} // a previous life of the same node
	current := []coordinator.Owner{{Assignment: me, Revision: 5}, {Assignment: old, Revision: 6}, {}}
	plan := coordinator.Plan(current, []store.Assignment{me})
	if len(plan) != 2 || plan[1] != me || plan[2] != me {
		t.Fatalf("plan = %v; want shards 1 and 2 to the live session, shard 0 untouched", plan)
	}
	if p := coordinator.Plan(current, nil); len(p) != 0 {
		t.Fatalf("plan with no live node = %v, want empty", p)
	}
}

func TestRoundAssignsEveryShardToTheNewSession(t *testing.T) {
	ctx := context.Background()
	st := memstore.New()
	c1, _ := coordinator.New(coordinator.Config{Store: st, Node: "n1", Session: "s1"})
	cl, err := c1.Bootstrap(ctx, store.Cluster{Shards: 16, Partitions: 1, Epoch: 1}, true)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := c1.Round(ctx); err != nil || n != 16 {
		t.Fatalf("first round assigned %d, %v; want 16", n, err)
	}
	if n, _ := c1.Round(ctx); n != 0 {
		t.Fatalf("second round moved %d shards of a healthy cluster", n)
	}
	_, tok1, _ := st.Assignment(ctx, 1, 3)
	// The node restarts: a new session, never the old tokens.
	c2, _ := coordinator.New(coordinator.Config{Store: st, Node: "n1", Session: "s2"})
	if _, err := c2.Bootstrap(ctx, store.Cluster{Shards: 99, Partitions: 1, Epoch: 1}, true); err == nil {
		t.Fatal("Bootstrap accepted a different --shards for an existing cluster")
	}
	if _, err := c2.Bootstrap(ctx, store.Cluster{Shards: 99, Partitions: 1, Epoch: 1}, false); err != nil {
		t.Fatalf("Bootstrap with the default shard count on an existing cluster: %v", err)
	}
	if n, err := c2.Round(ctx); err != nil || n != int(cl.Shards) {
		t.Fatalf("round after restart assigned %d, %v", n, err)
	}
	a, tok2, _ := st.Assignment(ctx, 1, 3)
	if a.Session != "s2" || tok2 <= tok1 {
		t.Fatalf("shard 3 = %+v@%d, want session s2 above token %d", a, tok2, tok1)
	}
}
