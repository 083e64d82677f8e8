package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tickfence/tickfence"
	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/actor/dungeon"
	"github.com/tickfence/tickfence/internal/natsserver"
)

// consoleProc is a running tickctl console.
type consoleProc struct {
	base  string // http://127.0.0.1:PORT/
	login string // the ?token= URL it logged ("" if none)
	mu    sync.Mutex
	err   bytes.Buffer // its stderr
}

func (p *consoleProc) stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err.String()
}

var loginRE = regexp.MustCompile(`url="?(http://[^\s"]+\?token=[0-9a-f]+)`)

// startConsole runs tickctl console with args and env, and waits for its URL (and, if it logs
// one, its login URL: it logs that before it serves).
func startConsole(t *testing.T, natsURL string, env []string, args ...string) *consoleProc {
	t.Helper()
	cmd := exec.Command(tickctlBin(t), append([]string{"console", "--json", "--nats", natsURL}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &consoleProc{}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
		}
	})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.err.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
		}
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("tickctl console printed no URL: %v\n%s", err, p.stderr())
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	var printed struct{ URL string }
	if err := json.Unmarshal([]byte(line), &printed); err != nil {
		t.Fatalf("tickctl console --json printed %q (%v)", line, err)
	}
	p.base = strings.Replace(strings.Replace(printed.URL, "://0.0.0.0:", "://127.0.0.1:", 1), "://[::]:", "://127.0.0.1:", 1)
	// The login line is logged before the URL is printed; give the stderr reader a moment.
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if m := loginRE.FindStringSubmatch(p.stderr()); m != nil {
			p.login = m[1]
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return p
}

func consoleRequest(t *testing.T, client *http.Client, method, url string, set func(*http.Request)) (int, string) {
	t.Helper()
	var body io.Reader
	if method == "POST" {
		body = strings.NewReader(`{"shard": 3}`)
	}
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Tickfence-Console", "1")
	if set != nil {
		set(req)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestConsoleLogin runs the tickctl binary's console as an operator would off loopback: without
// --insecure it refuses to start; with it, it logs a login URL once, and answers 401 to the page,
// the API and a button without the token; opening the login URL gives a cookie, with which all of
// them work; it serves its own Host names and --allow-host's, no other. On loopback a token is
// needed with --token-required, or when $TICKFENCE_CONSOLE_TOKEN supplies one (not logged).
func TestConsoleLogin(t *testing.T) {
	var out bytes.Buffer
	if err := run([]string{"console", "--listen", "0.0.0.0:0"}, &out); err == nil || !strings.Contains(err.Error(), "add --insecure") {
		t.Fatalf("console on 0.0.0.0 without --insecure: %v", err)
	}

	dir := t.TempDir()
	srv, err := natsserver.Start(natsserver.Config{DataDir: filepath.Join(dir, "nats"), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n, err := tickfence.Start(ctx, tickfence.Options{Kinds: []actor.Kind{dungeon.Kind{}}, NodeID: "n1", NATS: srv.ClientURL(), Shards: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()

	c := startConsole(t, srv.ClientURL(), nil, "--listen", "0.0.0.0:0", "--insecure", "--allow-host", "console.example,other.example", "--allow-host", "third.example")
	if c.login == "" || !strings.HasPrefix(c.login, c.base+"?token=") {
		t.Fatalf("no login URL logged for %s:\n%s", c.base, c.stderr())
	}
	token := strings.TrimPrefix(c.login, c.base+"?token=")
	plain := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, r := range [][2]string{{"GET", ""}, {"GET", "api/state"}, {"POST", "api/pin"}, {"POST", "api/drain"}} {
		if code, body := consoleRequest(t, plain, r[0], c.base+r[1], nil); code != http.StatusUnauthorized {
			t.Errorf("%s /%s without the token: %d %.100q, want 401", r[0], r[1], code, body)
		}
	}
	if code, _ := consoleRequest(t, plain, "GET", c.base+"?token=0123456789abcdef0123456789abcdef", nil); code != http.StatusUnauthorized {
		t.Errorf("a wrong token: %d, want 401", code)
	}
	bearer := func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token) }
	if code, body := consoleRequest(t, plain, "GET", c.base+"api/state", bearer); code != 200 || strings.Contains(body, `"pinned":[3]`) {
		t.Fatalf("/api/state with the bearer token: %d %.200q (shard 3 pinned without the token?)", code, body)
	}

	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Timeout: 10 * time.Second, Jar: jar}
	if code, body := consoleRequest(t, browser, "GET", c.login, nil); code != 200 || !strings.Contains(body, `<canvas id="grid"`) {
		t.Fatalf("the login URL: %d %.200q", code, body)
	}
	if code, body := consoleRequest(t, browser, "POST", c.base+"api/pin", nil); code != 200 || !strings.Contains(body, `"ok":true`) {
		t.Fatalf("pin 3 with the login cookie: %d %.200q", code, body)
	}
	u, _ := url.Parse(c.base)
	cookies := jar.Cookies(u) // sent by hand: a client looks cookies up by the Host it sends
	if len(cookies) != 1 {
		t.Fatalf("cookies after the login: %v", cookies)
	}
	for h, want := range map[string]int{"console.example": 200, "third.example:80": 200, "rebind.attacker.example": http.StatusMisdirectedRequest} {
		if code, body := consoleRequest(t, plain, "GET", c.base+"api/state", func(r *http.Request) { r.Host = h; r.AddCookie(cookies[0]) }); code != want {
			t.Errorf("Host %s with the cookie: %d %.100q, want %d", h, code, body, want)
		}
	}
	if n := strings.Count(c.stderr(), token); n != 1 {
		t.Errorf("the token is on stderr %d times, want once:\n%s", n, c.stderr())
	}

	// On loopback: no token by default (TestConsoleVerb), one with --token-required ...
	c = startConsole(t, srv.ClientURL(), nil, "--listen", "127.0.0.1:0", "--token-required")
	if c.login == "" {
		t.Fatalf("--token-required logged no login URL:\n%s", c.stderr())
	}
	if code, _ := consoleRequest(t, plain, "GET", c.base+"api/state", nil); code != http.StatusUnauthorized {
		t.Errorf("--token-required, no token: %d, want 401", code)
	}
	// ... or the operator's own.
	const mine = "operators-own-console-token-42"
	c = startConsole(t, srv.ClientURL(), []string{"TICKFENCE_CONSOLE_TOKEN=" + mine}, "--listen", "127.0.0.1:0")
	if c.login != "" || strings.Contains(c.stderr(), mine) {
		t.Errorf("the supplied token is logged:\n%s", c.stderr())
	}
	if code, _ := consoleRequest(t, plain, "GET", c.base+"api/state", nil); code != http.StatusUnauthorized {
		t.Errorf("$TICKFENCE_CONSOLE_TOKEN, no token: %d, want 401", code)
	}
	if code, _ := consoleRequest(t, plain, "GET", c.base+"api/state", func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+mine) }); code != 200 {
		t.Errorf("$TICKFENCE_CONSOLE_TOKEN as bearer: %d, want 200", code)
	}
}
