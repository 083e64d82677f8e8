package shard_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
)

// refusing is a store that definitely refuses (nothing stored) the next fenced write of one
// instance, as a server out of space or with a lowered message limit does.
type refusing struct {
	store.Store
	mu      sync.Mutex
	refuse  string // the instance whose next write is refused
	refused int
}

func (r *refusing) take(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refuse != id {
		return false
	}
	r.refuse = ""
	r.refused++
	return true
}

func (r *refusing) arm(id string) {
	r.mu.Lock()
	r.refuse = id
	r.mu.Unlock()
}

func (r *refusing) Write(ctx context.Context, g store.Grant, id string, rec store.Record) (uint64, error) {
	if r.take(id) {
		return 0, fmt.Errorf("write %s: %w: insufficient resources", id, store.ErrRefused)
	}
	return r.Store.Write(ctx, g, id, rec)
}

func (r *refusing) WriteAsync(g store.Grant, id string, rec store.Record, done func(uint64, error)) {
	if r.take(id) {
		done(0, fmt.Errorf("write %s: %w: insufficient resources", id, store.ErrRefused))
		return
	}
	r.Store.WriteAsync(g, id, rec, done)
}

// TestDefiniteRefusalUndoesWithoutRotating: a write the store refused outright stored nothing, so
// the owner undoes the commands it carried (answered retry), keeps its token — no rotation, no
// rebuild of the shard — and the client's retransmission applies exactly once.
func TestDefiniteRefusalUndoesWithoutRotating(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		st := &refusing{Store: b.open(t)}
		n := newNode(t, st, "n1", nodeOpt{})
		const s = 6
		g := n.grant(s)
		id := idIn(s, 3)
		mustOK(t, n.send(id, "c1", map[string]any{"type": "create", "kind": "counter"}), "create")
		mustOK(t, n.send(id, "a1", map[string]any{"type": "add", "by": 1}), "add a1")

		st.arm(id)
		r := n.send(id, "a2", map[string]any{"type": "add", "by": 10})
		if r.OK || r.Error.Code != wire.CodeRetry || !strings.Contains(r.Error.Message, "refused") {
			t.Fatalf("add a2 whose write was refused: %+v; want retry saying the store refused it", r)
		}
		// Undone in memory: the next command sees n = 1, not 11.
		if got := n.send(id, "g1", map[string]any{"type": "get"}); !got.OK || fmt.Sprint(got.Result.(map[string]any)["n"]) != "1" {
			t.Fatalf("get after the refusal: %+v; want n = 1", got)
		}
		mustOK(t, sendRetrying(n, id, "a2", map[string]any{"type": "add", "by": 10}), "add a2 retransmitted")
		again := n.send(id, "a2", map[string]any{"type": "add", "by": 10})
		if !again.OK || fmt.Sprint(again.Result.(map[string]any)["n"]) != "11" {
			t.Fatalf("a2 retransmitted once more: %+v; want its first answer n = 11", again)
		}
		if _, cs := load(t, st, id); cs.N != 11 {
			t.Fatalf("stored n = %d, want 11 (a1 and a2 once each)", cs.N)
		}
		if st.refused != 1 {
			t.Fatalf("%d writes refused, want 1", st.refused)
		}
		if _, rev, err := st.Assignment(ctx, 1, s); err != nil || rev != g.Token {
			t.Fatalf("shard key at revision %d (%v) after a definite refusal, want %d: it rotated", rev, err, g.Token)
		}
		if got := n.writes("refused"); got != 1 {
			t.Fatalf("writes counted refused: %v, want 1", got)
		}
	})
}
