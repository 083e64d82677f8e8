package coordinator

import (
	"context"
	"testing"

	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/memstore"
)

// TestAssignToCurrentOwnerIsNoOp is the regression test of a bug the process tests found: a move
// settled twice (its "released" state seen again before the "done" update) rewrote shard.<S> with
// the owner it already had — a token rotation the owner never asked for, which made its next write
// fail as stale owner and stopped the shard.
func TestAssignToCurrentOwnerIsNoOp(t *testing.T) {
	ctx := context.Background()
	st := memstore.New()
	if _, err := st.Bootstrap(ctx, store.Cluster{Shards: 4, Partitions: 1, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	a := store.Assignment{Owner: "n2", Session: "s2"}
	rev, err := assign(ctx, st, 1, 0, store.Assignment{}, 0, a)
	if err != nil {
		t.Fatal(err)
	}
	again, err := assign(ctx, st, 1, 0, a, rev, a)
	if err != nil || again != rev {
		t.Fatalf("assign to the current owner = %d, %v; want %d unchanged", again, err, rev)
	}
	if _, cur, _ := st.Assignment(ctx, 1, 0); cur != rev {
		t.Fatalf("shard.0 moved from revision %d to %d: the owner's token was rotated", rev, cur)
	}
	// A stale view (an older revision) that already names the target: no rewrite either.
	if got, err := assign(ctx, st, 1, 0, store.Assignment{Owner: "n1", Session: "s1"}, rev-1, a); err != nil || got != rev {
		t.Fatalf("assign with a stale view = %d, %v; want %d", got, err, rev)
	}
	if _, cur, _ := st.Assignment(ctx, 1, 0); cur != rev {
		t.Fatalf("shard.0 rewritten to %d", cur)
	}
}
