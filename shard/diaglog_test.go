package shard_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/actor/dungeon"
	"github.com/tickfence/tickfence/internal/logkey"
	"github.com/tickfence/tickfence/internal/metrics"
	"github.com/tickfence/tickfence/shard"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
)

// lockedBuffer is a log sink the test reads while the host writes to it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// lines decodes the JSON log lines written so far.
func (l *lockedBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(l.b.Bytes()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line is not JSON: %v: %s", err, sc.Text())
		}
		out = append(out, m)
	}
	return out
}

// find returns the first line whose msg is msg and whose attributes include want.
func find(lines []map[string]any, msg string, want map[string]any) map[string]any {
	for _, m := range lines {
		if m["msg"] != msg {
			continue
		}
		ok := true
		for k, v := range want {
			ok = ok && m[k] == v
		}
		if ok {
			return m
		}
	}
	return nil
}

// TestDiagnosticLogKeys (seed S9): a real stale-owner rejection (owner A frozen before a write,
// the shard granted to B meanwhile, A's write rejected by the fence of the JetStream store) and a
// real busy refusal (admission control full) are logged with the token, the current revision of
// shard.<S>, the request ID and fingerprint, and the conditional update's result, under the keys
// of package logkey.
func TestDiagnosticLogKeys(t *testing.T) {
	b := backends(t)[1] // jetstream: the embedded NATS server's fence, not the memory store's
	if b.name != "jetstream" {
		t.Fatalf("backend %q; want jetstream", b.name)
	}
	const s = 6
	id := idIn(s, 7)
	logs := &lockedBuffer{}
	a := diagNode(t, b.open(t), "A", logs)
	ga := a.grant(s)
	mustOK(t, a.send(id, "c1", map[string]any{"type": "create", "kind": "counter"}), "create")
	mustOK(t, a.send(id, "a1", map[string]any{"type": "add", "by": 1}), "add 1")

	frozen := a.freeze.arm(id)
	zombieBody := mustBody(t, map[string]any{"type": "add", "by": 1000})
	zombie := a.submit(id, "a2", zombieBody)
	<-frozen // a2 applied in memory, its write held: the one command admission lets be pending

	busyBody := mustBody(t, map[string]any{"type": "add", "by": 5})
	if r := decodeReply(t, <-a.submit(id, "a3", busyBody)); r.OK || r.Error.Code != wire.CodeBusy ||
		!strings.Contains(r.Error.Message, "node A is past its capacity") {
		t.Fatalf("a3 with one command pending of at most 1: %+v; want busy, saying node A is past its capacity", r)
	}

	bn := newNode(t, b.open(t), "B", nodeOpt{checkpointEvery: 1 << 30})
	gb := bn.grant(s)
	a.freeze.release() // A wakes up and sends its stale write
	select {
	case r := <-zombie:
		if rep := decodeReply(t, r); rep.OK {
			t.Fatalf("the zombie's command was acknowledged: %+v", rep)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the zombie's command was never answered")
	}
	waitFor(t, "A stops shard S", func() bool { return !a.host.Running(s) })
	var lines []map[string]any
	waitFor(t, "the shard-stopped line", func() bool {
		lines = logs.lines(t)
		return find(lines, "shard stopped: its actors no longer tick", nil) != nil
	})

	keys := []string{logkey.Token, logkey.CurrentRevision, logkey.RequestID, logkey.Fingerprint, logkey.CASResult}
	num := func(v uint64) any { return float64(v) } // JSON numbers
	check := func(what string, m map[string]any, want map[string]any) {
		t.Helper()
		if m == nil {
			t.Fatalf("no %s line in the log:\n%s", what, dump(lines))
		}
		for _, k := range keys {
			if _, ok := m[k]; !ok {
				t.Errorf("%s line has no %q: %v", what, k, m)
			}
		}
		for k, v := range want {
			if m[k] != v {
				t.Errorf("%s line: %s = %v (%T); want %v: %v", what, k, m[k], m[k], v, m)
			}
		}
	}
	fpZombie := logkey.FormatFingerprint(wire.Fingerprint(zombieBody))
	check("write rejected", find(lines, "write rejected by the fence", nil), map[string]any{
		logkey.Shard: num(s), logkey.Instance: id, logkey.Token: num(ga.Token), logkey.CurrentRevision: num(gb.Token),
		logkey.RequestID: "a2", logkey.Fingerprint: fpZombie, logkey.CASResult: "stale_owner"})
	check("zombie's command refused", find(lines, "command refused", map[string]any{logkey.RequestID: "a2"}), map[string]any{
		logkey.Shard: num(s), logkey.Instance: id, logkey.Token: num(ga.Token), logkey.CurrentRevision: num(gb.Token),
		logkey.Fingerprint: fpZombie, logkey.CASResult: "stale_owner", logkey.Code: wire.CodeRetry})
	check("busy refusal", find(lines, "command refused", map[string]any{logkey.RequestID: "a3"}), map[string]any{
		logkey.Shard: num(s), logkey.Instance: id, logkey.Token: num(ga.Token), logkey.CurrentRevision: num(ga.Token),
		logkey.Fingerprint: logkey.FormatFingerprint(wire.Fingerprint(busyBody)), logkey.CASResult: logkey.CASNone,
		logkey.Code: wire.CodeBusy})
	stopped := find(lines, "shard stopped: its actors no longer tick", nil)
	for k, v := range map[string]any{"reason": "stale_owner", logkey.Token: num(ga.Token), logkey.CASResult: "stale_owner",
		logkey.Instance: id} {
		if stopped[k] != v {
			t.Errorf("shard stopped line: %s = %v; want %v: %v", k, stopped[k], v, stopped)
		}
	}
	if rev, _ := stopped[logkey.CurrentRevision].(float64); rev < float64(gb.Token) {
		t.Errorf("shard stopped line: %s = %v; want B's token %d or later: %v", logkey.CurrentRevision, stopped[logkey.CurrentRevision], gb.Token, stopped)
	}
}

func dump(lines []map[string]any) string {
	var sb strings.Builder
	for _, m := range lines {
		b, _ := json.Marshal(m)
		sb.Write(b)
		sb.WriteByte('\n')
	}
	return sb.String()
}

// diagNode is a node whose host logs JSON at debug level into logs and admits at most one
// pending command.
func diagNode(t *testing.T, st store.Store, name string, logs *lockedBuffer) *node {
	t.Helper()
	ctx := context.Background()
	if _, err := st.Bootstrap(ctx, store.Cluster{Shards: testShards, Partitions: 1, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	e, err := actor.NewEngine(actor.EngineConfig{Rate: 50, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	kinds, _ := actor.NewKinds(counter{}, dungeon.Kind{})
	n := &node{t: t, name: name, st: st, engine: e, metrics: metrics.For(reg), freeze: &freezer{}}
	n.host, err = shard.New(ctx, shard.Config{Node: name, Session: name + "-s1", Store: st, Kinds: kinds, Engine: e, Registerer: reg,
		CheckpointEvery: 1 << 30, BeforeWrite: n.freeze.before, MaxPendingCommands: 1,
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", name)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.freeze.release()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = n.host.Close(ctx)
		e.Stop()
	})
	return n
}

func decodeReply(t *testing.T, b []byte) wire.Reply {
	t.Helper()
	r, err := wire.DecodeReply(b, false)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
