package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tickfence/tickfence"
	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/actor/dungeon"
	"github.com/tickfence/tickfence/auth"
	"github.com/tickfence/tickfence/internal/natsserver"
)

// TestConsoleVerb runs the tickctl binary's console against a server enforcing the roles, with
// operator credentials: it prints its URL (--json), serves the state of the cluster, pins a shard
// through the API as its button does, that action is in the audit stream as the operator's via
// the console, and SIGINT ends it with exit status 0.
func TestConsoleVerb(t *testing.T) {
	dir := t.TempDir()
	adir := filepath.Join(dir, "auth")
	var out bytes.Buffer
	if err := run([]string{"auth", "init", adir}, &out); err != nil {
		t.Fatal(err)
	}
	srv, err := natsserver.Start(natsserver.Config{DataDir: filepath.Join(dir, "nats"), Listen: "127.0.0.1:0", AuthDir: adir})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	url := srv.ClientURL()
	if err := run([]string{"cluster", "init", "--shards", "8", "--nats", url, "--creds", auth.CredsFile(adir, "admin")}, &out); err != nil {
		t.Fatal(err) // as admin: nodes make no storage
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n, err := tickfence.Start(ctx, tickfence.Options{Kinds: []actor.Kind{dungeon.Kind{}}, NodeID: "n1", NATS: url,
		Creds: auth.CredsFile(adir, "node"), Shards: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	creds := auth.CredsFile(adir, "operator")
	cmd := exec.Command(tickctlBin(t), "console", "--listen", "127.0.0.1:0", "--json", "--nats", url, "--creds", creds)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("tickctl console printed no URL: %v\n%s", err, stderr.String())
	}
	var printed struct{ URL string }
	if err := json.Unmarshal([]byte(line), &printed); err != nil || !strings.HasPrefix(printed.URL, "http://127.0.0.1:") {
		t.Fatalf("tickctl console --json printed %q (%v)", line, err)
	}

	var state struct {
		Shards uint32
		Grid   []int
		Owners []string
		Nodes  []struct{ ID, State string }
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(printed.URL + "api/state")
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(resp.Body).Decode(&state)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(state.Nodes) == 1 && state.Nodes[0].State == "serving" && !containsInt(state.Grid, -1) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the console's state: %+v", state)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if state.Shards != 8 || len(state.Grid) != 8 || state.Owners[0] != "n1" || state.Nodes[0].ID != "n1" {
		t.Fatalf("the console's state: %+v", state)
	}
	page, err := http.Get(printed.URL)
	if err != nil {
		t.Fatal(err)
	}
	body := new(bytes.Buffer)
	body.ReadFrom(page.Body)
	page.Body.Close()
	if !strings.Contains(body.String(), `<canvas id="grid"`) {
		t.Fatalf("the page: %.200s", body.String())
	}

	req, _ := http.NewRequest("POST", printed.URL+"api/pin", strings.NewReader(`{"shard": 3}`))
	req.Header.Set("X-Tickfence-Console", "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var a struct {
		OK   bool
		Text string
	}
	json.NewDecoder(resp.Body).Decode(&a)
	resp.Body.Close()
	if !a.OK {
		t.Fatalf("pin 3 through the console: %d %+v", resp.StatusCode, a)
	}
	var audit bytes.Buffer
	if err := run([]string{"audit", "--json", "--nats", url, "--creds", creds}, &audit); err != nil {
		t.Fatal(err)
	}
	var entries []auth.AuditEntry
	if err := json.Unmarshal(audit.Bytes(), &entries); err != nil {
		t.Fatal(err)
	}
	u, err := auth.ReadCreds(creds)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range entries {
		found = found || (e.What == "pin 3" && e.Via == "console" && e.Result == "ok" && e.Who == u.Name && e.Role == "operator")
	}
	if !found {
		t.Errorf("no audit entry of the console's pin 3 by %s: %+v", u.Name, entries)
	}

	// With observer credentials the page shows the cluster and the server refuses the buttons;
	// the console goes on.
	obs := exec.Command(tickctlBin(t), "console", "--listen", "127.0.0.1:0", "--json", "--nats", url, "--creds", auth.CredsFile(adir, "observer"))
	obsOut, err := obs.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var obsErr bytes.Buffer
	obs.Stderr = &obsErr
	if err := obs.Start(); err != nil {
		t.Fatal(err)
	}
	defer obs.Process.Kill()
	line, err = bufio.NewReader(obsOut).ReadString('\n')
	if err != nil || json.Unmarshal([]byte(line), &printed) != nil {
		t.Fatalf("observer console: %q %v\n%s", line, err, obsErr.String())
	}
	req, _ = http.NewRequest("POST", printed.URL+"api/drain", strings.NewReader(`{"node": "n1"}`))
	req.Header.Set("X-Tickfence-Console", "1")
	start := time.Now()
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var refused struct {
		OK    bool
		Error string
	}
	json.NewDecoder(resp.Body).Decode(&refused)
	resp.Body.Close()
	if refused.OK || resp.StatusCode != http.StatusForbidden || !strings.Contains(refused.Error, "role observer) may not do this") {
		t.Fatalf("drain with observer credentials: %d %+v", resp.StatusCode, refused)
	}
	t.Logf("drain with observer credentials refused after %v: %d %s", time.Since(start).Round(time.Millisecond), resp.StatusCode, refused.Error)
	if resp, err := http.Get(printed.URL + "api/state"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("the observer's console after a refused drain: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	if err := obs.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := obs.Wait(); err != nil {
		t.Errorf("observer console after SIGINT: %v\n%s", err, obsErr.String())
	}

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("tickctl console after SIGINT: %v\n%s", err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		cmd.Process.Signal(os.Kill)
		t.Fatalf("tickctl console did not end on SIGINT\n%s", stderr.String())
	}
	if !strings.Contains(stderr.String(), "console stopped") {
		t.Errorf("stderr: %s", stderr.String())
	}
}

func containsInt(s []int, x int) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}
