package auth_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tickfence/tickfence/auth"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
)

// TestNodeIsNoConfusedDeputy: a requester sends a command to d1's owner naming, as its reply
// subject, a key or stream subject it may not write itself (the cluster record, the
// coordinator's lease, an operator's drain, another player's record, an effect, an audit entry).
// Nothing the owner answers may land there: every key keeps its revision and value, and no
// stream receives a message. A gateway's command crosses from the players' account, and the
// server rewrites its reply subject (the answer goes back to the players' account, where none of
// those exists); an operator's stays in the trusted account, where the node itself must drop it.
func TestNodeIsNoConfusedDeputy(t *testing.T) {
	for _, who := range []string{"gateway", "operator"} {
		t.Run(who, func(t *testing.T) { testDeputy(t, who) })
	}
}

func testDeputy(t *testing.T, who string) {
	e := newEnv(t)
	gwc, _ := e.connect(t, who)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	data := store.DataBucket(1, 0)
	instKey := store.InstanceKey(e.shard, "d1")
	type kvKey struct{ bucket, key string }
	keys := []kvKey{
		{store.ControlBucket, store.ClusterKey},
		{store.ControlBucket, store.LeaderKey},
		{store.ControlBucket, store.DrainKey("n2")},
		{store.ControlBucket, store.NodeKey("n1")},
		{data, instKey},
		{data, store.ShardKey(e.shard)},
	}
	// What each key holds before: revision (0: none).
	before := map[kvKey]uint64{}
	for _, k := range keys {
		v, err := e.kv[k.bucket].Get(ctx, k.key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			t.Fatalf("%s %s: %v", k.bucket, k.key, err)
		default:
			before[k] = v.Revision()
		}
	}
	streams := []string{natscmd.EffectsStream, auth.AuditStream}
	msgs := map[string]uint64{}
	for _, s := range streams {
		if st, err := e.js.Stream(ctx, s); err == nil {
			msgs[s] = st.CachedInfo().State.Msgs
		}
	}
	targets := []string{natscmd.EffectSubject("loot", "d1"), auth.AuditSubject + ".drain"}
	for _, k := range keys {
		targets = append(targets, "$KV."+k.bucket+"."+k.key)
	}
	for i, reply := range targets {
		m := nats.NewMsg(wire.Subject(e.shard, "d1"))
		m.Reply = reply
		m.Header.Set(wire.HeaderRequestID, "deputy-"+string(rune('a'+i)))
		m.Data = mustCanonical(t, map[string]any{"type": "status"})
		if err := gwc.PublishMsg(m); err != nil {
			t.Fatalf("publish with reply %s: %v", reply, err)
		}
	}
	if err := gwc.Flush(); err != nil {
		t.Fatal(err)
	}
	// A command of its own, answered: the owner handled the ones before it (one subscription,
	// in order) and is still serving.
	if r, err := natscmd.NewClient(gwc, shards).SendMap(ctx, "d1", "after", map[string]any{"type": "status"}); err != nil || !r.OK {
		t.Fatalf("a normal command after the attempts: %+v %v", r, err)
	}
	time.Sleep(300 * time.Millisecond) // a reply published late would have landed by now
	for _, k := range keys {
		v, err := e.kv[k.bucket].Get(ctx, k.key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			if before[k] != 0 {
				t.Errorf("%s %s was deleted", k.bucket, k.key)
			}
		case err != nil:
			t.Errorf("%s %s: %v", k.bucket, k.key, err)
		case k.key == store.NodeKey("n1") || k.key == store.LeaderKey:
			// Renewed by their holders meanwhile: what matters is that the value is theirs.
			if v.Operation() != jetstream.KeyValuePut || len(v.Value()) == 0 || v.Value()[0] != '{' {
				t.Errorf("%s %s holds %q (operation %v): not a lease", k.bucket, k.key, v.Value(), v.Operation())
			}
		case k.key == instKey:
			// Checkpoints rewrite it; a reply would be a reply map, not a record.
			if b := v.Value(); len(b) > 0 && looksLikeReply(b) {
				t.Errorf("%s %s holds a reply: %q", k.bucket, k.key, b)
			}
		case v.Revision() != before[k]:
			t.Errorf("%s %s: revision %d, was %d: %q", k.bucket, k.key, v.Revision(), before[k], v.Value())
		}
	}
	if who == "gateway" {
		return // the node never saw those reply subjects
	}
	// Counted, each one; logged once for this sender.
	if n := counter(t, e.reg, "tickfence_command_reply_refused_total"); n != float64(len(targets)) {
		t.Errorf("tickfence_command_reply_refused_total = %v, want %d", n, len(targets))
	}
	if n := strings.Count(e.logs.String(), "its reply subject is not an inbox"); n != 1 {
		t.Errorf("%d log lines about dropped replies, want 1 (once per sender):\n%s", n, e.logs.String())
	} else if !strings.Contains(e.logs.String(), `"reply":"`+targets[0]+`"`) {
		t.Errorf("the log line does not name the reply subject:\n%s", e.logs.String())
	}
	for _, s := range streams {
		st, err := e.js.Stream(ctx, s)
		if err != nil {
			continue
		}
		if n := st.CachedInfo().State.Msgs; n != msgs[s] {
			t.Errorf("stream %s holds %d messages, held %d before", s, n, msgs[s])
		}
	}
}

// counter is the value of an unlabelled counter in reg (0 if it is not there).
func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

func looksLikeReply(b []byte) bool {
	r, err := wire.DecodeReply(b, false)
	return err == nil && (r.OK || r.Error != nil)
}

func mustCanonical(t *testing.T, m map[string]any) []byte {
	t.Helper()
	b, err := wire.Canonical(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDroppedReplyLogIsBounded: within the trusted account nothing says reliably who sent a
// command; an operator sending 2000 commands with a non-inbox reply, each with a different
// made-up Nats-Request-Info, makes the node log one warning (at most one per 10 s), not 2000.
// (From the review of issue 33.)
func TestDroppedReplyLogIsBounded(t *testing.T) {
	e := newEnv(t)
	_, op := e.connect(t, "operator")
	const n = 2000
	for i := range n {
		m := nats.NewMsg(wire.Subject(e.shard, "d1"))
		m.Reply = "$KV.tickfence-control.cluster"
		m.Header.Set(wire.HeaderRequestID, fmt.Sprintf("o-%d", i))
		m.Header.Set("Nats-Request-Info", fmt.Sprintf(`{"acc":"A%d","user":"U"}`, i))
		m.Data = mustCanonical(t, map[string]any{"type": "status"})
		if err := op.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	_ = op.Flush()
	time.Sleep(time.Second)
	if lines := strings.Count(e.logs.String(), "its reply subject is not an inbox"); lines > 2 {
		t.Errorf("one operator connection made the node log %d 'command dropped' warnings for %d commands", lines, n)
	}
	if got := counter(t, e.reg, "tickfence_command_reply_refused_total"); got != n {
		t.Errorf("tickfence_command_reply_refused_total = %v, want %d", got, n)
	}
}
