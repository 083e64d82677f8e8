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

// Second review: a command applied in memory behind the write in flight, when the game's code
// panics, is answered internal, and a later graceful shutdown (Close, which flushes) stores
// nothing of it: only the write in flight (a1) is stored. (The flush used to write the poisoned
// instance's memory, storing what the client was told failed.)
func TestPoisonedInstanceStoresNothingOfItsWaitingCommands(t *testing.T) {
	mem := memstore.New()
	n, id := withInstance(t, mem, "bomb", nodeOpt{})
	frozen := n.freeze.arm(id)
	first := n.submit(id, "a1", mustBody(t, map[string]any{"type": "add", "by": 1}))
	<-frozen
	behind := n.submit(id, "a2", mustBody(t, map[string]any{"type": "add", "by": 10}))
	waitFor(t, "a2 applied behind the write in flight", func() bool {
		return testutil.ToFloat64(n.metrics.CommandsPending) == 2 && len(behind) == 0
	})
	time.Sleep(200 * time.Millisecond) // ticks without writes: rec.Tick > lastWrite
	wantCode(t, recvReply(t, n.submit(id, "boom", mustBody(t, map[string]any{"type": "boom"})), "boom"), wire.CodeInstanceFailed, "boom")
	n.freeze.release()
	mustOK(t, recvReply(t, first, "a1"), "a1 (in flight)")
	wantCode(t, recvReply(t, behind, "a2"), wire.CodeInstanceFailed, "a2 (behind it)")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.host.Close(ctx); err != nil {
		t.Logf("close: %v", err)
	}
	rec, s := load(t, mem, id)
	_, stored := rec.FindRequest("a2")
	if stored || s.N != 1 {
		t.Fatalf("a2 was answered internal, yet the flush on Close stored it (n=%d, want 1; a2 remembered=%v)", s.N, stored)
	}
}

// Same for the commands of the tick that panicked (applied before the boom): each one's answer
// and what is stored agree — internal and not stored, or ok and stored.
func TestPoisonedInstanceStoresNothingOfItsTick(t *testing.T) {
	mem := memstore.New()
	n, id := withInstance(t, mem, "bomb", nodeOpt{})
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
		if r.OK != stored || !r.OK && r.Error.Code != wire.CodeInstanceFailed {
			t.Errorf("%s answered %+v %v, stored=%v (n=%d)", ids[i], r.Result, r.Error, stored, s.N)
		}
	}
}

// Second review: a retransmission answered on a panic gets its first answer as stored, not as the
// record in memory has it: there the window may have forgotten the request (130 commands behind
// the write in flight pushed it out) and applied it again, an application that is never stored.
func TestPoisonAnswersARetransmissionWithTheStoredFirstAnswer(t *testing.T) {
	mem := memstore.New()
	n, id := withInstance(t, mem, "bomb", nodeOpt{})
	x := map[string]any{"type": "add", "by": 1}
	firstX := n.send(id, "x", x)
	mustOK(t, firstX, "x")
	frozen := n.freeze.arm(id)
	inflight := n.submit(id, "a1", mustBody(t, map[string]any{"type": "add", "by": 1}))
	<-frozen
	var rs []<-chan []byte
	for i := range 130 {
		rs = append(rs, n.submit(id, fmt.Sprintf("r%d", i), mustBody(t, map[string]any{"type": "add", "by": 1})))
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
		recvReply(t, ch, fmt.Sprintf("r%d", i))
	}
	r2, r3 := recvReply(t, x2, "x2"), recvReply(t, x3, "x3")
	t.Logf("x first: %v; x2: ok=%v %v %v; x3: ok=%v %v %v", firstX.Result, r2.OK, r2.Result, r2.Error, r3.OK, r3.Result, r3.Error)
	rec, s := load(t, mem, id)
	q, _ := rec.FindRequest("x")
	t.Logf("stored n=%d, stored first answer of x: %x", s.N, q.Result)
	if !r3.OK || fmt.Sprint(r3.Result) != fmt.Sprint(firstX.Result) {
		t.Fatalf("retransmission x3 answered %v %v after the panic; its stored first answer is %v", r3.Result, r3.Error, firstX.Result)
	}
}
