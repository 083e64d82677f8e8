package shard_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tickfence/tickfence/shard"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
)

func TestDuplicateRequestID(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		st := b.open(t)
		n, id := withInstance(t, st, "counter", nodeOpt{})
		first := n.send(id, "r1", map[string]any{"type": "add", "by": 7})
		mustOK(t, first, "add 7")
		again := n.send(id, "r1", map[string]any{"type": "add", "by": 7})
		if !again.OK || !sameJSON(first.Result, again.Result) {
			t.Fatalf("retransmission answered %+v, want the first answer %+v", again, first)
		}
		wantCode(t, n.send(id, "r1", map[string]any{"type": "add", "by": 9}), wire.CodeRequestIDReused, "same id, other payload")
		_, cs := load(t, st, id)
		if cs.N != 7 {
			t.Fatalf("n = %d, want 7 (one effect)", cs.N)
		}
		// Concurrent copies in one tick: still one effect.
		chans := make([]<-chan []byte, 5)
		for i := range chans {
			chans[i] = n.submit(id, "r2", mustBody(t, map[string]any{"type": "add", "by": 100}))
		}
		for _, ch := range chans {
			r, _ := wire.DecodeReply(<-ch, false)
			mustOK(t, r, "concurrent copy")
		}
		if _, cs := load(t, st, id); cs.N != 107 {
			t.Fatalf("n = %d after 5 copies of +100, want 107", cs.N)
		}
		// A create retransmitted gets its first answer; a new create of an existing one does not.
		mustOK(t, n.send(id, "c", map[string]any{"type": "create", "kind": "counter"}), "create retransmitted")
		wantCode(t, n.send(id, "c2", map[string]any{"type": "create", "kind": "counter"}), wire.CodeExists, "second create")
	})
}

func sameJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// TestCreateNeverOverwritesUnlistedInstance: an instance that exists in the store but that the
// owner's listing missed (a lagging listing) is loaded, never overwritten, by a create.
func TestCreateNeverOverwritesUnlistedInstance(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		st := b.open(t)
		n := newNode(t, st, "A", nodeOpt{})
		g := n.grant(4)
		id := idIn(4, 0)
		// Written behind the running owner's back, so its in-memory listing lacks it.
		if _, err := st.Create(context.Background(), g, id, store.Record{Kind: "counter"}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Write(context.Background(), g, id, store.Record{Kind: "counter", Tick: 3, State: mustBody(t, map[string]any{"n": 42})}); err != nil {
			t.Fatal(err)
		}
		wantCode(t, n.send(id, "c", map[string]any{"type": "create", "kind": "counter"}), wire.CodeExists, "create of unlisted instance")
		r := n.send(id, "g", map[string]any{"type": "get"})
		mustOK(t, r, "get")
		if got := r.Result.(map[string]any)["n"]; got != int8(42) && got != int64(42) && got != uint8(42) {
			t.Fatalf("n = %v (%T), want 42", got, got)
		}
		if _, cs := load(t, st, id); cs.N != 42 {
			t.Fatalf("stored n = %d, want 42", cs.N)
		}
	})
}

// TestOversizedRecordChangesNothing: a command that would make the record exceed its limit is
// undone and answered too_large; the stored state is unchanged (the record only remembers the
// refusal as the command's answer: TestTooLargeIsRememberedAsTheFirstAnswer) and the instance
// keeps working.
func TestOversizedRecordChangesNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		st := b.open(t)
		n := newNode(t, st, "A", nodeOpt{checkpointEvery: 1 << 30})
		n.grant(6)
		id := idIn(6, 0)
		mustOK(t, n.send(id, "c", map[string]any{"type": "create", "kind": "counter"}), "create")
		mustOK(t, n.send(id, "a", map[string]any{"type": "add", "by": 1}), "add")
		_, before := load(t, st, id)
		wantCode(t, n.send(id, "big", map[string]any{"type": "grow", "n": store.MaxBlobBytes}), wire.CodeTooLarge, "grow past the limit")
		after, cs := load(t, st, id)
		if cs.N != before.N || len(cs.Blob) != len(before.Blob) || after.Blob != nil {
			t.Fatalf("the oversized command changed the stored state: n %d → %d, blob %d → %d bytes", before.N, cs.N, len(before.Blob), len(cs.Blob))
		}
		if q, ok := after.FindRequest("big"); !ok || !strings.Contains(string(q.Result), wire.CodeTooLarge) {
			t.Fatalf("the stored record does not remember the refusal as big's answer: %q", q.Result)
		}
		mustOK(t, n.send(id, "a2", map[string]any{"type": "add", "by": 1}), "add after too_large")
		if _, cs := load(t, st, id); cs.N != 2 || len(cs.Blob) != 0 {
			t.Fatalf("n = %d, blob %d bytes; want 2 and no blob", cs.N, len(cs.Blob))
		}
	})
}

func TestEndIsFencedTombstoneThenDeleteAndFlushOnClose(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		st := b.open(t)
		n := newNode(t, st, "A", nodeOpt{checkpointEvery: 1 << 30, tombstoneTTL: 300 * time.Millisecond})
		n.grant(7)
		id, keep := idIn(7, 0), idIn(7, 1)
		mustOK(t, n.send(id, "c", map[string]any{"type": "create", "kind": "counter"}), "create")
		mustOK(t, n.send(keep, "c", map[string]any{"type": "create", "kind": "counter"}), "create")
		mustOK(t, n.send(id, "e", map[string]any{"type": "end"}), "end")
		if rec, _, err := st.Load(context.Background(), 1, 7, id); err != nil || !rec.Ended || !hasRequest(rec, "e") {
			t.Fatalf("load after end: %+v, %v; want a tombstone that remembers the end", rec, err)
		}
		wantCode(t, n.send(id, "x", map[string]any{"type": "get"}), wire.CodeUnknownInstance, "command after end")
		waitFor(t, "the tombstone expires into a fenced delete marker", func() bool {
			_, _, err := st.Load(context.Background(), 1, 7, id)
			return errors.Is(err, store.ErrNotFound)
		})
		wantCode(t, n.send(id, "e", map[string]any{"type": "end"}), wire.CodeUnknownInstance, "end retransmitted after the tombstone expired")
		// Ticks advance only in memory (no checkpoint); Close writes them.
		time.Sleep(200 * time.Millisecond)
		before, _ := load(t, st, keep)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := n.host.Close(ctx); err != nil {
			t.Fatal(err)
		}
		after, _ := load(t, st, keep)
		if after.Tick <= before.Tick {
			t.Fatalf("tick after Close = %d, want above %d", after.Tick, before.Tick)
		}
		if _, _, err := st.Assignment(context.Background(), 1, 7); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("shard still assigned after Close: %v", err)
		}
		// A new owner resumes from the stored tick.
		n2 := newNode(t, st, "B", nodeOpt{})
		n2.grant(7)
		mustOK(t, n2.send(keep, "g", map[string]any{"type": "get"}), "get on new owner")
		if rec, _ := load(t, st, keep); rec.Tick < after.Tick {
			t.Fatalf("new owner's tick %d went back from %d", rec.Tick, after.Tick)
		}
	})
}

// TestBadInputOverNATS sends hostile commands from a raw NATS client: each gets a clear error and
// nothing is written.
func TestBadInputOverNATS(t *testing.T) {
	b := backends(t)[1]
	st := b.open(t)
	n := newNode(t, st, "A", nodeOpt{checkpointEvery: 1 << 30, commands: func(reg prometheus.Registerer) shard.Commands {
		return natscmd.NewServer(b.nc(t), testShards, reg)
	}})
	for s := uint32(0); s < testShards; s++ {
		n.grant(s)
	}
	raw := b.nc(t)
	client := natscmd.NewClient(raw, testShards)
	id := idIn(0, 0)
	if r, err := client.SendMap(context.Background(), id, "c", map[string]any{"type": "create", "kind": "counter"}); err != nil || !r.OK {
		t.Fatalf("create: %+v, %v", r, err)
	}
	js, err := jetstream.New(raw)
	if err != nil {
		t.Fatal(err)
	}
	lastSeq := func() uint64 {
		stream, err := js.Stream(context.Background(), "KV_"+store.DataBucket(1, 0))
		if err != nil {
			t.Fatal(err)
		}
		info, err := stream.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return info.State.LastSeq
	}
	waitFor(t, "writes settle", func() bool { a := lastSeq(); time.Sleep(50 * time.Millisecond); return a == lastSeq() })
	subj := wire.Subject(0, id)
	huge := make([]byte, store.MaxCommandBytes+1)
	cases := []struct {
		name, subject, reqID, ctype string
		body                        []byte
		code                        string
	}{
		{"malformed msgpack", subj, "r1", "", []byte{0xc1, 0x00}, wire.CodeBadRequest},
		{"truncated msgpack", subj, "r2", "", []byte{0x82, 0xa4, 't', 'y'}, wire.CodeBadRequest},
		{"map claiming 4G entries", subj, "r3", "", []byte{0xdf, 0xff, 0xff, 0xff, 0xff}, wire.CodeBadRequest},
		{"not a map", subj, "r4", "", []byte{0x93, 1, 2, 3}, wire.CodeBadRequest},
		{"no type", subj, "r5", "", mustBody(t, map[string]any{"by": 1}), wire.CodeBadRequest},
		{"type not a string", subj, "r6", "", mustBody(t, map[string]any{"type": 7}), wire.CodeBadRequest},
		{"wrong field types", subj, "r7", "", mustBody(t, map[string]any{"type": "add", "by": "lots"}), wire.CodeBadRequest},
		{"malformed JSON", subj, "r8", wire.ContentJSON, []byte(`{"type":`), wire.CodeBadRequest},
		{"oversized command", subj, "r9", "", huge, wire.CodeTooLarge},
		{"no request id", subj, "", "", mustBody(t, map[string]any{"type": "get"}), wire.CodeBadRequest},
		{"request id too long", subj, strings.Repeat("x", 65), "", mustBody(t, map[string]any{"type": "get"}), wire.CodeBadRequest},
		{"instance id with a dot", wire.Subject(0, "a.b"), "r10", "", mustBody(t, map[string]any{"type": "get"}), wire.CodeBadRequest},
		{"instance id of 65 chars", wire.Subject(0, strings.Repeat("a", 65)), "r11", "", mustBody(t, map[string]any{"type": "get"}), wire.CodeBadRequest},
		{"non-ASCII instance id", wire.Subject(0, "héllo"), "r12", "", mustBody(t, map[string]any{"type": "get"}), wire.CodeBadRequest},
		{"instance of another shard", wire.Subject(0, idIn(1, 0)), "r13", "", mustBody(t, map[string]any{"type": "get"}), wire.CodeBadRequest},
		{"unknown instance", wire.Subject(0, idIn(0, 9)), "r14", "", mustBody(t, map[string]any{"type": "get"}), wire.CodeUnknownInstance},
		{"create of unknown kind", wire.Subject(0, idIn(0, 9)), "r15", "", mustBody(t, map[string]any{"type": "create", "kind": "nope"}), wire.CodeBadRequest},
		{"unknown command type", subj, "r16", "", mustBody(t, map[string]any{"type": "fly"}), wire.CodeRejected},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := lastSeq()
			m := nats.NewMsg(tc.subject)
			m.Data = tc.body
			if tc.reqID != "" {
				m.Header.Set(wire.HeaderRequestID, tc.reqID)
			}
			if tc.ctype != "" {
				m.Header.Set(wire.HeaderContent, tc.ctype)
			}
			resp, err := raw.RequestMsg(m, 5*time.Second)
			if err != nil {
				t.Fatalf("request: %v", err)
			}
			r, err := wire.DecodeReply(resp.Data, tc.ctype == wire.ContentJSON)
			if err != nil {
				t.Fatal(err)
			}
			if r.OK || r.Error.Code != tc.code || r.Error.Message == "" {
				t.Fatalf("reply %+v, want error %s with a message", r, tc.code)
			}
			time.Sleep(30 * time.Millisecond) // a write, if one were made, would have landed (ticks are 20 ms)
			if tc.code != wire.CodeRejected {
				if after := lastSeq(); after != before {
					t.Fatalf("stream moved from %d to %d: something was written", before, after)
				}
			}
		})
	}
	// 10 MB is over the server's maximum payload: refused before it reaches anyone.
	big := nats.NewMsg(subj)
	big.Data = make([]byte, 10<<20)
	big.Header.Set(wire.HeaderRequestID, "huge")
	if _, err := raw.RequestMsg(big, 2*time.Second); !errors.Is(err, nats.ErrMaxPayload) {
		t.Errorf("10 MB command: err = %v, want nats.ErrMaxPayload", err)
	}
	// IDs that cannot even form a NATS subject are refused by the client before sending.
	for _, bad := range []string{"", "*", ">", "has space", "a.b"} {
		if _, err := client.SendMap(context.Background(), bad, "r", map[string]any{"type": "get"}); !errors.Is(err, store.ErrInvalidID) {
			t.Errorf("client.Send(%q): err = %v, want ErrInvalidID", bad, err)
		}
	}
	// JSON in, JSON out; and the node kept ticking through all of it.
	m := nats.NewMsg(subj)
	m.Data = []byte(`{"type":"add","by":2}`)
	m.Header.Set(wire.HeaderRequestID, "json-1")
	m.Header.Set(wire.HeaderContent, wire.ContentJSON)
	resp, err := raw.RequestMsg(m, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if string(resp.Data) != `{"ok":true,"result":{"n":2}}` {
		t.Fatalf("JSON reply = %s", resp.Data)
	}
	t0 := n.engine.Ticks()
	time.Sleep(100 * time.Millisecond)
	if n.engine.Ticks() == t0 {
		t.Fatal("node stopped ticking")
	}
}

func hasRequest(rec store.Record, id string) bool {
	_, ok := rec.FindRequest(id)
	return ok
}

// submitSeq submits a command of the compact form (client session) and waits for its answer.
func (n *node) sendSeq(id, client string, seq, ack uint64, cmd map[string]any) wire.Reply {
	n.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if r := n.sendSeqOnce(id, client, seq, ack, cmd); !overloaded(r) || time.Now().After(deadline) {
			return r
		}
	}
}

// overloaded: refused busy by the node's admission control (past its capacity, without effect:
// a loaded test machine), which a client retries; not by the instance's sessions.
func overloaded(r wire.Reply) bool {
	return !r.OK && r.Error != nil && r.Error.Code == wire.CodeBusy && strings.Contains(r.Error.Message, "past its capacity")
}

func (n *node) sendSeqOnce(id, client string, seq, ack uint64, cmd map[string]any) wire.Reply {
	n.t.Helper()
	req, err := wire.DecodeCommand(wire.Subject(store.ShardOf(id, testShards), id),
		wire.Headers{Client: client, Seq: strconv.FormatUint(seq, 10), Ack: strconv.FormatUint(ack, 10)}, mustBody(n.t, cmd), testShards)
	if err != nil {
		n.t.Fatalf("bad test command: %v", err)
	}
	ch := make(chan []byte, 1)
	n.host.Submit(shard.Command{Request: req, Received: time.Now(), Reply: func(b []byte) { ch <- b }})
	select {
	case b := <-ch:
		r, err := wire.DecodeReply(b, false)
		if err != nil {
			n.t.Fatal(err)
		}
		return r
	case <-time.After(10 * time.Second):
		n.t.Fatalf("%s: no answer to %s/%d %v", n.name, client, seq, cmd)
	}
	return wire.Reply{}
}

// The compact form: exactly once per (client, seq), the first answer to a retransmission, a
// reused number with another payload refused, a number at or below the client's ack refused
// without effect — and the record remembers only what is in flight, whatever the command count.
func TestClientSessionsExactlyOnceAndBounded(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		st := b.open(t)
		n := newNode(t, st, "A", nodeOpt{})
		id := idIn(1, 0)
		n.grant(1)
		mustOK(t, n.sendSeq(id, "gw1", 1, 0, map[string]any{"type": "create", "kind": "counter"}), "create")
		first := n.sendSeq(id, "gw1", 2, 1, map[string]any{"type": "add", "by": 7})
		mustOK(t, first, "add 7")
		again := n.sendSeq(id, "gw1", 2, 1, map[string]any{"type": "add", "by": 7})
		if !again.OK || !sameJSON(first.Result, again.Result) {
			t.Fatalf("retransmission answered %+v, want the first answer %+v", again, first)
		}
		wantCode(t, n.sendSeq(id, "gw1", 2, 1, map[string]any{"type": "add", "by": 9}), wire.CodeRequestIDReused, "same seq, other payload")
		// Another client's numbers are its own.
		mustOK(t, n.sendSeq(id, "gw2", 2, 0, map[string]any{"type": "add", "by": 100}), "gw2's seq 2")
		// Commands out of order within the window apply once each.
		mustOK(t, n.sendSeq(id, "gw1", 5, 2, map[string]any{"type": "add", "by": 1}), "seq 5")
		mustOK(t, n.sendSeq(id, "gw1", 4, 2, map[string]any{"type": "add", "by": 1}), "seq 4 after 5")
		mustOK(t, n.sendSeq(id, "gw1", 4, 2, map[string]any{"type": "add", "by": 1}), "seq 4 again")
		// The ack says 2 was answered: a late copy of it is refused and changes nothing.
		wantCode(t, n.sendSeq(id, "gw1", 2, 1, map[string]any{"type": "add", "by": 7}), wire.CodeRequestIDReused, "seq below the ack")
		if _, cs := load(t, st, id); cs.N != 109 {
			t.Fatalf("n = %d, want 109 (each command once)", cs.N)
		}
		// Two hundred more, acknowledged as they go: the record does not grow with them.
		rec0, _ := load(t, st, id)
		size0 := recordSize(t, rec0)
		for seq := uint64(6); seq < 206; seq++ {
			mustOK(t, n.sendSeq(id, "gw1", seq, seq-1, map[string]any{"type": "add", "by": 1}), "add")
		}
		rec, cs := load(t, st, id)
		if cs.N != 309 {
			t.Fatalf("n = %d, want 309", cs.N)
		}
		var gw1 store.ClientSession
		for _, c := range rec.Clients {
			if c.ID == "gw1" {
				gw1 = c
			}
		}
		if gw1.Ack != 204 || len(gw1.Done) != 1 || gw1.Done[0].Seq != 205 {
			t.Fatalf("gw1's session = ack %d, %d answers kept (%+v); want ack 204 and only seq 205", gw1.Ack, len(gw1.Done), gw1.Done)
		}
		if size := recordSize(t, rec); size > size0+64 {
			t.Fatalf("record grew from %d to %d bytes over 200 acknowledged commands", size0, size)
		}
		// Too many unacknowledged: refused until the client acknowledges.
		for seq := uint64(2000); seq < 2000+store.MaxClientInFlight; seq++ {
			mustOK(t, n.sendSeq(id, "gw3", seq, 1999, map[string]any{"type": "add", "by": 0}), "unacked")
		}
		wantCode(t, n.sendSeq(id, "gw3", 3000, 1999, map[string]any{"type": "add", "by": 1}), wire.CodeBadRequest, "past the in-flight bound")
		mustOK(t, n.sendSeq(id, "gw3", 3000, 2999, map[string]any{"type": "add", "by": 1}), "after acknowledging")
	})
}

func recordSize(t *testing.T, rec store.Record) int {
	t.Helper()
	b, err := store.EncodeRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
}

// Admission control on the command path: once every answer of an interval took longer than the
// target, the next command is refused with busy at once and changes nothing; with nothing
// waiting, the door opens again.
func TestBusyWhenAnswersAreSlowerThanTheTarget(t *testing.T) {
	st := backends(t)[0].open(t)
	n := newNode(t, st, "A", nodeOpt{maxCmdDelay: time.Nanosecond}) // every answer is "slow"
	id := idIn(1, 0)
	n.grant(1)
	mustOK(t, n.send(id, "c", map[string]any{"type": "create", "kind": "counter"}), "create")
	time.Sleep(150 * time.Millisecond) // the interval with the slow answer ends
	wantCode(t, n.sendOnce(id, "r1", map[string]any{"type": "add", "by": 5}), wire.CodeBusy, "after a slow interval")
	if _, cs := load(t, st, id); cs.N != 0 {
		t.Fatalf("n = %d after a refused command, want 0", cs.N)
	}
	time.Sleep(150 * time.Millisecond) // an interval with nothing waiting
	mustOK(t, n.send(id, "r1", map[string]any{"type": "add", "by": 5}), "the same request, retried")
	if _, cs := load(t, st, id); cs.N != 5 {
		t.Fatalf("n = %d, want 5", cs.N)
	}
}

// Review finding: a panic in the game's code answers every command of that tick (the one that
// panicked, those after it, those applied before it whose write never happened), so none waits
// forever and admission control does not count them pending for good.
func TestPanicAnswersEveryCommandOfItsTick(t *testing.T) {
	st := backends(t)[0].open(t)
	n, id := withInstance(t, st, "bomb", nodeOpt{})
	var chans []<-chan []byte
	for i := range 5 { // most of them in one tick with the boom
		chans = append(chans, n.submit(id, "a"+strconv.Itoa(i), mustBody(t, map[string]any{"type": "add", "by": 1})))
	}
	chans = append(chans, n.submit(id, "boom", mustBody(t, map[string]any{"type": "boom"})))
	for i := range 5 {
		chans = append(chans, n.submit(id, "b"+strconv.Itoa(i), mustBody(t, map[string]any{"type": "add", "by": 1})))
	}
	for i, ch := range chans {
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("command %d of the tick that panicked was never answered", i)
		}
	}
	waitFor(t, "no command counted pending", func() bool { return testutil.ToFloat64(n.metrics.CommandsPending) == 0 })
}

// Review findings, over the real transport: one Go client sending 100 commands to one instance
// at once gets 100 answers (it holds back past the owner's in-flight bound instead of being
// refused), and a command served by natscmd goes through admission control.
func TestGoClientManyConcurrentCommandsAndAdmissionOverNATS(t *testing.T) {
	b := backends(t)[1]
	st := b.open(t)
	n := newNode(t, st, "A", nodeOpt{commands: func(reg prometheus.Registerer) shard.Commands { return natscmd.NewServer(b.nc(t), testShards, reg) }})
	id := idIn(1, 0)
	n.grant(1)
	c := natscmd.NewClient(b.nc(t), testShards)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if r, err := c.SendMap(ctx, id, "", map[string]any{"type": "create", "kind": "counter"}); err != nil || !r.OK {
		t.Fatalf("create: %v %+v", err, r)
	}
	// A command waiting for its write is counted by admission control.
	frozen := n.freeze.arm(id)
	done := make(chan struct{})
	go func() { defer close(done); _, _ = c.SendMap(ctx, id, "", map[string]any{"type": "add", "by": 1}) }()
	<-frozen
	if p := testutil.ToFloat64(n.metrics.CommandsPending); p != 1 {
		t.Errorf("a command over NATS waiting for its write: commands_pending = %v, want 1", p)
	}
	n.freeze.release()
	<-done
	var mu sync.Mutex
	codes := map[string]int{}
	var wg sync.WaitGroup
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := c.SendMap(ctx, id, "", map[string]any{"type": "add", "by": 1})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				codes["error"]++
			case r.OK:
				codes["ok"]++
			default:
				codes[r.Error.Code]++
			}
		}()
	}
	wg.Wait()
	if codes["ok"] != 100 {
		t.Fatalf("100 concurrent commands of one Go client: %v", codes)
	}
	if _, cs := load(t, st, id); cs.N != 101 {
		t.Fatalf("n = %d, want 101", cs.N)
	}
}

// One Go client shared by many goroutines sending to many instances at once (its sessions'
// bookkeeping is striped over locks): every command applies once, every instance ends with
// exactly its commands, and the acks sent never cover a command still in flight (a stale ack
// would be refused as request_id_reused).
func TestGoClientManyInstancesAtOnceOverNATS(t *testing.T) {
	b := backends(t)[1]
	st := b.open(t)
	n := newNode(t, st, "A", nodeOpt{commands: func(reg prometheus.Registerer) shard.Commands { return natscmd.NewServer(b.nc(t), testShards, reg) }})
	n.grant(1)
	n.grant(2)
	c := natscmd.NewClient(b.nc(t), testShards)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var ids []string
	for i := range 24 {
		id := idIn(uint32(1+i%2), i)
		ids = append(ids, id)
		if r, err := c.SendMap(ctx, id, "", map[string]any{"type": "create", "kind": "counter"}); err != nil || !r.OK {
			t.Fatalf("create %s: %v %+v", id, err, r)
		}
	}
	const per = 40
	var mu sync.Mutex
	codes := map[string]int{}
	var wg sync.WaitGroup
	for i, id := range ids {
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range per / 4 {
					r, err := c.SendMap(ctx, id, "", map[string]any{"type": "add", "by": 1 + i%3})
					mu.Lock()
					switch {
					case err != nil:
						codes["error: "+err.Error()]++
					case r.OK:
						codes["ok"]++
					default:
						codes[r.Error.Code]++
					}
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	if codes["ok"] != len(ids)*per {
		t.Fatalf("%d commands from one client over %d instances: %v", len(ids)*per, len(ids), codes)
	}
	for i, id := range ids {
		if _, cs := load(t, st, id); cs.N != int64(per*(1+i%3)) {
			t.Errorf("%s: n = %d, want %d", id, cs.N, per*(1+i%3))
		}
	}
}

// TestLargeStateGoesThroughABlob: a state over the record's limit is kept in the Object Store
// (uploaded before the fenced write that points at it), and the next owner loads it from there.
func TestLargeStateGoesThroughABlob(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		st := b.open(t)
		a := newNode(t, st, "A", nodeOpt{})
		const s = 5
		a.grant(s)
		id := idIn(s, 4)
		mustOK(t, a.sendRetryingBusy(id, "c", map[string]any{"type": "create", "kind": "counter"}), "create")
		mustOK(t, a.sendRetryingBusy(id, "g", map[string]any{"type": "grow", "n": 1 << 20}), "grow to 1 MiB (4× a record's limit)")
		mustOK(t, a.sendRetryingBusy(id, "a", map[string]any{"type": "add", "by": 3}), "add")
		rec, cs := load(t, st, id)
		if len(cs.Blob) != 1<<20 || cs.N != 3 || rec.Blob == nil {
			t.Fatalf("stored: %d-byte blob field, n = %d, record blob %+v; want 1 MiB, 3, a blob pointer", len(cs.Blob), cs.N, rec.Blob)
		}
		b2 := newNode(t, b.open(t), "B", nodeOpt{})
		b2.grant(s)
		r := b2.sendRetryingBusy(id, "a2", map[string]any{"type": "add", "by": 1})
		mustOK(t, r, "add on the new owner")
		if _, cs := load(t, st, id); cs.N != 4 || len(cs.Blob) != 1<<20 {
			t.Fatalf("after the move: n = %d, %d bytes; want 4 and the 1 MiB state", cs.N, len(cs.Blob))
		}
	})
}

// A panic in a later tick answers the commands that waited for a write behind the one in flight
// (coalesced while it flew): they were applied in memory only, and with the instance out of
// service nothing would ever send their write.
func TestPanicAnswersCommandsWaitingBehindAWriteInFlight(t *testing.T) {
	st := backends(t)[0].open(t)
	n, id := withInstance(t, st, "bomb", nodeOpt{})
	frozen := n.freeze.arm(id)
	first := n.submit(id, "a1", mustBody(t, map[string]any{"type": "add", "by": 1}))
	<-frozen // a1's write is in flight, held
	behind := n.submit(id, "a2", mustBody(t, map[string]any{"type": "add", "by": 1}))
	waitFor(t, "a2 applied and waiting behind the write in flight", func() bool {
		return testutil.ToFloat64(n.metrics.CommandsPending) == 2 && len(behind) == 0
	})
	time.Sleep(200 * time.Millisecond) // a few ticks: a2 is applied, its write pending
	boom := n.submit(id, "boom", mustBody(t, map[string]any{"type": "boom"}))
	select {
	case <-boom:
	case <-time.After(5 * time.Second):
		t.Fatal("the command that panicked was never answered")
	}
	n.freeze.release()
	for name, ch := range map[string]<-chan []byte{"a1 (in flight)": first, "a2 (behind it)": behind} {
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s was never answered after the instance panicked", name)
		}
	}
	waitFor(t, "no command counted pending", func() bool { return testutil.ToFloat64(n.metrics.CommandsPending) == 0 })
}

// Review finding: a retransmission waiting behind a write in flight when the game's code panics
// is no new command. If the stored record already holds its first answer, it gets that answer;
// if its original is the write in flight, it gets retry (never internal, which would tell the
// client the command failed when it was stored).
func TestPanicAnswersRetransmissionsWithTheirFirstAnswerOrRetry(t *testing.T) {
	run := func(t *testing.T, stored bool) (first, dup wire.Reply) {
		st := backends(t)[0].open(t)
		n, id := withInstance(t, st, "bomb", nodeOpt{})
		a0 := map[string]any{"type": "add", "by": 1}
		if stored {
			mustOK(t, n.send(id, "a0", a0), "a0")
		}
		frozen := n.freeze.arm(id)
		inflightID := "a1"
		if !stored {
			inflightID = "a0" // the original of the retransmission is the write in flight
		}
		inflight := n.submit(id, inflightID, mustBody(t, map[string]any{"type": "add", "by": 1}))
		<-frozen
		again := n.submit(id, "a0", mustBody(t, a0))
		waitFor(t, "the retransmission waiting behind the write in flight", func() bool {
			return testutil.ToFloat64(n.metrics.CommandsPending) == 2 && len(again) == 0
		})
		time.Sleep(200 * time.Millisecond)
		<-n.submit(id, "boom", mustBody(t, map[string]any{"type": "boom"}))
		n.freeze.release()
		recv := func(ch <-chan []byte, what string) wire.Reply {
			select {
			case b := <-ch:
				return decodeReply(t, b)
			case <-time.After(5 * time.Second):
				t.Fatalf("%s never answered", what)
			}
			return wire.Reply{}
		}
		return recv(inflight, "the write in flight"), recv(again, "the retransmission")
	}
	t.Run("original stored", func(t *testing.T) {
		_, dup := run(t, true)
		if !dup.OK {
			t.Fatalf("retransmission of a stored command answered %+v after the panic; want its first answer", dup.Error)
		}
	})
	t.Run("original in flight", func(t *testing.T) {
		first, dup := run(t, false)
		if !first.OK {
			t.Fatalf("the write in flight answered %+v", first.Error)
		}
		// At the panic the original was not stored yet: its first answer cannot be given.
		wantCode(t, dup, wire.CodeUnknownOutcome, "the retransmission of the write in flight")
	})
}
