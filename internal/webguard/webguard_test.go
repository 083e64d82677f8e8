package webguard

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// serve runs h behind the guard New makes of o on a real listener; o.Addr's port is the
// listener's. addrHost is the host the guard is told it listens on (0.0.0.0 plays a listener off
// loopback: the test still connects to 127.0.0.1).
func serve(t *testing.T, addrHost string, o Options) (*httptest.Server, *Guard, *bytes.Buffer) {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	var logs bytes.Buffer
	o.Name = "test"
	o.Addr = net.JoinHostPort(addrHost, port)
	o.Log = slog.New(slog.NewTextHandler(&logs, nil))
	g, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "page") })
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "metrics") })
	mux.HandleFunc("POST /api/drain", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "drained") })
	srv.Config.Handler = g.Wrap(mux)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, g, &logs
}

// noRedirect is a client that shows redirects instead of following them.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

type reqOpt func(*http.Request)

func host(h string) reqOpt { return func(r *http.Request) { r.Host = h } }
func header(k, v string) reqOpt {
	return func(r *http.Request) { r.Header.Set(k, v) }
}
func cookie(c *http.Cookie) reqOpt { return func(r *http.Request) { r.AddCookie(c) } }

func do(t *testing.T, method, u string, opts ...reqOpt) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range opts {
		o(req)
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// TestHostCheck: on loopback, with no token, a request for a DNS name other than localhost (a
// DNS-rebinding page) is refused with 421, and so is one with no Host; IP addresses and localhost
// are served; a name allowed with the flag, or the listen address's own, is served too.
func TestHostCheck(t *testing.T) {
	srv, g, logs := serve(t, "127.0.0.1", Options{AllowHosts: []string{"Console.Example:8080"}})
	if g.TokenRequired() {
		t.Fatal("a token on loopback without asking for one")
	}
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	for h, want := range map[string]int{
		"rebind.attacker.example:" + port: http.StatusMisdirectedRequest,
		"rebind.attacker.example":         http.StatusMisdirectedRequest,
		"localhost.attacker.example":      http.StatusMisdirectedRequest,
		"127.0.0.1:" + port:               200,
		"[::1]:" + port:                   200,
		"10.1.2.3":                        200,
		"localhost:" + port:               200,
		"LOCALHOST.":                      200,
		"console.example:" + port:         200,
	} {
		for _, m := range []string{"GET", "POST"} {
			path := "/"
			if m == "POST" {
				path = "/api/drain"
			}
			if resp, body := do(t, m, srv.URL+path, host(h)); resp.StatusCode != want {
				t.Errorf("%s Host %q: %d %q, want %d", m, h, resp.StatusCode, body, want)
			}
		}
	}
	// No Host at all (HTTP/1.0 may leave it out).
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "GET / HTTP/1.0\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("a request without Host: %d, want 421", resp.StatusCode)
	}
	if !strings.Contains(logs.String(), "another Host refused") {
		t.Errorf("the refusal is not logged: %s", logs.String())
	}

	// Off loopback the listen host is served too.
	srv2, _, _ := serve(t, "metrics.internal", Options{Open: []string{"/metrics"}})
	if resp, body := do(t, "GET", srv2.URL+"/metrics", host("metrics.internal")); resp.StatusCode != 200 {
		t.Errorf("Host metrics.internal on a listener on metrics.internal: %d %q", resp.StatusCode, body)
	}
	if resp, _ := do(t, "GET", srv2.URL+"/metrics", host("other.internal")); resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("Host other.internal on a listener on metrics.internal: %d, want 421", resp.StatusCode)
	}
}

// TestTokenOffLoopback: a listener off loopback answers 401 to every request without the token
// (the page, the API, a drain) but the open paths; a GET with the right ?token= sets an HttpOnly,
// SameSite=Strict cookie and redirects to the URL without it; the cookie or a bearer header then
// pass; a wrong token does not. The token is logged once, as a URL.
func TestTokenOffLoopback(t *testing.T) {
	srv, g, logs := serve(t, "0.0.0.0", Options{Open: []string{"/metrics"}})
	if !g.TokenRequired() || len(g.Token()) != 2*TokenBytes {
		t.Fatalf("off loopback: token required %v, %q", g.TokenRequired(), g.Token())
	}
	tok := g.Token()
	wrong := tok[:len(tok)-1] + map[bool]string{true: "1", false: "0"}[tok[len(tok)-1] == '0'] // one character off
	if n := strings.Count(logs.String(), tok); n != 1 || !strings.Contains(logs.String(), "/?token="+tok) {
		t.Fatalf("the token is logged %d times, want once as a URL: %s", n, logs.String())
	}
	for _, c := range []struct{ method, path string }{{"GET", "/"}, {"GET", "/api/state"}, {"POST", "/api/drain"}} {
		if resp, body := do(t, c.method, srv.URL+c.path); resp.StatusCode != http.StatusUnauthorized || strings.Contains(body, "drained") {
			t.Errorf("%s %s without the token: %d %q, want 401", c.method, c.path, resp.StatusCode, body)
		}
		if resp, _ := do(t, c.method, srv.URL+c.path, header("Authorization", "Bearer "+NewToken())); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s %s with a wrong bearer token: %d, want 401", c.method, c.path, resp.StatusCode)
		}
		if resp, _ := do(t, c.method, srv.URL+c.path, cookie(&http.Cookie{Name: g.CookieName(), Value: wrong})); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s %s with a wrong cookie: %d, want 401", c.method, c.path, resp.StatusCode)
		}
	}
	if resp, body := do(t, "GET", srv.URL+"/metrics"); resp.StatusCode != 200 || body != "metrics" {
		t.Errorf("/metrics without the token: %d %q, want it open", resp.StatusCode, body)
	}
	if resp, _ := do(t, "GET", srv.URL+"/?token=wrong"); resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
		t.Errorf("?token=wrong: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	// A POST with the token in its URL is not logged in (only a GET is redirected).
	if resp, _ := do(t, "POST", srv.URL+"/api/drain?token="+tok); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST ?token=: %d, want 401", resp.StatusCode)
	}

	resp, _ := do(t, "GET", srv.URL+"/?token="+tok+"&x=1")
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/?x=1" {
		t.Fatalf("login: %d to %q, want 303 to /?x=1", resp.StatusCode, resp.Header.Get("Location"))
	}
	var c *http.Cookie
	for _, k := range resp.Cookies() {
		if k.Name == g.CookieName() {
			c = k
		}
	}
	if c == nil || c.Value != tok || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" {
		t.Fatalf("login cookie: %+v", c)
	}
	if resp, body := do(t, "GET", srv.URL+"/", cookie(c)); resp.StatusCode != 200 || body != "page" {
		t.Errorf("GET / with the cookie: %d %q", resp.StatusCode, body)
	}
	if resp, body := do(t, "POST", srv.URL+"/api/drain", cookie(c)); resp.StatusCode != 200 || body != "drained" {
		t.Errorf("POST with the cookie: %d %q", resp.StatusCode, body)
	}
	if resp, body := do(t, "POST", srv.URL+"/api/drain", header("Authorization", "Bearer "+tok)); resp.StatusCode != 200 || body != "drained" {
		t.Errorf("POST with the bearer token: %d %q", resp.StatusCode, body)
	}
	// The Host check holds with the token too.
	if resp, _ := do(t, "GET", srv.URL+"/", cookie(c), host("rebind.attacker.example")); resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("rebinding Host with the cookie: %d, want 421", resp.StatusCode)
	}
	if resp, _ := do(t, "GET", srv.URL+"/metrics", host("rebind.attacker.example")); resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("rebinding Host on /metrics: %d, want 421", resp.StatusCode)
	}
	// The login's redirect never leaves the listener.
	for path, want := range map[string]string{"//evil.example/": "/", "/%2F%2Fevil.example": "/%2F%2Fevil.example"} {
		u, _ := url.Parse(srv.URL)
		raw := "GET " + path + "?token=" + tok + " HTTP/1.1\r\nHost: " + u.Host + "\r\nConnection: close\r\n\r\n"
		conn, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprint(conn, raw)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		conn.Close()
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != want {
			t.Errorf("login on %s: %d to %q, want 303 to %q", path, resp.StatusCode, resp.Header.Get("Location"), want)
		}
	}
}

// TestOriginCheck: a state-changing request whose Origin is not the listener's is refused (403)
// even with the token, and so is one a browser marks as from another site; a GET is not
// concerned; the listener's own origin, or none (curl), passes.
func TestOriginCheck(t *testing.T) {
	for _, addr := range []string{"127.0.0.1", "0.0.0.0"} {
		srv, g, _ := serve(t, addr, Options{})
		u, _ := url.Parse(srv.URL)
		auth := header("Authorization", "Bearer "+g.Token())
		if g.Token() == "" {
			auth = func(*http.Request) {}
		}
		for origin, want := range map[string]int{
			"http://evil.example":                  http.StatusForbidden,
			"http://" + u.Host + ".evil.example":   http.StatusForbidden,
			"http://127.0.0.1:1":                   http.StatusForbidden, // another port: same site, not the same origin
			"null":                                 http.StatusForbidden,
			"http://" + u.Host:                     200,
			"HTTP://" + strings.ToUpper(u.Host):    200,
			"http://localhost:" + u.Port() + "/x/": 403, // not the Host's name
		} {
			if resp, body := do(t, "POST", srv.URL+"/api/drain", auth, header("Origin", origin)); resp.StatusCode != want {
				t.Errorf("%s: POST with Origin %q: %d %q, want %d", addr, origin, resp.StatusCode, body, want)
			}
		}
		if resp, _ := do(t, "POST", srv.URL+"/api/drain", auth, header("Sec-Fetch-Site", "cross-site")); resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: POST with Sec-Fetch-Site cross-site: %d, want 403", addr, resp.StatusCode)
		}
		if resp, _ := do(t, "POST", srv.URL+"/api/drain", auth, header("Sec-Fetch-Site", "same-origin")); resp.StatusCode != 200 {
			t.Errorf("%s: POST with Sec-Fetch-Site same-origin: %d, want 200", addr, resp.StatusCode)
		}
		if resp, _ := do(t, "GET", srv.URL+"/", auth, header("Origin", "http://evil.example")); resp.StatusCode != 200 {
			t.Errorf("%s: GET with another Origin: %d, want 200", addr, resp.StatusCode)
		}
	}
}

// TestTokenOptions: --token-required (TokenRequired) needs the token on loopback; the token
// environment variable supplies it (and is then never logged) and requires it on loopback too;
// one too short is refused.
func TestTokenOptions(t *testing.T) {
	srv, g, _ := serve(t, "127.0.0.1", Options{TokenRequired: true})
	if resp, _ := do(t, "GET", srv.URL+"/"); !g.TokenRequired() || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("TokenRequired on loopback: %d, want 401", resp.StatusCode)
	}
	const mine = "operator-chosen-token-0123456789"
	t.Setenv("TEST_WEBGUARD_TOKEN", mine)
	srv, g, logs := serve(t, "127.0.0.1", Options{TokenEnv: "TEST_WEBGUARD_TOKEN"})
	if g.Token() != mine || strings.Contains(logs.String(), mine) || !strings.Contains(logs.String(), "$TEST_WEBGUARD_TOKEN") {
		t.Errorf("token from the environment: %q; logs %s", g.Token(), logs.String())
	}
	if resp, _ := do(t, "GET", srv.URL+"/"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("without the supplied token: %d, want 401", resp.StatusCode)
	}
	if resp, _ := do(t, "GET", srv.URL+"/", header("Authorization", "bearer "+mine)); resp.StatusCode != 200 {
		t.Errorf("with the supplied token: %d, want 200", resp.StatusCode)
	}
	for _, bad := range []string{"short", "a token with spaces in it", "semi;colon-0123456789"} {
		t.Setenv("TEST_WEBGUARD_TOKEN", bad)
		if _, err := New(Options{Name: "test", Addr: "0.0.0.0:1", TokenEnv: "TEST_WEBGUARD_TOKEN", Log: slog.New(slog.DiscardHandler)}); err == nil {
			t.Errorf("token %q accepted", bad)
		}
	}
	if a, b := NewToken(), NewToken(); a == b || len(a) != 64 {
		t.Errorf("NewToken: %q %q", a, b)
	}
}

// TestHostsFlag: repeatable and comma-separated.
func TestHostsFlag(t *testing.T) {
	var h Hosts
	if err := h.Set("a.example, b.example"); err != nil {
		t.Fatal(err)
	}
	if err := h.Set("c.example"); err != nil {
		t.Fatal(err)
	}
	if h.String() != "a.example,b.example,c.example" {
		t.Errorf("hosts: %q", h.String())
	}
	if err := h.Set("http://x.example/"); err == nil {
		t.Error("a URL accepted as a host name")
	}
}
