package shard_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tickfence/tickfence/shard"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
)

// submitScreened submits a command the transport let in at the door (Command.Screened):
// admission control does not refuse it again, so a test can send while a share is refused.
func (n *node) submitScreened(id, reqID string, cmd map[string]any) <-chan []byte {
	n.t.Helper()
	req, err := wire.DecodeRequest(wire.Subject(store.ShardOf(id, testShards), id), reqID, "", mustBody(n.t, cmd), testShards)
	if err != nil {
		n.t.Fatalf("bad test command: %v", err)
	}
	ch := make(chan []byte, 1)
	n.host.Submit(shard.Command{Request: req, Received: time.Now(), Screened: true, Reply: func(b []byte) { ch <- b }})
	return ch
}

// shedNow creates id and makes n's admission control refuse a share of commands: with a target
// of 1 ns every answer is slow, and a command arriving after the interval ends it.
func shedNow(t *testing.T, n *node, id string) {
	t.Helper()
	n.grant(1)
	mustOK(t, n.send(id, "c", map[string]any{"type": "create", "kind": "bomb"}), "create")
	time.Sleep(150 * time.Millisecond)
	warm := n.submit(id, "warm", mustBody(t, map[string]any{"type": "add", "by": 0}))
	<-warm // busy, or ok once written
	waitFor(t, "admission control refuses a share", func() bool { return testutil.ToFloat64(n.metrics.Shedding) == 1 })
}

func answerOf(t *testing.T, ch <-chan []byte, what string) wire.Reply {
	t.Helper()
	select {
	case b := <-ch:
		r, err := wire.DecodeReply(b, false)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return r
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: no answer", what)
	}
	return wire.Reply{}
}

// While admission control refuses a share of commands, an instance holds the write of the
// commands it applied for Config.WriteHold ticks, so that the commands of the next ticks share it:
// two commands three ticks apart cost one write, and both are stored. Without the hold, two.
func TestWritesAreHeldWhileShedding(t *testing.T) {
	for _, c := range []struct {
		hold, writes int
	}{{10, 1}, {-1, 2}} {
		st := backends(t)[0].open(t)
		n := newNode(t, st, "A", nodeOpt{maxCmdDelay: time.Nanosecond, writeHold: c.hold})
		id := idIn(1, 0)
		shedNow(t, n, id)
		_, before := load(t, st, id)
		w0 := n.writes("ok")
		first := n.submitScreened(id, "a1", map[string]any{"type": "add", "by": 1})
		time.Sleep(60 * time.Millisecond) // three ticks at 50 Hz
		second := n.submitScreened(id, "a2", map[string]any{"type": "add", "by": 2})
		mustOK(t, answerOf(t, first, "a1"), "a1")
		mustOK(t, answerOf(t, second, "a2"), "a2")
		if got := int(n.writes("ok") - w0); got != c.writes {
			t.Errorf("hold %d: the two commands took %d writes, want %d", c.hold, got, c.writes)
		}
		if _, cs := load(t, st, id); cs.N != before.N+3 {
			t.Errorf("hold %d: stored n = %d, want %d", c.hold, cs.N, before.N+3)
		}
	}
}

// A held write is not lost when the node closes (its flush writes it) nor left unanswered when the
// game's code panics (the held commands are answered internal, nothing of them stored).
func TestHeldWritesAreFlushedOrAnswered(t *testing.T) {
	t.Run("close", func(t *testing.T) {
		st := backends(t)[0].open(t)
		n := newNode(t, st, "A", nodeOpt{maxCmdDelay: time.Nanosecond, writeHold: 1000})
		id := idIn(1, 0)
		shedNow(t, n, id)
		_, before := load(t, st, id)
		held := n.submitScreened(id, "a1", map[string]any{"type": "add", "by": 1})
		time.Sleep(100 * time.Millisecond)
		if len(held) != 0 {
			t.Fatal("answered within 5 of its 1000 ticks of hold")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := n.host.Close(ctx); err != nil {
			t.Fatal(err)
		}
		mustOK(t, answerOf(t, held, "held a1"), "held a1 after close")
		if _, cs := load(t, st, id); cs.N != before.N+1 {
			t.Errorf("stored n = %d after close, want %d", cs.N, before.N+1)
		}
	})
	t.Run("panic", func(t *testing.T) {
		st := backends(t)[0].open(t)
		n := newNode(t, st, "A", nodeOpt{maxCmdDelay: time.Nanosecond, writeHold: 1000})
		id := idIn(1, 0)
		shedNow(t, n, id)
		_, before := load(t, st, id)
		held := n.submitScreened(id, "a1", map[string]any{"type": "add", "by": 1})
		time.Sleep(100 * time.Millisecond)
		wantCode(t, answerOf(t, n.submitScreened(id, "boom", map[string]any{"type": "boom"}), "boom"), wire.CodeInternal, "boom")
		wantCode(t, answerOf(t, held, "held a1"), wire.CodeInternal, "held a1 after a panic")
		if _, cs := load(t, st, id); cs.N != before.N {
			t.Errorf("stored n = %d after the panic, want %d (nothing of the held command)", cs.N, before.N)
		}
	})
}
