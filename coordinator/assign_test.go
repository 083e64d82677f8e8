package coordinator

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/memstore"
)

func validTerm(rev uint64) *term { return &term{rev: rev, valid: func() bool { return true }} }

func bootstrapped(t *testing.T) *memstore.Store {
	t.Helper()
	st := memstore.New()
	if _, err := st.Bootstrap(context.Background(), store.Cluster{Shards: 4, Partitions: 1, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestAssignToCurrentOwnerIsNoOp is the regression test of a bug the process tests found: a move
// settled twice (its "released" state seen again before the "done" update) rewrote shard.<S> with
// the owner it already had — a token rotation the owner never asked for, which made its next write
// fail as stale owner and stopped the shard.
func TestAssignToCurrentOwnerIsNoOp(t *testing.T) {
	ctx := context.Background()
	st := bootstrapped(t)
	tm := validTerm(7)
	a, rev, err := assign(ctx, st, tm, 1, 0, store.Assignment{}, 0, store.Assignment{Owner: "n2", Session: "s2"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if a.Grant != "7.1" {
		t.Fatalf("grant %q, want 7.1 (<leader lease revision>.<counter>)", a.Grant)
	}
	again, got, err := assign(ctx, st, tm, 1, 0, a, rev, store.Assignment{Owner: "n2", Session: "s2"}, false)
	if err != nil || got != rev || again != a {
		t.Fatalf("assign to the current owner = %+v@%d, %v; want %+v@%d unchanged", again, got, err, a, rev)
	}
	if _, cur, _ := st.Assignment(ctx, 1, 0); cur != rev {
		t.Fatalf("shard.0 moved from revision %d to %d: the owner's token was rotated", rev, cur)
	}
	// A stale view (an older revision) that already names the target: no rewrite either.
	if _, got, err := assign(ctx, st, tm, 1, 0, store.Assignment{Owner: "n1", Session: "s1"}, rev-1,
		store.Assignment{Owner: "n2", Session: "s2"}, false); err != nil || got != rev {
		t.Fatalf("assign with a stale view = %d, %v; want %d", got, err, rev)
	}
	if _, cur, _ := st.Assignment(ctx, 1, 0); cur != rev {
		t.Fatalf("shard.0 rewritten to %d", cur)
	}
	// A regrant (the owner released it in a hand-off) writes a new grant to the same session.
	re, rrev, err := assign(ctx, st, tm, 1, 0, a, rev, store.Assignment{Owner: "n2", Session: "s2"}, true)
	if err != nil || rrev <= rev || re.Grant == a.Grant || !sameSession(re, a) {
		t.Fatalf("regrant = %+v@%d, %v; want n2/s2 with a new grant above revision %d", re, rrev, err, rev)
	}
}

// TestFrozenLeaderRetryDoesNotLandOverABA (model/coord.pml): leader L1 reads shard.0 = A and
// decides to grant it to C, then freezes. The next leader grants A→B→A and the owner rotates its
// token: the key now shows A and A's session again, at another revision. L1 wakes, its write
// conflicts, and the re-read looks like "only rotated" by owner and session — but not by grant: it
// must replan, not write C over the new leader's decision. A conflict that really is a rotation
// (same grant) is still retried.
func TestFrozenLeaderRetryDoesNotLandOverABA(t *testing.T) {
	ctx := context.Background()
	st := bootstrapped(t)
	l1, l2 := validTerm(10), validTerm(20)
	A := store.Assignment{Owner: "A", Session: "a1"}
	read, r, err := assign(ctx, st, l1, 1, 0, store.Assignment{}, 0, A, false)
	if err != nil {
		t.Fatal(err)
	}
	// L1 froze here, holding (read, r). L2 decides twice; the owner rotates.
	b, rb, err := assign(ctx, st, l2, 1, 0, read, r, store.Assignment{Owner: "B", Session: "b1"}, false)
	if err != nil {
		t.Fatal(err)
	}
	back, rback, err := assign(ctx, st, l2, 1, 0, b, rb, A, false)
	if err != nil {
		t.Fatal(err)
	}
	g, err := st.Rotate(ctx, store.Grant{Epoch: 1, Shard: 0, Token: rback, Assignment: back})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = assign(ctx, st, l1, 1, 0, read, r, store.Assignment{Owner: "C", Session: "c1"}, false)
	if !errors.Is(err, errReplan) {
		t.Fatalf("frozen leader's retry: err = %v, want errReplan", err)
	}
	if now, rev, _ := st.LatestAssignment(ctx, 1, 0); now != back || rev != g.Token {
		t.Fatalf("shard.0 = %+v@%d; want the new leader's %+v@%d", now, rev, back, g.Token)
	}

	// Only a rotation since the read: the decision still stands and lands.
	cur, rcur, _ := st.LatestAssignment(ctx, 1, 0)
	if _, err := st.Rotate(ctx, store.Grant{Epoch: 1, Shard: 0, Token: rcur, Assignment: cur}); err != nil {
		t.Fatal(err)
	}
	got, _, err := assign(ctx, st, l2, 1, 0, cur, rcur, store.Assignment{Owner: "C", Session: "c1"}, false)
	if err != nil || got.Owner != "C" || !strings.HasPrefix(got.Grant, "20.") {
		t.Fatalf("retry after a rotation = %+v, %v; want C with a grant of term 20", got, err)
	}
}

// TestAssignChecksTheLeaseBeforeWriting: a leader whose lease cannot be trusted (or whose round's
// time is up) writes nothing.
func TestAssignChecksTheLeaseBeforeWriting(t *testing.T) {
	ctx := context.Background()
	st := bootstrapped(t)
	fenced := &term{rev: 3, valid: func() bool { return false }}
	if _, _, err := assign(ctx, st, fenced, 1, 0, store.Assignment{}, 0, store.Assignment{Owner: "A", Session: "a"}, false); !errors.Is(err, errNotLeader) {
		t.Fatalf("assign without a valid lease: err = %v, want errNotLeader", err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := assign(done, st, validTerm(3), 1, 0, store.Assignment{}, 0, store.Assignment{Owner: "A", Session: "a"}, false); !errors.Is(err, errNotLeader) {
		t.Fatalf("assign after the round's context ended: err = %v, want errNotLeader", err)
	}
	if _, _, err := st.Assignment(ctx, 1, 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("shard.0 written by a leader without a valid lease: %v", err)
	}
}
