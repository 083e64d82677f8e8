package console

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tickfence/tickfence"
	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/actor/dungeon"
	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/internal/webguard"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/natskv"
)

// guarded is a console on a one-node cluster, served on a real listener behind the guard of a
// listener on guardHost (0.0.0.0 plays one off loopback; the test connects to 127.0.0.1).
type guarded struct {
	url   string // http://127.0.0.1:PORT
	guard *webguard.Guard
	st    store.Store
}

func startGuarded(t *testing.T, ctx context.Context, guardHost string) *guarded {
	t.Helper()
	dir := t.TempDir()
	ns, err := natsserver.Start(natsserver.Config{DataDir: filepath.Join(dir, "nats"), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Stop)
	n, err := tickfence.Start(ctx, tickfence.Options{Kinds: []actor.Kind{dungeon.Kind{}}, NodeID: "n1", NATS: ns.ClientURL(), Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	nc, err := natskv.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	st, err := natskv.Open(nc, natskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv := httptest.NewUnstartedServer(nil)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	g, err := webguard.New(webguard.Options{Name: "console", Addr: net.JoinHostPort(guardHost, port), Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	con, err := New(ctx, Config{Store: st, NC: nc, Log: slog.New(slog.DiscardHandler), Guard: g})
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = con.Handler()
	srv.Start()
	t.Cleanup(srv.Close)
	return &guarded{url: srv.URL, guard: g, st: st}
}

func (g *guarded) do(t *testing.T, method, path string, set func(*http.Request)) (*http.Response, string) {
	t.Helper()
	var body io.Reader
	if method == "POST" {
		body = strings.NewReader(`{"node": "n1"}`)
	}
	req, err := http.NewRequest(method, g.url+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(Header, "1") // as the page's buttons: only the guard may refuse these
	if set != nil {
		set(req)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }, Timeout: 10 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		line, _ := bufio.NewReader(resp.Body).ReadString('\n') // the first event; the stream goes on
		return resp, line
	}
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// drained says whether drain.n1 is stored.
func (g *guarded) drained(t *testing.T, ctx context.Context) bool {
	t.Helper()
	_, err := g.st.LatestControl(ctx, store.DrainKey("n1"))
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

// TestConsoleRefusesRebinding: on loopback, a request for a DNS name (what a DNS-rebinding page
// sends) is refused for the page, the API and a drain, and nothing is drained.
func TestConsoleRefusesRebinding(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	g := startGuarded(t, ctx, "127.0.0.1")
	rebind := func(r *http.Request) { r.Host = "rebind.attacker.example" }
	for _, c := range [][2]string{{"GET", "/"}, {"GET", "/api/state"}, {"GET", "/api/events"}, {"POST", "/api/drain"}} {
		if resp, body := g.do(t, c[0], c[1], rebind); resp.StatusCode != http.StatusMisdirectedRequest {
			t.Errorf("%s %s for Host rebind.attacker.example: %d %.100q, want 421", c[0], c[1], resp.StatusCode, body)
		}
	}
	if g.drained(t, ctx) {
		t.Fatal("a rebinding page drained n1")
	}
	if resp, body := g.do(t, "GET", "/api/state", nil); resp.StatusCode != 200 || !strings.Contains(body, `"shards":4`) {
		t.Fatalf("GET /api/state by address: %d %.200q", resp.StatusCode, body)
	}
}

// TestConsoleOffLoopbackNeedsToken: a console off loopback answers 401 to the page, the API, the
// event stream and a drain without its token, and drains nothing; a wrong token is refused; the
// printed URL's ?token= logs in (a cookie) and then everything is served and the drain is done; a
// drain whose Origin is another site's is refused even with the cookie.
func TestConsoleOffLoopbackNeedsToken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	g := startGuarded(t, ctx, "0.0.0.0")
	if !g.guard.TokenRequired() {
		t.Fatal("no token off loopback")
	}
	pages := [][2]string{{"GET", "/"}, {"GET", "/app.js"}, {"GET", "/api/state"}, {"GET", "/api/events"}, {"POST", "/api/drain"}, {"POST", "/api/rebalance/plan"}}
	for _, c := range pages {
		if resp, body := g.do(t, c[0], c[1], nil); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s %s without the token: %d %.100q, want 401", c[0], c[1], resp.StatusCode, body)
		}
		if resp, _ := g.do(t, c[0], c[1], func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+webguard.NewToken()) }); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s %s with a wrong token: %d, want 401", c[0], c[1], resp.StatusCode)
		}
	}
	if resp, _ := g.do(t, "GET", "/?token="+webguard.NewToken(), nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("login with a wrong token: %d, want 401", resp.StatusCode)
	}
	if g.drained(t, ctx) {
		t.Fatal("drained without the token")
	}

	resp, _ := g.do(t, "GET", "/?token="+g.guard.Token(), nil)
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == g.guard.CookieName() {
			cookie = c
		}
	}
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" || cookie == nil {
		t.Fatalf("login: %d to %q, cookie %v", resp.StatusCode, resp.Header.Get("Location"), cookie)
	}
	withCookie := func(r *http.Request) { r.AddCookie(cookie) }
	if resp, body := g.do(t, "GET", "/", withCookie); resp.StatusCode != 200 || !strings.Contains(body, `<canvas id="grid"`) {
		t.Errorf("the page with the cookie: %d %.200q", resp.StatusCode, body)
	}
	if resp, body := g.do(t, "GET", "/api/state", withCookie); resp.StatusCode != 200 || !strings.Contains(body, `"shards":4`) {
		t.Errorf("/api/state with the cookie: %d %.200q", resp.StatusCode, body)
	}
	if resp, body := g.do(t, "GET", "/api/events", withCookie); resp.StatusCode != 200 || !strings.HasPrefix(body, "event: state") {
		t.Errorf("/api/events with the cookie: %d %.200q", resp.StatusCode, body)
	}
	evil := func(r *http.Request) { r.AddCookie(cookie); r.Header.Set("Origin", "http://evil.example") }
	if resp, body := g.do(t, "POST", "/api/drain", evil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("drain from another origin with the cookie: %d %.100q, want 403", resp.StatusCode, body)
	}
	if g.drained(t, ctx) {
		t.Fatal("drained from another origin")
	}
	own := func(r *http.Request) { r.AddCookie(cookie); r.Header.Set("Origin", g.url) }
	if resp, body := g.do(t, "POST", "/api/drain", own); resp.StatusCode != 200 || !strings.Contains(body, `"ok":true`) {
		t.Fatalf("drain with the cookie from the console's own page: %d %.200q", resp.StatusCode, body)
	}
	if !g.drained(t, ctx) {
		t.Fatal("the drain answered ok and n1 is not drained")
	}
}
