package main_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestTickdRunsAndRestarts runs the real binary as a newcomer would: it starts, ticks demo
// dungeons, serves metrics, answers tickctl, shuts down cleanly on SIGINT, and a restart on the same
// data directory finds the same dungeons at a later tick.
func TestTickdRunsAndRestarts(t *testing.T) {
	dir := t.TempDir()
	tickd := filepath.Join(dir, "tickd")
	tickctl := filepath.Join(dir, "tickctl")
	for bin, pkg := range map[string]string{tickd: ".", tickctl: "../tickctl"} {
		if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", pkg, err, out)
		}
	}
	data := filepath.Join(dir, "data")
	firstTick := runTickd(t, tickd, tickctl, data, 0)
	runTickd(t, tickd, tickctl, data, firstTick)
}

func runTickd(t *testing.T, tickd, tickctl, data string, atLeast uint64) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, tickd, "--data", data, "--demo", "10", "--shards", "16",
		"--nats-listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--pprof", "--summary-every", "1s", "--log-json")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan map[string]any, 1000)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				lines <- m
			}
		}
	}()
	var natsURL, metricsURL string
	var summaries int
	for summaries < 2 {
		select {
		case m, ok := <-lines:
			if !ok {
				t.Fatal("tickd exited early")
			}
			switch m["msg"] {
			case "embedded NATS JetStream server started":
				natsURL, _ = m["listen"].(string)
			case "metrics":
				metricsURL, _ = m["url"].(string)
			case "summary":
				if m["instances"] == float64(10) && m["ticks_per_s"].(float64) > 0 {
					summaries++
				}
			}
			if m["level"] == "ERROR" {
				t.Fatalf("tickd logged an error: %v", m)
			}
		case <-ctx.Done():
			t.Fatal("no summary from tickd")
		}
	}
	resp, err := http.Get(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, name := range []string{"tickfence_ticks_total", "tickfence_tick_lateness_seconds_bucket", "tickfence_tick_duration_seconds_bucket",
		`tickfence_state_writes_total{result="ok"}`, "tickfence_instances 10", "tickfence_shards_owned 16",
		`tickfence_commands_total{result="ok"}`, "tickfence_command_seconds_bucket"} {
		if !strings.Contains(string(body), name) {
			t.Errorf("metrics lack %s", name)
		}
	}
	// --pprof: the profiler is on the metrics listener.
	pprofURL := strings.TrimSuffix(metricsURL, "/metrics") + "/debug/pprof/goroutine?debug=1"
	resp, err = http.Get(pprofURL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "goroutine profile:") {
		t.Errorf("GET %s: %s, want 200 and a goroutine profile; got %.200q", pprofURL, resp.Status, body)
	}
	out, err := exec.Command(tickctl, "instance", "get", "demo-3", "--json", "--nats", natsURL).Output()
	if err != nil {
		t.Fatalf("tickctl instance get: %v", err)
	}
	var rec struct {
		Tick  uint64         `json:"tick"`
		Kind  string         `json:"kind"`
		State map[string]any `json:"state"`
	}
	if err := json.Unmarshal(out, &rec); err != nil || rec.Kind != "dungeon" || rec.State["hp"] == nil {
		t.Fatalf("tickctl instance get: %s (%v)", out, err)
	}
	if rec.Tick <= atLeast {
		t.Fatalf("demo-3 at tick %d, want past %d (restart lost progress)", rec.Tick, atLeast)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	flushed := false
	for m := range lines {
		flushed = flushed || strings.HasPrefix(fmt.Sprint(m["msg"]), "left the cluster")
	}
	if err := cmd.Wait(); err != nil || !flushed {
		t.Fatalf("tickd exit: %v, flushed %v", err, flushed)
	}
	return rec.Tick
}

// TestTickdRefusesBadFlags checks that load and profiling flags out of range are refused at once,
// with a message naming the flag, before anything starts.
func TestTickdRefusesBadFlags(t *testing.T) {
	dir := t.TempDir()
	tickd := filepath.Join(dir, "tickd")
	if out, err := exec.Command("go", "build", "-o", tickd, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--demo-players", "0"}, "--demo-players must be at least 1"},
		{[]string{"--demo-players", "-3"}, "--demo-players must be at least 1"},
		{[]string{"--demo-rate", "0"}, "--demo-rate must be"},
		{[]string{"--demo-rate", "-1"}, "--demo-rate must be"},
		{[]string{"--demo-rate", "NaN"}, "--demo-rate must be"},
		{[]string{"--demo-rate", "+Inf"}, "--demo-rate must be"},
		{[]string{"--pprof", "--metrics", ""}, "--pprof serves the profiler on the --metrics listener"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		args := append([]string{"--data", filepath.Join(dir, "data"), "--metrics", "127.0.0.1:0"}, tc.args...)
		out, err := exec.CommandContext(ctx, tickd, args...).CombinedOutput()
		timedOut := ctx.Err() != nil
		cancel()
		if err == nil || timedOut || !strings.Contains(string(out), tc.want) {
			t.Errorf("tickd %q: %v, output %q; want a prompt failure saying %q", tc.args, err, out, tc.want)
		}
	}
}
