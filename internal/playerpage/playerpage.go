// Package playerpage is tickd's player demo page: a browser connects to NATS over WebSocket as a
// gateway would (DESIGN 9), lists the demo dungeons, shows a boss's HP bar and phase from its
// frames (DESIGN 8, applying the watcher's rule) and sends join, attack and leave with request IDs
// (DESIGN 5), retrying with the same ID while the shard moves.
//
// Everything the page needs is embedded (static/): the page, its script, and a small hand-written
// client of the NATS text protocol (static/nats.js) and msgpack decoder (static/msgpack.js); no
// build step, no CDN. See README "Player demo page" for why not the nats.ws bundle.
package playerpage

import (
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed static
var static embed.FS

// Config is what the page is told (GET config.json).
type Config struct {
	// NATS is the WebSocket URL the browser connects to (ws:// or wss://); "" makes the page say
	// how to give one.
	NATS string `json:"nats"`
	// Shards of the cluster (0 until the serving node has joined it): the page computes a
	// dungeon's shard from its ID, as every gateway does.
	Shards uint32 `json:"shards"`
	// Demo is the serving node's --demo: the page lists demo-0 … demo-<Demo-1> (and every
	// dungeon whose frames it sees).
	Demo int `json:"demo"`
	// Node is the serving node's ID (shown only).
	Node string `json:"node"`
}

// Handler serves the page under prefix (e.g. "/demo/"; with its trailing slash). cfg is called
// for every config.json; a config without Shards answers 503 (the node has not joined yet).
func Handler(prefix string, cfg func() Config) http.Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.FileServerFS(sub)
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+prefix+"config.json", func(w http.ResponseWriter, r *http.Request) {
		c := cfg()
		w.Header().Set("Cache-Control", "no-store")
		if c.Shards == 0 {
			http.Error(w, "the node has not joined its cluster yet; reload in a moment", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(c)
	})
	mux.Handle("GET "+prefix, http.StripPrefix(strings.TrimSuffix(prefix, "/"), files))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		// Scripts and styles only from this page; connections to any ws:// or wss:// server (the
		// NATS URL may be another host's, or changed with ?nats=).
		h.Set("Content-Security-Policy", "default-src 'self'; connect-src 'self' ws: wss:; img-src 'self' data:; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		mux.ServeHTTP(w, r)
	})
}
