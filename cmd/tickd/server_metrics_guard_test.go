package main_test

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tickfence/tickfence/internal/proc"
)

// TestTickdServerMetricsOffLoopback runs `tickd server --metrics 0.0.0.0:0 --pprof --flight-trace`
// as an operator would on a machine Prometheus scrapes: /metrics is open, for its own Host names
// and --metrics-allow-host's only; the profiler and the flight recorder's POST need the login
// token it logged once at start (here the operator's own, $TICKFENCE_METRICS_TOKEN, not logged).
func TestTickdServerMetricsOffLoopback(t *testing.T) {
	dir := t.TempDir()
	tickd, err := proc.Build(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const token = "operators-own-metrics-token-7"
	srv, err := proc.Start(tickd, "server", []string{"TICKFENCE_METRICS_TOKEN=" + token}, "server", "--listen", "127.0.0.1:0",
		"--data", filepath.Join(dir, "nats"), "--metrics", "0.0.0.0:0", "--metrics-allow-host", "prom.internal", "--pprof",
		"--flight-trace", filepath.Join(dir, "traces"), "--log-json")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Kill)
	if _, _, err := srv.WaitLog(ctx, 0, proc.Msg("NATS JetStream server ready")); err != nil {
		t.Fatal(err)
	}
	_, login := srv.Find(0, func(m map[string]any) bool { return m["token_from"] == "$TICKFENCE_METRICS_TOKEN" })
	if login == nil {
		t.Fatalf("no line saying the listener needs $TICKFENCE_METRICS_TOKEN: %v", srv.Lines(0))
	}
	for _, m := range srv.Lines(0) {
		for _, v := range m {
			if s, ok := v.(string); ok && strings.Contains(s, token) {
				t.Fatalf("the operator's token is logged: %v", m)
			}
		}
	}
	base := strings.TrimSuffix(srv.MetricsURL(), "/metrics")
	for _, h := range []string{"//0.0.0.0:", "//[::]:"} {
		base = strings.Replace(base, h, "//127.0.0.1:", 1)
	}
	do := func(method, path string, set func(*http.Request)) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, base+path, nil)
		if set != nil {
			set(req)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	bearer := func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token) }
	if code, body := do("GET", "/metrics", nil); code != 200 || !strings.Contains(body, "tickfence_nats_connections") {
		t.Errorf("/metrics without the token: %d %.100q, want it open", code, body)
	}
	for h, want := range map[string]int{"prom.internal:9470": 200, "rebind.attacker.example": http.StatusMisdirectedRequest} {
		if code, _ := do("GET", "/metrics", func(r *http.Request) { r.Host = h }); code != want {
			t.Errorf("/metrics for Host %s: %d, want %d", h, code, want)
		}
	}
	for _, r := range [][2]string{{"GET", "/debug/pprof/cmdline"}, {"POST", "/debug/flight-trace"}} {
		if code, body := do(r[0], r[1], nil); code != http.StatusUnauthorized {
			t.Errorf("%s %s without the token: %d %.100q, want 401", r[0], r[1], code, body)
		}
	}
	if code, body := do("GET", "/debug/pprof/cmdline", bearer); code != 200 || !strings.Contains(body, "server") {
		t.Errorf("pprof with the token: %d %.100q", code, body)
	}
	if code, body := do("POST", "/debug/flight-trace", bearer); code != 200 || !strings.HasSuffix(strings.TrimSpace(body), ".trace") {
		t.Errorf("flight-trace POST with the token: %d %.100q", code, body)
	}
}
