package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tickfence/tickfence"
	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/auth"
	"github.com/tickfence/tickfence/internal/natsserver"
)

// Issue 35, labels: tickctl instance create --label sets an instance's labels; tickctl
// instances --label lists only those holding them (an observer may), with a LABELS column and
// the labels in --json.
func TestInstancesFilteredByLabel(t *testing.T) {
	dir := t.TempDir()
	adir := filepath.Join(dir, "auth")
	var out bytes.Buffer
	if err := run([]string{"auth", "init", adir}, &out); err != nil {
		t.Fatal(err)
	}
	srv, err := natsserver.Start(natsserver.Config{DataDir: filepath.Join(dir, "nats"), Listen: "127.0.0.1:0", AuthDir: adir, Logger: &violations{}})
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
	n, err := tickfence.Start(ctx, tickfence.Options{Kinds: []actor.Kind{brittle{}}, NodeID: "n1", NATS: url,
		Creds: auth.CredsFile(adir, "node"), Shards: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	must := func(role string, args ...string) string {
		t.Helper()
		var out bytes.Buffer
		args = append(args, "--nats", url, "--creds", auth.CredsFile(adir, role), "--timeout", "20s")
		if err := run(args, &out); err != nil {
			t.Fatalf("tickctl %q as %s: %v\n%s", args, role, err, out.String())
		}
		return out.String()
	}
	must("operator", "instance", "create", "h1", "--kind", "brittle", "--label", "mode=heroic,size=10")
	must("operator", "instance", "create", "h2", "--kind", "brittle", "--label", "mode=heroic", "--label", "size=25")
	must("operator", "instance", "create", "n1", "--kind", "brittle", "--label", "mode=normal")
	must("operator", "instance", "create", "x1", "--kind", "brittle")

	listed := must("observer", "instances", "--label", "mode=heroic")
	if !strings.Contains(listed, "LABELS") || !strings.Contains(listed, "mode=heroic,size=10") || !strings.Contains(listed, "mode=heroic,size=25") ||
		strings.Contains(listed, "n1 ") || strings.Contains(listed, "x1 ") || !strings.Contains(listed, "2 instances") {
		t.Fatalf("instances --label mode=heroic:\n%s", listed)
	}
	t.Logf("tickctl instances --label mode=heroic:\n%s", listed)
	var rows []instRow
	if err := json.Unmarshal([]byte(must("observer", "instances", "--label", "mode=heroic,size=25", "--json")), &rows); err != nil ||
		len(rows) != 1 || rows[0].ID != "h2" || rows[0].Labels["size"] != "25" {
		t.Fatalf("instances --label mode=heroic,size=25 --json: %v %+v", err, rows)
	}
	if got := must("observer", "instances", "--label", "mode=*"); !strings.Contains(got, "3 instances") {
		t.Fatalf("instances --label mode=*:\n%s", got)
	}
	if got := must("observer", "instances"); !strings.Contains(got, "4 instances") || !strings.Contains(got, "x1") {
		t.Fatalf("instances:\n%s", got)
	}
	if err := run([]string{"instances", "--label", "bad key=x", "--nats", url}, &out); err == nil {
		t.Fatal("--label with a bad key accepted")
	}
}
