package playerpage

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestHandler: the page, its scripts (as JavaScript, so module scripts load) and styles under the
// prefix, with a policy that allows scripts from the page only; config.json answers 503 until the
// node has joined its cluster, then the config; nothing outside the prefix.
func TestHandler(t *testing.T) {
	var shards atomic.Uint32
	mux := http.NewServeMux()
	mux.Handle("/demo/", Handler("/demo/", func() Config {
		return Config{NATS: "ws://127.0.0.1:4223", Shards: shards.Load(), Demo: 3, Node: "n1"}
	}))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	get := func(path string) (*http.Response, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	for path, want := range map[string]string{"/demo/": "text/html", "/demo/player.js": "text/javascript", "/demo/nats.js": "text/javascript",
		"/demo/msgpack.js": "text/javascript", "/demo/style.css": "text/css"} {
		resp, body := get(path)
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), want) || len(body) < 100 {
			t.Errorf("GET %s: %s %q, %d bytes", path, resp.Status, resp.Header.Get("Content-Type"), len(body))
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "connect-src 'self' ws: wss:") {
			t.Errorf("GET %s: Content-Security-Policy %q", path, csp)
		}
	}
	if _, body := get("/demo/"); !strings.Contains(body, `src="player.js"`) {
		t.Errorf("the page does not load player.js: %.200s", body)
	}
	if resp, _ := get("/demo/config.json"); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("config.json before the node joined: %s, want 503", resp.Status)
	}
	shards.Store(16)
	resp, body := get("/demo/config.json")
	var c Config
	if err := json.Unmarshal([]byte(body), &c); err != nil || resp.StatusCode != 200 || c != (Config{NATS: "ws://127.0.0.1:4223", Shards: 16, Demo: 3, Node: "n1"}) {
		t.Errorf("config.json: %s %q (%v)", resp.Status, body, err)
	}
	if resp, _ := get("/demo/nope.js"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /demo/nope.js: %s", resp.Status)
	}
	if resp, _ := get("/other"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /other: %s", resp.Status)
	}
}
