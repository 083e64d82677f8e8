package shard_test

import (
	"context"
	"testing"
	"time"

	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store/memstore"
)

// Second review: a game whose MarshalState panics poisons its instance (recovered in Tick); a
// graceful shutdown or hand-off must not call it again (the flush did, unrecovered: the process
// died).
func TestPoisonedInstanceIsNotMarshalledAgainOnFlush(t *testing.T) {
	tbombWhere.Store("")
	defer tbombWhere.Store("")
	n, id := withInstance(t, memstore.New(), "tbomb", nodeOpt{})
	tbombWhere.Store("marshal")
	wantCode(t, n.send(id, "a1", map[string]any{"type": "add", "by": 1}), wire.CodeInstanceFailed, "a1, whose tick's MarshalState panicked")
	time.Sleep(100 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("Close panicked (in a real node: the process dies): %v", p)
			}
		}()
		err := n.host.Close(ctx)
		t.Logf("close: %v", err)
	}()
}
