package natscmd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/internal/logkey"
	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/shard"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/natskv"
)

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) lines(t *testing.T) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.b.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not JSON: %q", line)
		}
		out = append(out, m)
	}
	return out
}

// TestTransportRefusalsAreLogged: a command refused by the transport before it reaches its shard
// — busy while the node sheds load, a malformed body — is logged with the keys of package logkey
// (no token: no shard decided it; cas_result none).
func TestTransportRefusalsAreLogged(t *testing.T) {
	srv, err := natsserver.Start(natsserver.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatalf("embedded NATS server: %v", err)
	}
	t.Cleanup(srv.Stop)
	nc, err := natskv.Connect("", srv.ConnectOption())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	const shards = 8
	var logs lockedBuf
	var shedding sync.Mutex
	shed := true
	s := natscmd.NewServer(nc, shards, nil)
	s.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s.Shedding = func() bool { shedding.Lock(); defer shedding.Unlock(); return shed }
	id := "logged-1"
	sh := store.ShardOf(id, shards)
	stop, err := s.Serve(sh, func(c shard.Command) { c.Reply(wire.EncodeReply(wire.Reply{OK: true})) })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	send := func(reqID string, body []byte) wire.Reply {
		t.Helper()
		m := nats.NewMsg(wire.Subject(sh, id))
		m.Header.Set(wire.HeaderRequestID, reqID)
		m.Data = body
		resp, err := nc.RequestMsgWithContext(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		r, err := wire.DecodeReply(resp.Data, false)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	body, _ := wire.Canonical(map[string]any{"type": "attack"})
	if r := send("r-busy", body); r.OK || r.Error.Code != wire.CodeBusy {
		t.Fatalf("while shedding: %+v; want busy", r)
	}
	shedding.Lock()
	shed = false
	shedding.Unlock()
	if r := send("r-bad", []byte{0xc1}); r.OK || r.Error.Code != wire.CodeBadRequest { // 0xc1: never valid msgpack
		t.Fatalf("malformed body: %+v; want bad_request", r)
	}
	want := map[string]map[string]any{
		"r-busy": {"level": "DEBUG", logkey.Code: wire.CodeBusy},
		"r-bad":  {"level": "WARN", logkey.Code: wire.CodeBadRequest},
	}
	seen := 0
	for _, m := range logs.lines(t) {
		w, ok := want[m[logkey.RequestID].(string)]
		if !ok || m["msg"] != "command refused" {
			continue
		}
		seen++
		for k, v := range w {
			if m[k] != v {
				t.Errorf("%s: %s = %v; want %v: %v", m[logkey.RequestID], k, m[k], v, m)
			}
		}
		for k, v := range map[string]any{logkey.Shard: float64(sh), logkey.Instance: id, logkey.CASResult: logkey.CASNone} {
			if m[k] != v {
				t.Errorf("%s: %s = %v; want %v: %v", m[logkey.RequestID], k, m[k], v, m)
			}
		}
		if fp, _ := m[logkey.Fingerprint].(string); len(fp) != 16 {
			t.Errorf("%s: fingerprint %q; want 16 hex digits", m[logkey.RequestID], fp)
		}
	}
	if seen != 2 {
		t.Fatalf("%d refusal lines for r-busy and r-bad; want 2: %v", seen, logs.lines(t))
	}
}
