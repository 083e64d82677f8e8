package shard_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store/memstore"
)

func recvReply(t *testing.T, ch <-chan []byte, what string) wire.Reply {
	t.Helper()
	select {
	case b := <-ch:
		r, err := wire.DecodeReply(b, false)
		if err != nil {
			t.Fatal(err)
		}
		return r
	case <-time.After(5 * time.Second):
		t.Fatalf("%s never answered", what)
	}
	return wire.Reply{}
}

// A command applied in memory and waiting behind the write in flight is answered internal by
// poison; a graceful shutdown (Close -> flush) then writes the poisoned instance's in-memory
// record anyway, so the command answered internal is stored (and a retransmission elsewhere
// gets "ok" as its first answer).
func TestPoisonedInstanceStoresNothingOfItsWaitingCommands(t *testing.T) {
	mem := memstore.New()
	n, id := withInstance(t, mem, "bomb")
	frozen := n.freeze.arm(id)
	first := n.submit(id, "a1", mustBody(t, map[string]any{"type": "add", "by": 1}))
	<-frozen
	behind := n.submit(id, "a2", mustBody(t, map[string]any{"type": "add", "by": 10}))
	waitFor(t, "a2 applied behind the write in flight", func() bool {
		return testutil.ToFloat64(n.metrics.CommandsPending) == 2 && len(behind) == 0
	})
	time.Sleep(200 * time.Millisecond) // ticks without writes: rec.Tick > lastWrite
	boom := recvReply(t, n.submit(id, "boom", mustBody(t, map[string]any{"type": "boom"})), "boom")
	t.Logf("boom: %+v", boom.Error)
	n.freeze.release()
	r1 := recvReply(t, first, "a1")
	r2 := recvReply(t, behind, "a2")
	t.Logf("a1: ok=%v %+v; a2: ok=%v %+v", r1.OK, r1.Error, r2.OK, r2.Error)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.host.Close(ctx); err != nil {
		t.Logf("close: %v", err)
	}
	rec, s := load(t, mem, id)
	_, stored := rec.FindRequest("a2")
	t.Logf("stored: n=%d tick=%d a2 remembered=%v", s.N, rec.Tick, stored)
	if !r2.OK && r2.Error.Code == wire.CodeInternal && (stored || s.N >= 11) {
		t.Fatalf("a2 was answered internal by poison, yet the flush on Close stored it (n=%d, remembered=%v)", s.N, stored)
	}
}

// Same, for commands of the tick that panicked (applied before the boom, in.collected).
func TestPoisonedInstanceStoresNothingOfItsTick(t *testing.T) {
	mem := memstore.New()
	n, id := withInstance(t, mem, "bomb")
	time.Sleep(100 * time.Millisecond) // idle ticks: rec.Tick > lastWrite
	var chans []<-chan []byte
	ids := []string{"a0", "a1", "a2", "a3", "a4"}
	for _, r := range ids {
		chans = append(chans, n.submit(id, r, mustBody(t, map[string]any{"type": "add", "by": 1})))
	}
	<-n.submit(id, "boom", mustBody(t, map[string]any{"type": "boom"}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = n.host.Close(ctx)
	rec, s := load(t, mem, id)
	for i, ch := range chans {
		r := recvReply(t, ch, ids[i])
		_, stored := rec.FindRequest(ids[i])
		t.Logf("%s: ok=%v %v stored=%v", ids[i], r.OK, r.Error, stored)
		if !r.OK && r.Error.Code == wire.CodeInternal && stored {
			t.Errorf("%s answered internal but stored by the flush (n=%d)", ids[i], s.N)
		}
	}
}

// The "known" answer is the reply in.rec remembers, not the one the acknowledged record holds:
// when in.rec's window forgot a request that in.acked still holds (evicted by the commands
// waiting behind the write in flight) and the request was applied again, a retransmission is
// answered after the panic with the second application's answer, whose effect was never stored.
func TestPoisonAnswersARetransmissionWithTheStoredFirstAnswer(t *testing.T) {
	mem := memstore.New()
	n, id := withInstance(t, mem, "bomb")
	x := map[string]any{"type": "add", "by": 1}
	firstX := n.send(id, "x", x)
	mustOK(t, firstX, "x")
	frozen := n.freeze.arm(id)
	inflight := n.submit(id, "a1", mustBody(t, map[string]any{"type": "add", "by": 1}))
	<-frozen
	var rs []<-chan []byte
	for i := range 130 {
		rs = append(rs, n.submit(id, "r"+string(rune('A'+i/26))+string(rune('a'+i%26)), mustBody(t, map[string]any{"type": "add", "by": 1})))
	}
	waitFor(t, "the 130 applied behind the write in flight", func() bool {
		return testutil.ToFloat64(n.metrics.CommandsPending) == 131
	})
	x2 := n.submit(id, "x", mustBody(t, x)) // outside in.rec's window: applied again
	waitFor(t, "x applied again", func() bool { return testutil.ToFloat64(n.metrics.CommandsPending) == 132 })
	x3 := n.submit(id, "x", mustBody(t, x)) // a duplicate of x2 in in.rec
	waitFor(t, "x3 waiting", func() bool { return testutil.ToFloat64(n.metrics.CommandsPending) == 133 })
	time.Sleep(100 * time.Millisecond)
	<-n.submit(id, "boom", mustBody(t, map[string]any{"type": "boom"}))
	n.freeze.release()
	recvReply(t, inflight, "a1")
	for i, ch := range rs {
		recvReply(t, ch, "r"+string(rune('0'+i%10)))
	}
	r2, r3 := recvReply(t, x2, "x2"), recvReply(t, x3, "x3")
	t.Logf("x first: %v; x2: ok=%v %v %v; x3: ok=%v %v %v", firstX.Result, r2.OK, r2.Result, r2.Error, r3.OK, r3.Result, r3.Error)
	rec, s := load(t, mem, id)
	q, _ := rec.FindRequest("x")
	t.Logf("stored n=%d, stored first answer of x: %x", s.N, q.Result)
	if r3.OK && fmtAny(r3.Result) != fmtAny(firstX.Result) {
		t.Fatalf("retransmission x3 answered ok %v after the panic; its stored first answer is %v", r3.Result, firstX.Result)
	}
}

func fmtAny(v any) string { return fmt.Sprint(v) }
