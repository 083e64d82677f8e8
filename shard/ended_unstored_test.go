package shard_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store/memstore"
)

// endBehindAWriteInFlight holds a1's write in flight (n.freeze), then applies an end behind it and
// sends x to the ended instance.
func endBehindAWriteInFlight(t *testing.T, n *node, id string) (a1, end, x <-chan []byte) {
	t.Helper()
	frozen := n.freeze.arm(id)
	a1 = n.submit(id, "a1", mustBody(t, map[string]any{"type": "add", "by": 1}))
	<-frozen
	end = n.submit(id, "e1", mustBody(t, map[string]any{"type": "end"}))
	waitFor(t, "end applied behind the write in flight", func() bool { return testutil.ToFloat64(n.metrics.CommandsPending) == 2 })
	x = n.submit(id, "x", mustBody(t, map[string]any{"type": "add", "by": 100}))
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
		time.Sleep(100 * time.Millisecond) // x applied to the ended instance in memory
		c2 := n.submit(id, "c2", mustBody(t, map[string]any{"type": "create", "kind": "bomb"}))
		recvReply(t, n.submit(id, "b", mustBody(t, map[string]any{"type": "boom"})), "boom")
		n.freeze.release()
		t.Logf("a1: %s end: %s c2: %s", decode(t, <-a1), decode(t, <-end), decode(t, <-c2))
		rx := recvReply(t, x, "x")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = n.host.Close(ctx)
		rec, s := load(t, mem, id)
		t.Logf("x: ok=%v %+v; stored: ended=%v n=%d", rx.OK, rx.Error, rec.Ended, s.N)
		if !rx.OK && rx.Error.Code == wire.CodeUnknownInstance && !rec.Ended {
			t.Fatalf("x answered unknown_instance (%s), but the end was never stored", rx.Error.Message)
		}
	})
	t.Run("refused", func(t *testing.T) {
		mem := memstore.New()
		st := &refusing{Store: mem}
		n, id := withInstance(t, st, "counter", nodeOpt{})
		a1, end, x := endBehindAWriteInFlight(t, n, id)
		time.Sleep(100 * time.Millisecond)
		st.arm(id)
		n.freeze.release()
		t.Logf("a1: %s; end: %s", decode(t, <-a1), decode(t, <-end))
		rx := recvReply(t, x, "x")
		time.Sleep(100 * time.Millisecond)
		g := n.send(id, "g", map[string]any{"type": "get"})
		rec, _ := load(t, mem, id)
		t.Logf("x: ok=%v %+v; get: %v %v %+v; stored ended=%v", rx.OK, rx.Error, g.OK, g.Result, g.Error, rec.Ended)
		if !rx.OK && rx.Error.Code == wire.CodeUnknownInstance && !rec.Ended && g.OK {
			t.Fatal("x answered unknown_instance, but the end's write was refused and the instance lives on")
		}
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
	waitFor(t, "r applied behind the write in flight", func() bool { return testutil.ToFloat64(n.metrics.CommandsPending) == 2 })
	other := n.submit(id, "r", mustBody(t, map[string]any{"type": "add", "by": 3}))
	time.Sleep(100 * time.Millisecond)
	st.arm(id)
	n.freeze.release()
	t.Logf("a1: %s; r: %s", decode(t, <-a1), decode(t, <-first))
	ro := recvReply(t, other, "the other command under r")
	rec, _ := load(t, mem, id)
	if _, stored := rec.FindRequest("r"); !ro.OK && ro.Error.Code == wire.CodeRequestIDReused && !stored {
		t.Fatalf("answered %v, but the first command under r was never stored", ro.Error)
	}
	mustOK(t, sendRetrying(n, id, "r", map[string]any{"type": "add", "by": 3}), "the other command under r, sent again")
}
