package coordinator

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tickfence/tickfence/store"
)

// releaseMoves plays the old owners of the fake world: every requested hand-off is released.
func (w *world) releaseMoves(shards uint32) {
	for s := range shards {
		if m, ok := w.move(s); ok && m.State == store.MoveRequested {
			w.release(s)
		}
	}
}

// TestWatcherFollowsTheBuckets: a Watcher's State is ReadState's, and stays so from its watches
// alone as a drain hands every shard from A to B; each hand-off reaches on with the shard's owner
// before it (Prev), once, and the watcher's goroutines end with its context.
func TestWatcherFollowsTheBuckets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		w := newWorld(t, 4)
		w.node("A", false)
		w.start()
		defer w.stop()
		w.settle()
		var mu sync.Mutex
		moved := map[uint32][]string{} // shard → "prev→new" owners seen
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		watcher, err := Watch(wctx, w.st, nil, func(c Change) {
			if c.Shard == nil || c.Shard.Deleted {
				return
			}
			mu.Lock()
			moved[c.Shard.Shard] = append(moved[c.Shard.Shard], c.Prev.Owner.Owner+"→"+c.Shard.Owner)
			mu.Unlock()
		})
		if err != nil {
			t.Fatal(err)
		}
		read, err := ReadState(ctx, w.st)
		if err != nil {
			t.Fatal(err)
		}
		got := watcher.State()
		if len(got.Nodes) != 1 || got.Nodes[0].ID != "A" || got.Nodes[0].Owned != 4 || read.Nodes[0].Owned != 4 {
			t.Fatalf("watched %+v, read %+v", got.Nodes, read.Nodes)
		}
		w.node("B", false)
		if err := Drain(ctx, w.st, "A"); err != nil {
			t.Fatal(err)
		}
		for range 20 {
			w.settle()
			w.releaseMoves(4)
		}
		got = watcher.State()
		for s, sh := range got.Shards {
			if sh.Owner.Owner != "B" {
				t.Fatalf("watched shard %d on %q after the drain of A", s, sh.Owner.Owner)
			}
		}
		for _, n := range got.Nodes {
			if n.ID == "A" && (!n.Drained || n.Owned != 0) {
				t.Fatalf("watched A: %+v", n)
			}
		}
		mu.Lock()
		for s := range uint32(4) {
			if h := moved[s]; len(h) != 1 || h[0] != "A→B" {
				t.Errorf("shard %d: changes seen %q, want one A→B", s, h)
			}
		}
		mu.Unlock()
		cancel()
		synctest.Wait() // goroutines of the watcher gone (synctest fails the test otherwise)
	})
}

// TestApplyPlan: an operator's rebalance carries out the plan's moves, at most maxMoves at a time,
// reports each, and refuses a move whose shard left its planned owner meanwhile.
func TestApplyPlan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		w := newWorld(t, 6)
		w.node("A", false)
		w.start()
		defer w.stop()
		w.settle()
		w.node("B", false)
		w.settle()
		s, err := ReadState(ctx, w.st)
		if err != nil {
			t.Fatal(err)
		}
		plan := s.Plan(6, 0.05)
		if len(plan.Moves) != 3 {
			t.Fatalf("plan %+v, want 3 moves from A to B", plan)
		}
		moves := append(plan.Moves, Move{Shard: plan.Moves[0].Shard, From: "C", To: "B"}) // planned from a node it is not on
		var reports []ApplyProgress
		done := make(chan int)
		go func() {
			n, err := ApplyPlan(ctx, w.st, 1, moves, 2, func(p ApplyProgress) { reports = append(reports, p) })
			if err != nil {
				t.Error(err)
			}
			done <- n
		}()
		var n int
		for range 50 {
			time.Sleep(100 * time.Millisecond)
			w.releaseMoves(6)
			select {
			case n = <-done:
			default:
				continue
			}
			break
		}
		if n != 3 {
			t.Fatalf("%d moves done, want 3; reports %+v", n, reports)
		}
		refused := 0
		for _, r := range reports {
			if r.Refused != nil {
				refused++
			}
		}
		if len(reports) != 4 || refused != 1 {
			t.Fatalf("reports %+v, want 3 done and 1 refused", reports)
		}
		after, err := ReadState(ctx, w.st)
		if err != nil {
			t.Fatal(err)
		}
		for _, nv := range after.Nodes {
			if nv.Owned != 3 {
				t.Fatalf("after the plan: %+v", after.Nodes)
			}
		}
	})
}
