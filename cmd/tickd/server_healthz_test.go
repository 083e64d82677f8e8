package main_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tickfence/tickfence/internal/proc"
)

// TestTickdServerHealthz: `tickd server --metrics` serves /healthz without the login token (as
// /metrics: load balancers and restart scripts poll it), 200 with a JSON body saying ready once the
// server is up, while the rest of the listener still asks for the token.
func TestTickdServerHealthz(t *testing.T) {
	dir := t.TempDir()
	tickd, err := proc.Build(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv, err := proc.Start(tickd, "server", []string{"TICKFENCE_METRICS_TOKEN=open-sesame-0123456789"}, "server", "--listen", "127.0.0.1:0",
		"--data", filepath.Join(dir, "nats"), "--metrics", "127.0.0.1:0", "--pprof", "--log-json")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Kill)
	if _, _, err := srv.WaitLog(ctx, 0, proc.Msg("NATS JetStream server ready")); err != nil {
		t.Fatal(err)
	}
	base := strings.TrimSuffix(srv.MetricsURL(), "/metrics")
	var h struct {
		Ready  bool   `json:"ready"`
		Status string `json:"status"`
		Server string `json:"server"`
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			if err := json.Unmarshal(b, &h); err != nil || !h.Ready || h.Status != "ok" || h.Server != "tickd-server" {
				t.Fatalf("/healthz 200 with %s (%v)", b, err)
			}
			break
		}
		if resp.StatusCode != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("/healthz: %d %s", resp.StatusCode, b)
		}
	}
	resp, err := http.Get(base + "/debug/pprof/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		t.Errorf("the profiler answered without the token: /healthz's opening opened more")
	}
}
