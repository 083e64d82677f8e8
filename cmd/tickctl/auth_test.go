package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tickfence/tickfence"
	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/actor/dungeon"
	"github.com/tickfence/tickfence/auth"
	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/shard/natscmd"
)

// violations collects the permission violations a server logs.
type violations struct {
	mu    sync.Mutex
	lines []string
}

func (v *violations) add(format string, a ...any) {
	s := fmt.Sprintf(format, a...)
	if strings.Contains(s, "Violation") || strings.Contains(s, "uthorization") {
		v.mu.Lock()
		v.lines = append(v.lines, s)
		v.mu.Unlock()
	}
}
func (v *violations) Noticef(f string, a ...any) { v.add(f, a...) }
func (v *violations) Warnf(f string, a ...any)   { v.add(f, a...) }
func (v *violations) Fatalf(f string, a ...any)  { v.add(f, a...) }
func (v *violations) Errorf(f string, a ...any)  { v.add(f, a...) }
func (v *violations) Debugf(f string, a ...any)  {}
func (v *violations) Tracef(f string, a ...any)  {}

func (v *violations) take() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	l := v.lines
	v.lines = nil
	return l
}

// TestRolesWork runs tickctl with each role's credentials against a server enforcing them and a
// node on node.creds (after cluster init as admin, refused to every other role): operator status, move, drain, undrain, pin, weight, instance create/send/get/
// watch; observer status, shards, instances, get; and no permission violation logged by the
// server for any of them.
func TestRolesWork(t *testing.T) {
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
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Nodes make no storage (DESIGN 9): a node before cluster init says what to run, as whom.
	if n, err := tickfence.Start(ctx, tickfence.Options{Kinds: []actor.Kind{dungeon.Kind{}}, NodeID: "n0", NATS: url,
		Creds: auth.CredsFile(adir, "node"), Shards: 8}); err == nil {
		n.Close()
		t.Fatal("a node started before cluster init")
	} else if !strings.Contains(err.Error(), "tickctl --nats "+url+" --creds DIR/admin.creds cluster init --shards 8") {
		t.Errorf("a node before cluster init: %v", err)
	}
	for _, role := range []string{"operator", "observer", "node"} {
		out.Reset()
		if err := run([]string{"cluster", "init", "--nats", url, "--creds", auth.CredsFile(adir, role), "--timeout", "5s"}, &out); err == nil ||
			!strings.Contains(err.Error(), "refused by the NATS server") {
			t.Errorf("cluster init as %s: %v, want refused\n%s", role, err, out.String())
		}
	}
	v.take()
	out.Reset()
	if err := run([]string{"cluster", "init", "--shards", "8", "--nats", url, "--creds", auth.CredsFile(adir, "admin")}, &out); err != nil {
		t.Fatalf("cluster init as admin: %v\n%s", err, out.String())
	}
	for _, want := range []string{"created  control bucket  tickfence-control", "created  cluster record", "created  data bucket     tickfence-data-e1-p0",
		"created  effects stream", "created  audit stream", "8 shards, 1 partitions, 1 replicas, epoch 1 (made)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("cluster init's output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := run([]string{"cluster", "init", "--json", "--nats", url, "--creds", auth.CredsFile(adir, "admin")}, &out); err != nil {
		t.Fatalf("cluster init again: %v\n%s", err, out.String())
	}
	var again struct {
		Changed bool `json:"changed"`
		Cluster struct{ Shards int }
		Steps   []struct{ State string }
	}
	if err := json.Unmarshal(out.Bytes(), &again); err != nil || again.Changed || again.Cluster.Shards != 8 || len(again.Steps) < 6 {
		t.Errorf("cluster init again: %v %+v\n%s", err, again, out.String())
	}
	out.Reset()
	if err := run([]string{"cluster", "init", "--shards", "16", "--nats", url, "--creds", auth.CredsFile(adir, "admin")}, &out); err == nil ||
		!strings.Contains(err.Error(), "--shards 16") {
		t.Errorf("cluster init with another shard count: %v, want refused naming it", err)
	}
	if l := v.take(); len(l) > 0 {
		t.Errorf("cluster init as admin: %q", l)
	}
	startNode := func(id string) *tickfence.Node {
		n, err := tickfence.Start(ctx, tickfence.Options{Kinds: []actor.Kind{dungeon.Kind{FrameEvery: 1}}, NodeID: id, NATS: url,
			Creds: auth.CredsFile(adir, "node"), Shards: 8})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	n1 := startNode("n1")
	defer n1.Close()
	n2 := startNode("n2")
	defer n2.Close()
	if l := v.take(); len(l) > 0 {
		t.Errorf("node start: %q", l)
	}
	tc := func(role string, args ...string) string {
		t.Helper()
		var out bytes.Buffer
		args = append(args, "--nats", url, "--creds", auth.CredsFile(adir, role), "--timeout", "20s")
		if err := run(args, &out); err != nil {
			t.Errorf("tickctl %q as %s: %v\n%s", args, role, err, out.String())
		}
		if l := v.take(); len(l) > 0 {
			t.Errorf("tickctl %q as %s: %q", args, role, l)
		}
		return out.String()
	}
	tc("operator", "status")
	tc("operator", "instance", "create", "d1", "--kind", "dungeon", "--boss-hp", "100")
	tc("operator", "instance", "send", "d1", `{"type":"join","player":"p1"}`)
	tc("operator", "instance", "get", "d1")
	tc("operator", "instance", "watch", "d1", "--count", "2")
	if out := tc("operator", "instance", "watch", "d1", "--count", "1", "--topic", ",hud"); !strings.Contains(out, "tick ") { // the main subject, and a topic the dungeon has not
		t.Errorf("instance watch --topic ,hud printed %q; want a frame of the main subject", out)
	}
	if out := tc("operator", "instance", "watch", "d1", "--count", "1", "--durable"); !strings.Contains(out, "(stored ") { // issue 35.4
		t.Errorf("instance watch --durable printed %q; want a stored frame with its stored tick", out)
	}
	tc("operator", "shards")
	tc("operator", "instances")
	tc("operator", "instance", "reload", "d1") // an operator's request to d1's owner (it runs: nothing to reload)
	tc("operator", "move", "3", "n2")
	tc("operator", "pin", "3")
	tc("operator", "unpin", "3")
	tc("operator", "weight", "n1", "2")
	tc("operator", "drain", "n2")
	tc("operator", "undrain", "n2")
	tc("operator", "rebalance", "--dry-run")
	tc("operator", "backup", filepath.Join(dir, "backup"))
	tc("observer", "status")
	tc("observer", "shards")
	tc("observer", "instances")
	tc("observer", "instance", "get", "d1")
	tc("observer", "nodes")
	tc("observer", "instance", "watch", "d1", "--count", "1")
	tc("operator", "instance", "create", "d2", "--kind", "dungeon", "--boss-hp", "1")
	tc("operator", "instance", "send", "d2", `{"type":"join","player":"p1"}`)
	tc("operator", "instance", "send", "d2", `{"type":"attack","player":"p1"}`) // the boss dies: a loot effect
	tc("admin", "gc")
	tc("admin", "restore", filepath.Join(dir, "backup"), "--yes")
	tc("operator", "status")
	tc("observer", "instance", "get", "d1")
	// Every operator action (and the admin's restore) is in the audit stream, with its user.
	var entries []auditEntry
	if err := json.Unmarshal([]byte(tc("observer", "audit", "--json", "--count", "100")), &entries); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range entries {
		if e.Result != "ok" {
			t.Errorf("audit: %+v", e)
		}
		got[strings.SplitN(e.What, " /", 2)[0]] = e.Who + "/" + e.Role
	}
	for what, who := range map[string]string{"move 3 n2": "operator/operator", "pin 3": "operator/operator", "unpin 3": "operator/operator",
		"weight n1 2": "operator/operator", "drain n2": "operator/operator", "undrain n2": "operator/operator", "restore": "admin/admin",
		"instance reload d1": "operator/operator"} {
		if got[what] != who {
			t.Errorf("audit: %q by %q, want %q (all: %v)", what, got[what], who, got)
		}
	}
	audit := fmt.Sprint(got)
	if strings.Contains(audit, "rebalance") {
		t.Errorf("a dry-run rebalance was recorded:\n%s", audit)
	}

	// A gateway: commands and frames only.
	nc, err := auth.Connect(url, auth.CredsFile(adir, "gateway"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c := natscmd.NewClient(nc, 8)
	if _, err := c.SendMap(ctx, "d1", "g1", map[string]any{"type": "attack", "player": "p1"}); err != nil {
		t.Fatal(err)
	}
	w, err := c.Watch(ctx, "d1")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.C:
	case <-time.After(5 * time.Second):
		t.Error("no frame for the gateway")
	}
	if l := v.take(); len(l) > 0 {
		t.Errorf("gateway: %q", l)
	}
	sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer scancel()
	if err := n2.Stop(sctx); err != nil {
		t.Error(err)
	}
	if err := n1.Stop(sctx); err != nil {
		t.Error(err)
	}
	if l := v.take(); len(l) > 0 {
		t.Errorf("node stop: %q", l)
	}
}
