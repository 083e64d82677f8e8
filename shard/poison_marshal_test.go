package shard_test

import (
	"context"
	"testing"
	"time"

	"github.com/tickfence/tickfence/store/memstore"
)

// A game whose MarshalState panics poisons its instance (recovered in Tick); a graceful
// shutdown or hand-off then calls MarshalState again in takeFinalLocked, unrecovered.
func TestPoisonedInstanceIsNotMarshalledAgainOnFlush(t *testing.T) {
	tbombWhere.Store("")
	defer tbombWhere.Store("")
	n, id := withInstance(t, memstore.New(), "tbomb")
	tbombWhere.Store("marshal")
	r := n.send(id, "a1", map[string]any{"type": "add", "by": 1})
	t.Logf("a1: %+v", r.Error)
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
