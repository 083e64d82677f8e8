package shard_test

import (
	"context"
	"testing"
	"time"

	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store/memstore"
)

// endBehindAWriteInFlight holds a1's write in flight (n.freeze), then applies an end behind it and
// x to the ended instance: both wait in the write coalesced behind the one in flight.
func endBehindAWriteInFlight(t *testing.T, n *node, id string) (a1, end, x <-chan []byte) {
	t.Helper()
	frozen := n.freeze.arm(id)
	a1 = n.submit(id, "a1", mustBody(t, map[string]any{"type": "add", "by": 1}))
	<-frozen
	end = n.submit(id, "e1", mustBody(t, map[string]any{"type": "end"}))
	x = n.submit(id, "x", mustBody(t, map[string]any{"type": "add", "by": 100}))
	n.ticked(2)
	if len(x) != 0 {
		t.Fatalf("x answered before the end was stored: %s", decode(t, <-x))
	}
	return a1, end, x
}

// Third review: "has ended" (unknown_instance) is a final answer, so it is given only once the
// end is stored. An end waiting behind the write in flight that is then dropped — the game's code
// panics (poison stores nothing), or the store refuses the write (the instance reverts) — leaves
// the instance alive: a command that arrived meanwhile must not have been told it had ended.
func TestHasEndedIsSaidOnlyOnceTheEndIsStored(t *testing.T) {
	t.Run("panic", func(t *testing.T) {
		mem := memstore.New()
		n, id := withInstance(t, mem, "bomb", nodeOpt{})
		a1, end, x := endBehindAWriteInFlight(t, n, id)
		c2 := n.submit(id, "c2", mustBody(t, map[string]any{"type": "create", "kind": "bomb"}))
		wantCode(t, recvReply(t, n.submit(id, "b", mustBody(t, map[string]any{"type": "boom"})), "boom"), wire.CodeInstanceFailed, "boom")
		n.freeze.release()
		mustOK(t, recvReply(t, a1, "a1"), "a1 (in flight)")
		wantCode(t, recvReply(t, end, "end"), wire.CodeInstanceFailed, "the end, dropped by the panic")
		wantCode(t, recvReply(t, c2, "c2"), wire.CodeInstanceFailed, "the create, dropped by the panic")
		wantCode(t, recvReply(t, x, "x"), wire.CodeInstanceFailed, "x, waiting for the end's write")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = n.host.Close(ctx)
		if rec, s := load(t, mem, id); rec.Ended || s.N != 1 {
			t.Fatalf("stored: ended=%v n=%d, want the record of a1 (alive, n=1)", rec.Ended, s.N)
		}
	})
	t.Run("refused", func(t *testing.T) {
		mem := memstore.New()
		st := &refusing{Store: mem}
		n, id := withInstance(t, st, "counter", nodeOpt{})
		a1, end, x := endBehindAWriteInFlight(t, n, id)
		st.arm(id)
		n.freeze.release()
		wantCode(t, recvReply(t, a1, "a1"), wire.CodeRetry, "a1, its write refused")
		wantCode(t, recvReply(t, end, "end"), wire.CodeRetry, "the end, reverted")
		wantCode(t, recvReply(t, x, "x"), wire.CodeRetry, "x, waiting for the end's write")
		mustOK(t, n.send(id, "g", map[string]any{"type": "get"}), "get: the instance lives on")
		if rec, _ := load(t, mem, id); rec.Ended {
			t.Fatal("the end is stored though its write was refused")
		}
	})
	t.Run("moved", func(t *testing.T) {
		// The node loses the shard while x waits: x is never told the instance has ended by a
		// node whose end was never stored (before, deny confirmed only the ownership of the moment).
		mem := memstore.New()
		n, id := withInstance(t, mem, "counter", nodeOpt{})
		a1, end, x := endBehindAWriteInFlight(t, n, id)
		b := newNode(t, mem, "B", nodeOpt{})
		b.grant(1)
		n.freeze.release()
		recvReply(t, a1, "a1")
		recvReply(t, end, "end")
		if rx := recvReply(t, x, "x"); !rx.OK && rx.Error.Code == wire.CodeUnknownInstance {
			t.Fatalf("x told %q by a node that lost the shard before the end was stored", rx.Error.Message)
		}
		mustOK(t, b.send(id, "g", map[string]any{"type": "get"}), "get on the new owner: the instance lives on")
	})
}

// Third review: a flush that writes nothing (a poisoned instance, an idle one) counts no write.
func TestAFlushThatWritesNothingCountsNoWrite(t *testing.T) {
	mem := memstore.New()
	n, id := withInstance(t, mem, "bomb", nodeOpt{})
	recvReply(t, n.submit(id, "b", mustBody(t, map[string]any{"type": "boom"})), "boom")
	before := n.writes("ok")
	_, rev0, err := mem.Load(context.Background(), 1, 1, id)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = n.host.Close(ctx)
	_, rev1, _ := mem.Load(ctx, 1, 1, id)
	if n.writes("ok") != before && rev0 == rev1 {
		t.Fatalf("tickfence_state_writes_total{result=ok} went %v -> %v, the record's revision stayed %d: a write counted that was never made", before, n.writes("ok"), rev0)
	}
}

// Third review, same cause: request_id_reused is final too. A request whose first command waits
// behind the write in flight, and that write is refused (the instance reverts, the first command
// never happened): a different command under that ID must not have been told the ID was used.
func TestRequestIDReusedIsSaidOnlyOnceTheFirstIsStored(t *testing.T) {
	mem := memstore.New()
	st := &refusing{Store: mem}
	n, id := withInstance(t, st, "counter", nodeOpt{})
	frozen := n.freeze.arm(id)
	a1 := n.submit(id, "a1", mustBody(t, map[string]any{"type": "add", "by": 1}))
	<-frozen
	first := n.submit(id, "r", mustBody(t, map[string]any{"type": "add", "by": 2}))
	other := n.submit(id, "r", mustBody(t, map[string]any{"type": "add", "by": 3}))
	n.ticked(2)
	if len(other) != 0 {
		t.Fatalf("the other command under r answered before the first was stored: %s", decode(t, <-other))
	}
	st.arm(id)
	n.freeze.release()
	wantCode(t, recvReply(t, a1, "a1"), wire.CodeRetry, "a1, its write refused")
	wantCode(t, recvReply(t, first, "r"), wire.CodeRetry, "the first command under r, reverted")
	wantCode(t, recvReply(t, other, "the other command under r"), wire.CodeRetry, "the other command under r")
	rec, _ := load(t, mem, id)
	if _, stored := rec.FindRequest("r"); stored {
		t.Fatal("r is stored though its write was refused")
	}
	mustOK(t, sendRetrying(n, id, "r", map[string]any{"type": "add", "by": 3}), "the other command under r, sent again")
}
