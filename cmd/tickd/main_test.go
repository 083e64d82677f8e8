package main_test

import (
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

	"github.com/tickfence/tickfence/internal/proc"
)

// TestTickdRunsAndRestarts runs the real binary as a newcomer would: it starts, ticks demo
// dungeons, serves metrics, answers tickctl, shuts down cleanly on SIGINT, and a restart on the same
// data directory finds the same dungeons at a later tick.
func TestTickdRunsAndRestarts(t *testing.T) {
	dir := t.TempDir()
	tickd, err := proc.Build(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	tickctl := filepath.Join(dir, "tickctl")
	if out, err := exec.Command("go", "build", "-o", tickctl, "../tickctl").CombinedOutput(); err != nil {
		t.Fatalf("build tickctl: %v\n%s", err, out)
	}
	data := filepath.Join(dir, "data")
	firstTick := runTickd(t, tickd, tickctl, data, 0)
	runTickd(t, tickd, tickctl, data, firstTick)
}

func runTickd(t *testing.T, tickd, tickctl, data string, atLeast uint64) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := proc.Start(tickd, "tickd", nil, "--data", data, "--demo", "10", "--shards", "16",
		"--nats-listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--pprof", "--summary-every", "1s", "--log-json")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	// Two summaries of ten ticking dungeons, and no error logged before them.
	from := 0
	for summaries := 0; summaries < 2; summaries++ {
		i, m, err := p.WaitLog(ctx, from, func(m map[string]any) bool {
			tps, _ := m["ticks_per_s"].(float64)
			return m["level"] == "ERROR" || m["msg"] == "summary" && m["instances"] == float64(10) && tps > 0
		})
		if err != nil {
			t.Fatalf("no summary from tickd: %v", err)
		}
		if m["level"] == "ERROR" {
			t.Fatalf("tickd logged an error: %v", m)
		}
		from = i + 1
	}
	_, started := p.Find(0, proc.Msg("embedded NATS JetStream server started"))
	natsURL, _ := started["listen"].(string)
	metricsURL := p.MetricsURL()
	m, err := p.Scrape(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, sample := range []string{"tickfence_ticks_total", `tickfence_state_writes_total{result="ok"}`, `tickfence_commands_total{result="ok"}`} {
		if _, ok := m[sample]; !ok {
			t.Errorf("metrics lack %s", sample)
		}
	}
	for _, h := range []string{"tickfence_tick_lateness_seconds", "tickfence_tick_duration_seconds", "tickfence_command_seconds"} {
		if len(m.Histogram(h)) == 0 {
			t.Errorf("metrics lack the histogram %s", h)
		}
	}
	for sample, want := range map[string]float64{"tickfence_instances": 10, "tickfence_shards_owned": 16} {
		if got, ok := m[sample]; !ok || got != want {
			t.Errorf("metrics: %s = %v (present %v), want %v", sample, got, ok, want)
		}
	}
	// --pprof: the profiler is on the metrics listener.
	pprofURL := strings.TrimSuffix(metricsURL, "/metrics") + "/debug/pprof/goroutine?debug=1"
	resp, err := http.Get(pprofURL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
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
	if err := p.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Exited():
	case <-ctx.Done():
		t.Fatal("tickd did not exit after SIGINT")
	}
	flushed, _ := p.Find(from, func(m map[string]any) bool { return strings.HasPrefix(fmt.Sprint(m["msg"]), "left the cluster") })
	if err := p.ExitErr(); err != nil || flushed < 0 {
		t.Fatalf("tickd exit: %v, flushed %v", err, flushed >= 0)
	}
	return rec.Tick
}

// TestTickdRefusesBadFlags checks that load and profiling flags out of range are refused at once,
// with a message naming the flag, before anything starts.
func TestTickdRefusesBadFlags(t *testing.T) {
	dir := t.TempDir()
	tickd, err := proc.Build(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
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
