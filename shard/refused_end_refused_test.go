package shard_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
)

// refusingEnd definitely refuses (nothing stored) the next End of one instance.
type refusingEnd struct {
	store.Store
	mu     sync.Mutex
	refuse string
}

func (r *refusingEnd) End(ctx context.Context, g store.Grant, id string) (uint64, error) {
	r.mu.Lock()
	take := r.refuse == id
	if take {
		r.refuse = ""
	}
	r.mu.Unlock()
	if take {
		return 0, fmt.Errorf("end %s: %w: insufficient resources", id, store.ErrRefused)
	}
	return r.Store.End(ctx, g, id)
}

// A tombstone's delete marker refused once (nothing stored, token still good) must be retried:
// the instance must not stay "being removed" for good.
func TestRefusedTombstoneDeleteIsRetried(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		st := &refusingEnd{Store: b.open(t)}
		n := newNode(t, st, "A", nodeOpt{checkpointEvery: 1 << 30, tombstoneTTL: 100 * time.Millisecond})
		n.grant(7)
		id := idIn(7, 5)
		st.mu.Lock()
		st.refuse = id
		st.mu.Unlock()
		mustOK(t, n.send(id, "c", map[string]any{"type": "create", "kind": "counter"}), "create")
		mustOK(t, n.send(id, "e", map[string]any{"type": "end"}), "end")
		deadline := time.Now().Add(5 * time.Second)
		for {
			_, _, err := st.Load(context.Background(), 1, 7, id)
			if errors.Is(err, store.ErrNotFound) {
				break
			}
			if time.Now().After(deadline) {
				r := n.send(id, "e", map[string]any{"type": "end"})
				c := n.send(id, "c2", map[string]any{"type": "create", "kind": "counter"})
				t.Fatalf("tombstone never removed after one refused delete marker (load: %v); retransmitted end -> %+v; new create -> %+v", err, r.Error, c.Error)
			}
			time.Sleep(20 * time.Millisecond)
		}
		_ = wire.CodeRetry
	})
}
