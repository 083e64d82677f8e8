// Package webguard guards tickfence's own HTTP listeners — the operator console (tickctl
// console) and the --metrics listener of tickd and tickd server — the same way:
//
//   - The Host check, always: a request must name this listener as its Host — an IP address
//     (a DNS-rebinding page is always under a name, never an address), localhost, the host of
//     the listen address, or a name the operator allows (--allow-host). A web page whose own
//     DNS name is made to resolve to this machine is therefore refused (421), and so is a
//     request without a Host.
//   - A login token whenever the listener is not on loopback (or the operator asks for one), as
//     Jupyter does: 32 random bytes (or the operator's, from an environment variable), printed
//     once at start as a URL with ?token=. A GET carrying the right ?token= sets an HttpOnly,
//     SameSite=Strict cookie and is redirected to the same URL without the token; every other
//     request needs that cookie or an "Authorization: Bearer TOKEN" header, else 401. Only the
//     paths the caller names as open (/metrics, for Prometheus) are served without it.
//   - A state-changing request (any method but GET, HEAD, OPTIONS and TRACE) that carries an
//     Origin must come from this listener's own origin (the Origin's host is the Host), and one
//     a browser marks Sec-Fetch-Site cross-site or same-site is refused (403): defence in depth
//     against CSRF beside the SameSite cookie.
package webguard

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/tickfence/tickfence/internal/natsserver"
)

// Options of a guard.
type Options struct {
	// Name of the listener ("console", "metrics"): in its messages, logs and cookie name.
	Name string
	// Addr is the address it listens on, HOST:PORT (the bound one, after port 0 is resolved).
	Addr string
	// AllowHosts are more Host names to serve (besides IP addresses, localhost and Addr's host).
	AllowHosts []string
	// AllowFlag is the flag that sets AllowHosts, named in the 421 answer ("--allow-host").
	AllowFlag string
	// TokenEnv is the environment variable that supplies the token (instead of a random one);
	// set, it also makes the token required on loopback.
	TokenEnv string
	// TokenRequired requires the token on loopback too (off loopback it always is).
	TokenRequired bool
	// Open are the paths served without the token (exact matches, e.g. "/metrics"); the Host
	// check still applies to them.
	Open []string
	// LoginPath is the path of the login URL printed (default "/").
	LoginPath string
	// Log receives the login URL (once, at New) and the refused requests (default slog.Default).
	Log *slog.Logger
}

// Guard is a listener's guard.
type Guard struct {
	o      Options
	token  string   // "" : no token needed
	sum    [32]byte // sha256 of token
	cookie string
	hosts  map[string]bool
	port   string

	mu     sync.Mutex
	logged map[string]time.Time // refusal kind → last logged
}

// TokenBytes is the size of a random token (hex-encoded in URLs: 64 characters).
const TokenBytes = 32

// MinTokenLen is the shortest token an operator may supply.
const MinTokenLen = 16

// NewToken returns a new random token: TokenBytes random bytes, hex.
func NewToken() string {
	b := make([]byte, TokenBytes)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// Loopback guards a listener on loopback: the Host check only, no token. Tests and handlers
// served without options use it.
func Loopback(name string) *Guard {
	g, _ := New(Options{Name: name, Addr: "127.0.0.1:0"})
	return g
}

// New makes the guard of a listener on o.Addr. When it needs a token (Addr not loopback,
// TokenRequired, or o.TokenEnv set) it takes o.TokenEnv's or a new random one, and logs the
// login URL once on o.Log (with the token if it made it: only the log shows it).
func New(o Options) (*Guard, error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.LoginPath == "" {
		o.LoginPath = "/"
	}
	host, port, err := net.SplitHostPort(o.Addr)
	if err != nil {
		return nil, fmt.Errorf("%s: address %q: want HOST:PORT", o.Name, o.Addr)
	}
	g := &Guard{o: o, port: port, cookie: "tickfence_" + cookieSafe(o.Name) + "_" + cookieSafe(port),
		hosts: map[string]bool{"localhost": true}, logged: map[string]time.Time{}}
	if host != "" {
		g.hosts[normHost(host)] = true
	}
	for _, h := range o.AllowHosts {
		if hh, _, err := net.SplitHostPort(h); err == nil {
			h = hh // a port given too: any port
		}
		if h = normHost(h); h != "" {
			g.hosts[h] = true
		}
	}
	supplied := ""
	if o.TokenEnv != "" {
		supplied = os.Getenv(o.TokenEnv)
	}
	if !natsserver.Loopback(host) || o.TokenRequired || supplied != "" {
		switch {
		case supplied != "" && len(supplied) < MinTokenLen:
			return nil, fmt.Errorf("%s: $%s is shorter than %d characters: too easy to guess", o.Name, o.TokenEnv, MinTokenLen)
		case supplied != "" && !cookieValue(supplied):
			return nil, fmt.Errorf("%s: $%s may hold only printable ASCII other than space, quote, comma, semicolon and backslash (it goes in a cookie)", o.Name, o.TokenEnv)
		case supplied != "":
			g.token = supplied
		default:
			g.token = NewToken()
		}
		g.sum = sha256.Sum256([]byte(g.token))
		login := g.URL(host)
		if supplied != "" {
			g.announce(o.Name+" needs its login token: open the URL with ?token=$"+o.TokenEnv+", or send Authorization: Bearer $"+o.TokenEnv,
				"url", login, "token_from", "$"+o.TokenEnv)
		} else {
			g.announce(o.Name+" needs this login token (shown only here): open the URL, or send Authorization: Bearer TOKEN",
				"url", login+"?token="+g.token)
		}
	}
	return g, nil
}

// Addr is the address to guard for a listener asked for on listen (HOST:PORT, port 0 for a free
// one) and bound at bound: listen's host (as the operator wrote it: 0.0.0.0 binds [::] too) with
// bound's port.
func Addr(listen string, bound net.Addr) string {
	host, _, err := net.SplitHostPort(listen)
	_, port, err2 := net.SplitHostPort(bound.String())
	if err != nil || err2 != nil {
		return bound.String()
	}
	return net.JoinHostPort(host, port)
}

// announce logs the login line at Info, or, where the log leaves Info out (--log-level warn),
// writes it on stderr as it is: the token must be shown.
func (g *Guard) announce(msg string, attrs ...any) {
	if g.o.Log.Enabled(context.Background(), slog.LevelInfo) {
		g.o.Log.Info(msg, attrs...)
		return
	}
	line := msg
	for i := 0; i+1 < len(attrs); i += 2 {
		line += fmt.Sprintf(" %v=%v", attrs[i], attrs[i+1])
	}
	fmt.Fprintln(os.Stderr, line)
}

// TokenRequired says whether requests need the token.
func (g *Guard) TokenRequired() bool { return g.token != "" }

// Token is the token ("" when none is needed).
func (g *Guard) Token() string { return g.token }

// CookieName is the name of the login cookie (one per listener name and port: cookies do not
// tell ports apart).
func (g *Guard) CookieName() string { return g.cookie }

// URL is the listener's URL of LoginPath for a browser: by host, or by 127.0.0.1 ([::1]) when
// host is every interface.
func (g *Guard) URL(host string) string {
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return "http://" + net.JoinHostPort(host, g.port) + g.o.LoginPath
}

// Wrap guards h.
func (g *Guard) Wrap(h http.Handler) http.Handler {
	open := map[string]bool{}
	for _, p := range g.o.Open {
		open[p] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.hostAllowed(r.Host) {
			g.refuse("host", "a request for another Host refused (DNS rebinding?)", r)
			msg := fmt.Sprintf("%s: Host %q refused: open it by IP address, localhost or its listen address", g.o.Name, r.Host)
			if g.o.AllowFlag != "" {
				msg += " (" + g.o.AllowFlag + " NAME serves another name)"
			}
			http.Error(w, msg, http.StatusMisdirectedRequest)
			return
		}
		if stateChanging(r.Method) {
			if why := crossOrigin(r); why != "" {
				g.refuse("origin", "a state-changing request from another origin refused", r, "why", why)
				http.Error(w, g.o.Name+": "+why, http.StatusForbidden)
				return
			}
		}
		if g.token == "" || open[r.URL.Path] {
			h.ServeHTTP(w, r)
			return
		}
		q := r.URL.Query()
		if q.Has("token") && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			if !g.match(q.Get("token")) {
				g.refuse("token", "a wrong login token", r)
				g.unauthorized(w, "wrong token")
				return
			}
			// Logged in: the cookie, and the same URL without the token (out of the address
			// bar, the history and any Referer).
			http.SetCookie(w, &http.Cookie{Name: g.cookie, Value: g.token, Path: "/", HttpOnly: true,
				SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
			q.Del("token")
			w.Header().Set("Referrer-Policy", "no-referrer")
			w.Header().Set("Cache-Control", "no-store")
			http.Redirect(w, r, localPath(r.URL.EscapedPath(), q.Encode()), http.StatusSeeOther)
			return
		}
		if g.authenticated(r) {
			h.ServeHTTP(w, r)
			return
		}
		if _, has := r.Header["Authorization"]; has {
			g.refuse("token", "a wrong bearer token", r)
		}
		g.unauthorized(w, "login token required")
	})
}

func (g *Guard) unauthorized(w http.ResponseWriter, why string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="tickfence `+g.o.Name+`"`)
	w.Header().Set("Cache-Control", "no-store")
	http.Error(w, fmt.Sprintf("%s: %s: open the URL with ?token= printed when it started, or send Authorization: Bearer TOKEN", g.o.Name, why),
		http.StatusUnauthorized)
}

// authenticated: the cookie or the bearer header carries the token.
func (g *Guard) authenticated(r *http.Request) bool {
	if a := r.Header.Get("Authorization"); len(a) > 7 && strings.EqualFold(a[:7], "Bearer ") {
		if g.match(strings.TrimSpace(a[7:])) {
			return true
		}
	}
	for _, c := range r.CookiesNamed(g.cookie) {
		if g.match(c.Value) {
			return true
		}
	}
	return false
}

// match compares in constant time (of hashes, so not even the length shows).
func (g *Guard) match(tok string) bool {
	s := sha256.Sum256([]byte(tok))
	return subtle.ConstantTimeCompare(s[:], g.sum[:]) == 1
}

func (g *Guard) hostAllowed(h string) bool {
	if h == "" {
		return false
	}
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	h = normHost(h)
	if h == "" {
		return false
	}
	// An address cannot be a rebinding page's origin: that is always under a name the attacker
	// owns, and the browser sends that name.
	if net.ParseIP(h) != nil {
		return true
	}
	return g.hosts[h]
}

// normHost lowercases a host name and drops brackets and a trailing dot.
func normHost(h string) string {
	h = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".")
	return strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
}

func stateChanging(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return false
	}
	return true
}

// crossOrigin says why a state-changing request is from another origin ("" if it is not, or
// carries nothing that says so: clients that are not browsers send no Origin).
func crossOrigin(r *http.Request) string {
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host == "" || !sameHost(u, r.Host) {
			return fmt.Sprintf("Origin %q is not this listener's (Host %q)", o, r.Host)
		}
		return ""
	}
	switch r.Header.Get("Sec-Fetch-Site") {
	case "cross-site", "same-site":
		return "a request from another site (Sec-Fetch-Site: " + r.Header.Get("Sec-Fetch-Site") + ")"
	}
	return ""
}

// sameHost: the origin's host and port are the Host's (a default port may be left out on
// either side).
func sameHost(origin *url.URL, host string) bool {
	oh, op := origin.Hostname(), origin.Port()
	def := map[string]string{"http": "80", "https": "443"}[strings.ToLower(origin.Scheme)]
	if op == "" {
		op = def
	}
	hh, hp, err := net.SplitHostPort(host)
	if err != nil {
		hh, hp = host, def
	}
	return op != "" && op == hp && normHost(oh) == normHost(hh)
}

// localPath is path?query as a redirect target on this listener: never another host (a path
// starting // or /\ would be one to a browser).
func localPath(path, query string) string {
	if !strings.HasPrefix(path, "/") || strings.HasPrefix(path, "//") || strings.HasPrefix(path, "/\\") {
		path = "/"
	}
	if query != "" {
		path += "?" + query
	}
	return path
}

// refuse logs a refused request, at most once per kind every 10 s (a flood does not flood the log).
func (g *Guard) refuse(kind, msg string, r *http.Request, attrs ...any) {
	g.mu.Lock()
	last := g.logged[kind]
	now := time.Now()
	quiet := now.Sub(last) < 10*time.Second
	if !quiet {
		g.logged[kind] = now
	}
	g.mu.Unlock()
	if quiet {
		return
	}
	g.o.Log.Warn(g.o.Name+": "+msg, append([]any{"host", r.Host, "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr}, attrs...)...)
}

// cookieValue: s goes in a cookie as it is.
func cookieValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || c == '"' || c == ',' || c == ';' || c == '\\' {
			return false
		}
	}
	return true
}

func cookieSafe(s string) string {
	return strings.Map(func(c rune) rune {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			return c
		}
		return '_'
	}, s)
}

// Hosts is a flag of Host names, repeatable and comma-separated: --allow-host a,b --allow-host c.
type Hosts []string

func (h *Hosts) String() string {
	if h == nil {
		return ""
	}
	return strings.Join(*h, ",")
}

// Set adds the names of one flag.
func (h *Hosts) Set(v string) error {
	for n := range strings.SplitSeq(v, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if strings.ContainsAny(n, "/ ") {
			return errors.New("want host names, comma-separated (no scheme, path or space)")
		}
		*h = append(*h, n)
	}
	return nil
}
