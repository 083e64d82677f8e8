package shard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tickfence/tickfence/shard"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
)

// slowWrites completes every fenced write a while after the store did (a store whose round trip
// is longer than a tick: R3 across zones, a loaded server).
type slowWrites struct {
	store.Store
	d time.Duration
}

func (s slowWrites) WriteAsync(g store.Grant, id string, rec store.Record, done func(uint64, error)) {
	s.Store.WriteAsync(g, id, rec, func(rev uint64, err error) {
		go func() { time.Sleep(s.d); done(rev, err) }()
	})
}

// TestTooLargeIsolationWithSlowWrites (a review of issue 34.1's fix): the offender first in the
// write refused as too large, an innocent command after it, and a store that takes longer than a
// tick to answer. Isolation took the offender alone, then (next tick, its write still out) the
// innocent one into the pending write; the offender's refusal folded the pending write's answers
// back in, both were queued again, and so on for ever: neither was answered. The same order with
// the store as it is, single writes and batches, is TestTooLargeOffenderFirst.
func TestTooLargeIsolationWithSlowWrites(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		offenderFirst(t, slowWrites{b.open(t), 60 * time.Millisecond}, shard.WriteSingle)
	})
}

func TestTooLargeOffenderFirst(t *testing.T) {
	for _, ws := range []shard.WriteStrategy{shard.WriteSingle, shard.WriteBatches} {
		t.Run(string(ws), func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, b backend) { offenderFirst(t, b.open(t), ws) })
		})
	}
}

// offenderFirst: a grow past the limit, then an innocent add, in one write: the grow is refused
// too_large, the add applied.
func offenderFirst(t *testing.T, st store.Store, ws shard.WriteStrategy) {
	n := newNode(t, st, "A", nodeOpt{checkpointEvery: 1 << 30, writeStrategy: ws})
	n.grant(6)
	id := idIn(6, 0)
	mustOK(t, n.send(id, "c", map[string]any{"type": "create", "kind": "counter"}), "create")
	r := inOneWrite(t, n, id, []heldCmd{
		{"big", map[string]any{"type": "grow", "n": store.MaxBlobBytes}},
		{"inn", map[string]any{"type": "add", "by": 10}},
	})
	wantCode(t, r[0], wire.CodeTooLarge, "the grow")
	mustOK(t, r[1], "the innocent add")
}

// failFirstWrite answers the first fenced Write of one instance with an error whose outcome is
// unknown (a lost acknowledgement), without writing: the initial write after a create's placeholder.
type failFirstWrite struct {
	store.Store
	id   string
	done *bool
}

func (s failFirstWrite) Write(ctx context.Context, g store.Grant, id string, rec store.Record) (uint64, error) {
	if id == s.id && !*s.done {
		*s.done = true
		return 0, errors.New("nats: timeout")
	}
	return s.Store.Write(ctx, g, id, rec)
}

// TestCreateNeverRetryOnceItsPlaceholderIsStored (a review of issue 34.5): retry means "this
// attempt certainly had no effect". A create whose placeholder was stored (it holds the create and
// its answer) and whose initial write's outcome is unknown was answered retry; but the create took
// effect: the rebuild loads the placeholder, and the instance exists without any retransmission.
func TestCreateNeverRetryOnceItsPlaceholderIsStored(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		done := false
		id := idIn(6, 0)
		st := failFirstWrite{b.open(t), id, &done}
		n := newNode(t, st, "A", nodeOpt{writeStrategy: shard.WriteSingle})
		n.grant(6)
		r := n.send(id, "c", map[string]any{"type": "create", "kind": "counter"})
		t.Logf("create: ok=%v err=%v", r.OK, r.Error)
		if r.OK {
			t.Fatalf("create answered ok although its initial write failed")
		}
		if r.Error.Code != wire.CodeUnknownOutcome {
			t.Fatalf("create answered %+v: its placeholder is stored, so its outcome is unknown to this attempt (not %s)", r.Error, r.Error.Code)
		}
		// A retransmission learns it: the create stands (the rebuild loads its placeholder).
		mustOK(t, sendRetrying(n, id, "c", map[string]any{"type": "create", "kind": "counter"}), "the create retransmitted")
		mustOK(t, sendRetrying(n, id, "g1", map[string]any{"type": "add", "by": 1}), "an add to it")
	})
}
