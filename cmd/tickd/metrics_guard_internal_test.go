package main

import (
	"bufio"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tickfence/tickfence/internal/syncbuf"
)

// metricsListener runs a node's --metrics listener (serveMetrics: /metrics, the demo page, the
// profiler, the flight recorder's POST) on o.metricsAddr and returns its base URL (by
// 127.0.0.1), the login URL it logged ("" if none) and its logs.
func metricsListener(t *testing.T, o options) (base, login string, logs *syncbuf.Buffer) {
	t.Helper()
	logs = &syncbuf.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	fl, err := startFlight(t.TempDir(), "tickd", 15*time.Second, 0, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fl.stop)
	stop, err := serveMetrics(o, runtimeRegistry(), &playerPage{o: o}, fl, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	sc := bufio.NewScanner(strings.NewReader(logs.String()))
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		url, _ := m["url"].(string)
		switch {
		case m["msg"] == "metrics":
			base = strings.TrimSuffix(url, "/metrics")
		case strings.Contains(url, "?token="):
			login = url
		}
	}
	if base == "" {
		t.Fatalf("no metrics URL logged:\n%s", logs.String())
	}
	for _, h := range []string{"//0.0.0.0:", "//[::]:"} {
		base = strings.Replace(base, h, "//127.0.0.1:", 1)
	}
	return base, login, logs
}

func get(t *testing.T, method, url string, set func(*http.Request)) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if set != nil {
		set(req)
	}
	client := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestMetricsListenerOffLoopback: a node's --metrics listener off loopback serves /metrics to
// anyone (Prometheus) but the profiler, the flight recorder's POST and the demo page only with
// the login token it logged once; it serves only its own Host names (--metrics-allow-host adds
// one) even on /metrics.
func TestMetricsListenerOffLoopback(t *testing.T) {
	o := options{metricsAddr: "0.0.0.0:0", pprof: true, nodeID: "n1", demo: 2, metricsAllow: []string{"prom.internal"}}
	base, login, logs := metricsListener(t, o)
	if !strings.HasPrefix(login, "http://127.0.0.1:") || !strings.Contains(login, "/debug/pprof/?token=") {
		t.Fatalf("login URL %q:\n%s", login, logs.String())
	}
	token := login[strings.Index(login, "?token=")+len("?token="):]
	if code, body := get(t, "GET", base+"/metrics", nil); code != 200 || !strings.Contains(body, "go_goroutines") {
		t.Errorf("/metrics without the token: %d %.100q, want it open", code, body)
	}
	locked := [][2]string{{"GET", "/debug/pprof/"}, {"GET", "/debug/pprof/cmdline"}, {"POST", "/debug/flight-trace"}, {"GET", "/demo/"}, {"GET", "/demo/config.json"}}
	for _, r := range locked {
		if code, body := get(t, r[0], base+r[1], nil); code != http.StatusUnauthorized {
			t.Errorf("%s %s without the token: %d %.100q, want 401", r[0], r[1], code, body)
		}
		if code, _ := get(t, r[0], base+r[1], func(q *http.Request) { q.Header.Set("Authorization", "Bearer wrong-token-0123456789") }); code != http.StatusUnauthorized {
			t.Errorf("%s %s with a wrong token: %d, want 401", r[0], r[1], code)
		}
	}
	if strings.Contains(logs.String(), "flight trace written") {
		t.Fatal("a flight trace written without the token")
	}
	bearer := func(q *http.Request) { q.Header.Set("Authorization", "Bearer "+token) }
	if code, body := get(t, "GET", base+"/debug/pprof/cmdline", bearer); code != 200 || !strings.Contains(body, os.Args[0]) {
		t.Errorf("pprof with the token: %d %.100q", code, body)
	}
	if code, body := get(t, "POST", base+"/debug/flight-trace", bearer); code != 200 || !strings.HasSuffix(strings.TrimSpace(body), ".trace") {
		t.Errorf("flight-trace POST with the token: %d %.100q", code, body)
	}
	if code, body := get(t, "GET", base+"/demo/", bearer); code != 200 || !strings.Contains(body, "<html") {
		t.Errorf("the demo page with the token: %d %.100q", code, body)
	}
	// The logged URL logs a browser in: a cookie, then the profiler's page.
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Timeout: 10 * time.Second, Jar: jar}
	if resp, err := browser.Get(login); err != nil {
		t.Fatal(err)
	} else if resp.Body.Close(); resp.StatusCode != 200 || resp.Request.URL.String() != base+"/debug/pprof/" {
		t.Errorf("the login URL: %d at %s, want 200 at %s/debug/pprof/", resp.StatusCode, resp.Request.URL, base)
	}
	for h, want := range map[string]int{"prom.internal:9464": 200, "10.0.0.7:9464": 200, "rebind.attacker.example": http.StatusMisdirectedRequest} {
		if code, _ := get(t, "GET", base+"/metrics", func(q *http.Request) { q.Host = h }); code != want {
			t.Errorf("/metrics for Host %s: %d, want %d", h, code, want)
		}
	}
	if code, _ := get(t, "GET", base+"/debug/pprof/", func(q *http.Request) { bearer(q); q.Host = "rebind.attacker.example" }); code != http.StatusMisdirectedRequest {
		t.Errorf("pprof for a rebinding Host with the token: %d, want 421", code)
	}
}

// TestMetricsListenerOnLoopback: on loopback nothing needs a token (as before), but the Host
// check holds: a DNS-rebinding page can neither read the profiler nor write a flight trace.
func TestMetricsListenerOnLoopback(t *testing.T) {
	base, login, logs := metricsListener(t, options{metricsAddr: "127.0.0.1:0", pprof: true, nodeID: "n1"})
	if login != "" {
		t.Fatalf("a login URL on loopback: %s", login)
	}
	for _, r := range [][2]string{{"GET", "/metrics"}, {"GET", "/debug/pprof/cmdline"}, {"GET", "/demo/"}} {
		if code, body := get(t, r[0], base+r[1], nil); code != 200 {
			t.Errorf("%s %s on loopback: %d %.100q", r[0], r[1], code, body)
		}
		if code, _ := get(t, r[0], base+r[1], func(q *http.Request) { q.Host = "rebind.attacker.example" }); code != http.StatusMisdirectedRequest {
			t.Errorf("%s %s for a rebinding Host: %d, want 421", r[0], r[1], code)
		}
	}
	if code, _ := get(t, "POST", base+"/debug/flight-trace", func(q *http.Request) { q.Host = "rebind.attacker.example" }); code != http.StatusMisdirectedRequest {
		t.Errorf("flight-trace POST for a rebinding Host: %d, want 421", code)
	}
	if code, _ := get(t, "POST", base+"/debug/flight-trace", func(q *http.Request) { q.Header.Set("Origin", "http://evil.example") }); code != http.StatusForbidden {
		t.Errorf("flight-trace POST from another origin: %d, want 403", code)
	}
	if strings.Contains(logs.String(), "flight trace written") {
		t.Fatal("a flight trace written for a rebinding page or another origin")
	}
}
