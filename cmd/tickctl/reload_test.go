package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tickfence/tickfence"
	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/auth"
	"github.com/tickfence/tickfence/internal/natsserver"
)

// brittle is a kind whose "boom" command panics while brittleBroken is set.
type brittle struct{}

var brittleBroken atomic.Bool

type brittleState struct {
	N int `msgpack:"n"`
}

func (brittle) Name() string                                   { return "brittle" }
func (brittle) New(string, actor.Command) (actor.Logic, error) { return &brittleState{}, nil }
func (brittle) Restore(_ string, b []byte) (actor.Logic, error) {
	s := &brittleState{}
	return s, msgpack.Unmarshal(b, s)
}
func (s *brittleState) Tick(uint64) {}
func (s *brittleState) Handle(_ uint64, c actor.Command) (any, error) {
	if c.Type == "boom" && brittleBroken.Load() {
		panic("nil map write in loot table")
	}
	s.N++
	return s.N, nil
}
func (s *brittleState) MarshalState() ([]byte, error) { return msgpack.Marshal(s) }

// Issue 35: an instance whose game code panicked is listed FAILED by tickctl instances (from its
// node's lease report), with why; tickctl instance reload, as an operator, brings it back once
// the game is fixed; an observer may not send a reload.
func TestInstancesShowFailedAndReloadBringsItBack(t *testing.T) {
	dir := t.TempDir()
	adir := filepath.Join(dir, "auth")
	var out bytes.Buffer
	if err := run([]string{"auth", "init", adir}, &out); err != nil {
		t.Fatal(err)
	}
	v := &violations{}
	srv, err := natsserver.Start(natsserver.Config{DataDir: filepath.Join(dir, "nats"), Listen: "127.0.0.1:0", AuthDir: adir, Logger: v})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	url := srv.ClientURL()
	if err := run([]string{"cluster", "init", "--shards", "8", "--nats", url, "--creds", auth.CredsFile(adir, "admin")}, &out); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	brittleBroken.Store(false)
	defer brittleBroken.Store(false)
	n, err := tickfence.Start(ctx, tickfence.Options{Kinds: []actor.Kind{brittle{}}, NodeID: "n1", NATS: url,
		Creds: auth.CredsFile(adir, "node"), Shards: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	tc := func(role string, args ...string) (string, error) {
		t.Helper()
		var out bytes.Buffer
		args = append(args, "--nats", url, "--creds", auth.CredsFile(adir, role), "--timeout", "20s")
		err := run(args, &out)
		return out.String(), err
	}
	must := func(role string, args ...string) string {
		t.Helper()
		out, err := tc(role, args...)
		if err != nil {
			t.Fatalf("tickctl %q as %s: %v\n%s", args, role, err, out)
		}
		return out
	}
	must("operator", "instance", "create", "b1", "--kind", "brittle")
	must("operator", "instance", "send", "b1", `{"type":"hit"}`)
	brittleBroken.Store(true)
	if out, err := tc("operator", "instance", "send", "b1", `{"type":"boom"}`); err == nil || !strings.Contains(err.Error(), "instance_failed") ||
		!strings.Contains(err.Error(), "nil map write in loot table") {
		t.Fatalf("a command whose handling panicked: %v\n%s", err, out)
	}
	if _, err := tc("operator", "instance", "send", "b1", `{"type":"hit"}`); err == nil || !strings.Contains(err.Error(), "instance_failed") {
		t.Fatalf("a command after it: %v, want instance_failed", err)
	}
	// The node reports it in its lease (renewed every third of the lease): tickctl shows it.
	var listed string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		listed = must("observer", "instances")
		if strings.Contains(listed, "FAILED on n1") || time.Now().After(deadline) {
			break
		}
	}
	if !strings.Contains(listed, "FAILED on n1") || !strings.Contains(listed, "(panic)") || !strings.Contains(listed, "nil map write in loot table") ||
		!strings.Contains(listed, "1 failed") {
		t.Fatalf("tickctl instances does not show b1 failed:\n%s", listed)
	}
	t.Logf("tickctl instances:\n%s", listed)
	var rows []instRow
	if err := json.Unmarshal([]byte(must("observer", "instances", "--json")), &rows); err != nil || len(rows) != 1 || rows[0].Failed == nil ||
		rows[0].Failed.Cause != "panic" || rows[0].Failed.Node != "n1" {
		t.Fatalf("instances --json: %v %+v", err, rows)
	}
	v.take()
	if out, err := tc("observer", "instance", "reload", "b1"); err == nil || !strings.Contains(err.Error(), "refused by the NATS server") {
		t.Fatalf("an observer's reload: %v, want refused\n%s", err, out)
	}
	v.take()
	brittleBroken.Store(false) // the game is fixed
	if out := must("operator", "instance", "reload", "b1"); !strings.Contains(out, "instance b1 reloaded") {
		t.Fatalf("reload: %s", out)
	}
	if out := must("operator", "instance", "send", "b1", `{"type":"boom"}`); !strings.Contains(out, "ok") || !strings.Contains(out, ": 2") {
		t.Fatalf("boom once fixed: %s, want ok and n = 2 (nothing of the panic kept)", out)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		listed = must("observer", "instances")
		if !strings.Contains(listed, "FAILED") || time.Now().After(deadline) {
			break
		}
	}
	if strings.Contains(listed, "FAILED") || strings.Contains(listed, "failed") {
		t.Fatalf("still listed failed after the reload:\n%s", listed)
	}
	if out := must("operator", "instance", "reload", "b1"); !strings.Contains(out, "had not failed") {
		t.Fatalf("reload of a running instance: %s", out)
	}
	if l := v.take(); len(l) > 0 {
		t.Errorf("permission violations: %q", l)
	}
}
