package main_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/internal/proc"
)

// TestTickdServerMetrics runs `tickd server --metrics --pprof --flight-trace` as an operator would:
// its /metrics counts the messages a client sent through it, and the bytes it queues for a client
// that stopped reading (what a node past its capacity looks like from the server) show as
// pending, before any slow-consumer cut-off; the profiler answers; a POST writes a flight trace.
func TestTickdServerMetrics(t *testing.T) {
	dir := t.TempDir()
	tickd, err := proc.Build(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	traces := filepath.Join(dir, "traces")
	srv, err := proc.Start(tickd, "server", nil, "server", "--listen", "127.0.0.1:0", "--data", filepath.Join(dir, "nats"),
		"--metrics", "127.0.0.1:0", "--pprof", "--flight-trace", traces, "--log-json")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Kill)
	_, ready, err := srv.WaitLog(ctx, 0, proc.Msg("NATS JetStream server ready"))
	if err != nil {
		t.Fatal(err)
	}
	base := strings.TrimSuffix(srv.MetricsURL(), "/metrics")
	natsURL := fmt.Sprint(ready["url"])

	// A subscriber that stops reading: a raw connection, so no client library drains it.
	stalled, err := net.Dial("tcp", strings.TrimPrefix(natsURL, "nats://"))
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	r := bufio.NewReader(stalled)
	if _, err := r.ReadString('\n'); err != nil { // INFO
		t.Fatal(err)
	}
	fmt.Fprintf(stalled, "CONNECT {\"verbose\":false,\"pedantic\":false}\r\nSUB stall 1\r\nPING\r\n")
	if line, err := r.ReadString('\n'); err != nil || line != "PONG\r\n" {
		t.Fatalf("stalled subscriber: %q %v", line, err)
	}

	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	const msgs, size = 32, 1 << 20 // 32 MiB: more than loopback's socket buffers, less than the 64 MiB slow-consumer limit
	payload := make([]byte, size)
	for range msgs {
		if err := nc.Publish("stall", payload); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.FlushTimeout(10 * time.Second); err != nil {
		t.Fatal(err)
	}

	var got proc.Metrics
	for {
		if got, err = srv.Scrape(ctx); err != nil {
			t.Fatal(err)
		}
		if got["tickfence_nats_pending_bytes_max"] >= 8<<20 || ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for name, want := range map[string]float64{
		"tickfence_nats_in_msgs_total":     msgs,
		"tickfence_nats_in_bytes_total":    msgs * size,
		"tickfence_nats_connections":       2,
		"tickfence_nats_pending_bytes_max": 8 << 20, // the rest may sit in the kernel's socket buffers
		"tickfence_nats_pending_bytes":     8 << 20,
		"go_goroutines":                    1,
	} {
		if got[name] < want {
			t.Errorf("%s = %v, want at least %v", name, got[name], want)
		}
	}
	if _, ok := got["tickfence_nats_slow_consumers_total"]; !ok || got["tickfence_nats_slow_consumers_total"] != 0 {
		t.Errorf("tickfence_nats_slow_consumers_total = %v (present %v), want 0", got["tickfence_nats_slow_consumers_total"], ok)
	}
	if _, ok := got["tickfence_nats_jetstream_storage_bytes"]; !ok {
		t.Error("no tickfence_nats_jetstream_storage_bytes")
	}

	resp, err := http.Get(base + "/debug/pprof/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "server") {
		t.Errorf("pprof cmdline: %d %q", resp.StatusCode, b)
	}
	resp, err = http.Post(base+"/debug/flight-trace", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	path := strings.TrimSpace(string(b))
	if resp.StatusCode != http.StatusOK || filepath.Dir(path) != traces || !strings.HasPrefix(filepath.Base(path), "tickd-server-") {
		t.Fatalf("POST flight-trace: %d %q; want a tickd-server-… file in %s", resp.StatusCode, b, traces)
	}
	if tr, err := os.ReadFile(path); err != nil || !strings.HasPrefix(string(tr), "go 1.") {
		t.Fatalf("%s is not a trace: %v", path, err)
	}
}
