package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickfence/tickfence/internal/proc"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/store"
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
	p, err := proc.Start(tickd, "tickd", nil, "--data", data, "--demo", "10", "--shards", "16", "--procs", "3",
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
	if _, rt := p.Find(0, proc.Msg("go runtime")); rt["gomaxprocs"] != float64(3) {
		t.Fatalf("tickd --procs 3 logged %v; want gomaxprocs 3", rt)
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
	// The embedded server's own: the node's connections to it, and the messages through it.
	if m["tickfence_nats_connections"] < 3 || m["tickfence_nats_in_msgs_total"] == 0 {
		t.Errorf("metrics: the embedded server's connections %v and messages in %v; want at least the node's 3 and some",
			m["tickfence_nats_connections"], m["tickfence_nats_in_msgs_total"])
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
		{[]string{"--flight-trace-p99", "10ms"}, "--flight-trace-p99 needs --flight-trace DIR"},
		{[]string{"--flight-trace", dir, "--flight-trace-p99", "-1ms"}, "--flight-trace-p99 must not be negative"},
		{[]string{"--summary-every", "0"}, "--summary-every must be positive"},
		{[]string{"--max-catch-up", "0s"}, "--max-catch-up must be positive"},
		{[]string{"--procs", "-1"}, "--procs must be 0 (twice what Go would choose) or more"},
		{[]string{"--write-strategy", "fast"}, "want auto, single or batches"},
		{[]string{"--partitions", "0"}, "--partitions must be in 1..shards (256), got 0"},
		{[]string{"--shards", "4", "--partitions", "5"}, "--partitions must be in 1..shards (4), got 5"},
		{[]string{"--replicas", "2", "--nats", "nats://127.0.0.1:1"}, "--replicas must be 1, 3 or 5, got 2"},
		{[]string{"--replicas", "3"}, "--replicas 3 needs a JetStream cluster of at least 3 servers, not the embedded server"},
		{[]string{"server", "--cluster", "127.0.0.1:0"}, "--cluster needs --server-name"},
		{[]string{"server", "--routes", "nats-route://127.0.0.1:1"}, "--routes needs --cluster"},
		{[]string{"server", "--pprof"}, "--pprof and --flight-trace are served on the --metrics listener"},
		{[]string{"server", "--flight-trace", dir}, "--pprof and --flight-trace are served on the --metrics listener"},
		{[]string{"server", "--cluster", "127.0.0.1:0", "--server-name", "a", "--routes", "127.0.0.1:1"}, "want nats-route://HOST:PORT"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		args := append([]string{"--data", filepath.Join(dir, "data"), "--metrics", "127.0.0.1:0"}, tc.args...)
		if tc.args[0] == "server" {
			args = append(tc.args[:1:1], append(tc.args[1:], "--data", filepath.Join(dir, "server-data"), "--listen", "127.0.0.1:0")...)
		}
		out, err := exec.CommandContext(ctx, tickd, args...).CombinedOutput()
		timedOut := ctx.Err() != nil
		cancel()
		if err == nil || timedOut || !strings.Contains(string(out), tc.want) {
			t.Errorf("tickd %q: %v, output %q; want a prompt failure saying %q", tc.args, err, out, tc.want)
		}
	}
}

// TestTickdServerCluster runs three `tickd server` processes as one JetStream cluster (--cluster,
// --routes with every server's route URL, --server-name), waits until the cluster places an R3
// stream, and runs a node that creates a tickfence cluster of 3 replicas and 3 partitions on it:
// it serves its demo dungeons; the data buckets, the control bucket and the effects stream have 3
// replicas; the partitions' leaders are three distinct servers; tickctl status shows the shape;
// and a second node asking for --replicas 1 is refused, naming both values.
func TestTickdServerCluster(t *testing.T) {
	dir := t.TempDir()
	tickd, err := proc.Build(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	tickctl := filepath.Join(dir, "tickctl")
	if out, err := exec.Command("go", "build", "-o", tickctl, "../tickctl").CombinedOutput(); err != nil {
		t.Fatalf("build tickctl: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ports := freePorts(t, 6)
	var routes, urls []string
	for i := range 3 {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[3+i]))
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
	}
	var servers []*proc.Proc
	for i := range 3 {
		name := fmt.Sprintf("s%d", i+1)
		p, err := proc.Start(tickd, name, nil, "server", "--server-name", name, "--listen", fmt.Sprintf("127.0.0.1:%d", ports[i]),
			"--cluster", fmt.Sprintf("127.0.0.1:%d", ports[3+i]), "--routes", strings.Join(routes, ","),
			"--data", filepath.Join(dir, name), "--log-json")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Kill)
		servers = append(servers, p)
	}
	for i, p := range servers {
		_, m, err := p.WaitLog(ctx, 0, proc.Msg("NATS JetStream server ready"))
		if err != nil {
			t.Fatal(err)
		}
		if m["name"] != fmt.Sprintf("s%d", i+1) || m["url"] != urls[i] || m["cluster"] != "tickfence" || m["route_url"] != routes[i] {
			t.Fatalf("server %d logged %v; want its name, client URL %s, cluster tickfence, route URL %s", i+1, m, urls[i], routes[i])
		}
	}
	for _, p := range servers { // --log-json: every line is JSON, the NATS server's own (component nats-server) too
		for _, l := range p.Lines(0) {
			if l["level"] == nil || l["time"] == nil {
				t.Fatalf("%s wrote a line that is not a JSON log line: %v", p.Name, l)
			}
		}
	}
	nc, err := nats.Connect(strings.Join(urls, ","))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// Formed: a meta leader that places an R3 stream (a request made before it is elected is
	// never answered, hence the short tries).
	for {
		actx, acancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := js.CreateStream(actx, jetstream.StreamConfig{Name: "probe", Replicas: 3, Storage: jetstream.MemoryStorage})
		acancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the three tickd servers formed no JetStream cluster: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := js.DeleteStream(ctx, "probe"); err != nil {
		t.Fatal(err)
	}

	node, err := proc.Start(tickd, "n1", nil, "--nats", strings.Join(urls, ","), "--node-id", "n1", "--replicas", "3", "--partitions", "3",
		"--shards", "16", "--demo", "10", "--metrics", "127.0.0.1:0", "--summary-every", "1s", "--log-json", "--data", filepath.Join(dir, "n1"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Kill)
	if _, m, err := node.WaitLog(ctx, 0, func(m map[string]any) bool {
		tps, _ := m["ticks_per_s"].(float64)
		return m["level"] == "ERROR" || m["msg"] == "summary" && m["instances"] == float64(10) && tps > 0
	}); err != nil || m["level"] == "ERROR" {
		t.Fatalf("the node on the R3 cluster does not serve its dungeons: %v %v", err, m)
	}
	streamInfo := func(name string) *jetstream.StreamInfo {
		t.Helper()
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		return info
	}
	for _, name := range []string{"KV_" + store.ControlBucket, natscmd.EffectsStream} {
		if r := streamInfo(name).Config.Replicas; r != 3 {
			t.Errorf("%s: %d replicas, want 3", name, r)
		}
	}
	var leaders []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		leaders = leaders[:0]
		for p := range uint32(3) {
			info := streamInfo("KV_" + store.DataBucket(1, p))
			if info.Config.Replicas != 3 || !info.Config.AllowAtomicPublish {
				t.Fatalf("%s: %d replicas, atomic publish %v; want 3, true", info.Config.Name, info.Config.Replicas, info.Config.AllowAtomicPublish)
			}
			leaders = append(leaders, info.Cluster.Leader)
		}
		if sorted := slices.Sorted(slices.Values(leaders)); sorted[0] != "" && len(slices.Compact(sorted)) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("partition leaders %q, want three distinct servers", leaders)
		}
	}

	out, err := exec.CommandContext(ctx, tickctl, "status", "--json", "--nats", strings.Join(urls, ",")).Output()
	if err != nil {
		t.Fatalf("tickctl status --json: %v", err)
	}
	var status struct {
		Cluster    store.Cluster `json:"cluster"`
		Replicas   int           `json:"replicas"`
		Partitions []struct {
			Leader   string `json:"leader"`
			Replicas int    `json:"replicas"`
		} `json:"partitions"`
	}
	if err := json.Unmarshal(out, &status); err != nil || status.Replicas != 3 || status.Cluster.Partitions != 3 ||
		len(status.Partitions) != 3 || status.Partitions[0].Replicas != 3 || status.Partitions[0].Leader == "" {
		t.Fatalf("tickctl status --json: %s (%v); want 3 replicas and 3 partitions with their leaders", out, err)
	}
	table, err := exec.CommandContext(ctx, tickctl, "status", "--nats", strings.Join(urls, ",")).Output()
	if err != nil || !strings.Contains(string(table), "16 shards, 3 partitions, 3 replicas") || !strings.Contains(string(table), "LEADER") {
		t.Fatalf("tickctl status: %v\n%s", err, table)
	}
	t.Logf("tickctl status:\n%s", table)

	// A node that asks for R1 explicitly is refused; its flags name what to do.
	out, err = exec.CommandContext(ctx, tickd, "--nats", strings.Join(urls, ","), "--node-id", "n2", "--replicas", "1",
		"--demo", "0", "--metrics", "127.0.0.1:0", "--data", filepath.Join(dir, "n2")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "the cluster was created with 3 replicas; --replicas 1 cannot change it") {
		t.Fatalf("a node asking an R3 cluster for --replicas 1: %v\n%s", err, out)
	}

	if err := node.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-node.Exited():
	case <-ctx.Done():
		t.Fatal("the node did not exit after SIGINT")
	}
	if err := node.ExitErr(); err != nil {
		t.Fatalf("node exit: %v", err)
	}
	for _, p := range servers {
		if err := p.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		<-p.Exited()
	}
}

func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports
}
