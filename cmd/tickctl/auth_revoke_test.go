package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/auth"
	"github.com/tickfence/tickfence/internal/natsserver"
)

// TestAuthRevoke runs tickctl auth user, revoke, push and list against a real server enforcing the
// directory: a revoked gateway's open connection is closed by the server and it cannot connect
// again, without a restart; a revocation made while no server is reachable updates server.conf,
// exits 1 saying the servers still accept it, and takes effect with auth push; a directory made
// before sys.creds revokes in server.conf only and says a new auth init is needed to revoke
// without restarts. A name whose credential is valid is not replaced; a revoked one is.
func TestAuthRevoke(t *testing.T) {
	dir := t.TempDir()
	adir := filepath.Join(dir, "auth")
	tc := func(args ...string) (string, error) {
		t.Helper()
		var out bytes.Buffer
		err := run(args, &out)
		return out.String(), err
	}
	must := func(args ...string) string {
		t.Helper()
		out, err := tc(args...)
		if err != nil {
			t.Fatalf("tickctl %q: %v\n%s", args, err, out)
		}
		return out
	}
	must("auth", "init", adir)
	srv, err := natsserver.Start(natsserver.Config{DataDir: filepath.Join(dir, "nats"), Listen: "127.0.0.1:0", AuthDir: adir})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	url := srv.ClientURL()
	if out := must("auth", "user", adir, "gateway", "gw1", "--expires", "720h"); !strings.Contains(out, "expires 20") || !strings.Contains(out, "in 720h0m0s") {
		t.Errorf("auth user --expires: %q", out)
	}
	must("auth", "user", adir, "gateway", "gw2")
	if out, err := tc("auth", "user", adir, "gateway", "gw1"); err == nil || !strings.Contains(err.Error(), "tickctl auth revoke") {
		t.Errorf("auth user over gw1's valid credential: %v\n%s", err, out)
	}
	if _, err := tc("auth", "user", adir, "node", "n9", "--trusted"); err == nil || !strings.Contains(err.Error(), "--trusted is for gateways") {
		t.Errorf("auth user node --trusted: %v", err)
	}

	gw1 := connectWatched(t, url, auth.CredsFile(adir, "gw1"))
	out := must("auth", "revoke", adir, "gw1", "--nats", url)
	if !strings.Contains(out, "account PLAYERS: jwt updated") || !strings.Contains(out, "gw1 is refused from now on") {
		t.Errorf("auth revoke: %q", out)
	}
	gw1.wantClosed(t, nats.ErrAuthRevoked)
	wantRefused(t, url, auth.CredsFile(adir, "gw1"))

	// No server to tell: server.conf changes, the server does not, until auth push.
	gw2 := connectWatched(t, url, auth.CredsFile(adir, "gw2"))
	out, err = tc("auth", "revoke", adir, "gw2", "--nats", "nats://127.0.0.1:1", "--timeout", "2s")
	if err == nil || !strings.Contains(err.Error(), "still accept gw2") || !strings.Contains(err.Error(), "tickctl auth push") {
		t.Errorf("auth revoke without a server: %v\n%s", err, out)
	}
	if !gw2.IsConnected() {
		t.Fatal("gw2 lost its connection before the push")
	}
	if out := must("auth", "push", adir, "--nats", url); strings.Count(out, "jwt updated") != 2 {
		t.Errorf("auth push: %q", out)
	}
	gw2.wantClosed(t, nats.ErrAuthRevoked)
	wantRefused(t, url, auth.CredsFile(adir, "gw2"))

	var users []auth.UserInfo
	if err := json.Unmarshal([]byte(must("auth", "list", adir, "--json")), &users); err != nil {
		t.Fatal(err)
	}
	byName := map[string]auth.UserInfo{}
	for _, u := range users {
		byName[u.Name] = u
	}
	if u := byName["gw1"]; !u.Revoked || u.Expires.IsZero() || u.Account != auth.PlayersAccount {
		t.Errorf("auth list: gw1 %+v", u)
	}
	if u := byName["gateway"]; u.Revoked || !u.Trusted || u.Account != auth.PlayersAccount {
		t.Errorf("auth list: gateway %+v", u)
	}
	if u := byName["operator"]; u.Revoked || u.Account != auth.Account || u.Role != "operator" {
		t.Errorf("auth list: operator %+v", u)
	}
	if table := must("auth", "list", adir); !strings.Contains(table, "STATUS") || !strings.Contains(table, "revoked") {
		t.Errorf("auth list:\n%s", table)
	}
	// A revoked name may be issued again: a new key, accepted.
	must("auth", "user", adir, "gateway", "gw1")
	w := connectWatched(t, url, auth.CredsFile(adir, "gw1"))
	w.Close()

	// A directory made before sys.creds: server.conf only, and it says so.
	for _, f := range []string{"sys.nk", "sys.creds"} {
		if err := os.Remove(filepath.Join(adir, f)); err != nil {
			t.Fatal(err)
		}
	}
	must("auth", "user", adir, "gateway", "gw3")
	if _, err := tc("auth", "revoke", adir, "gw3", "--nats", url); err == nil || !strings.Contains(err.Error(), "new tickctl auth init") ||
		!strings.Contains(err.Error(), "until restarted") {
		t.Errorf("auth revoke in an old directory: %v", err)
	}
	if !strings.Contains(must("auth", "list", adir), "gw3") {
		t.Error("gw3 not listed")
	}
}

// TestParseExpiry: --expires takes a duration, whole days or an RFC 3339 time, in the future.
func TestParseExpiry(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"":                     {},
		"720h":                 now.Add(720 * time.Hour),
		"90d":                  now.AddDate(0, 0, 90),
		"2027-01-31T00:00:00Z": time.Date(2027, 1, 31, 0, 0, 0, 0, time.UTC),
	} {
		if got, err := parseExpiry(in, now); err != nil || !got.Equal(want) {
			t.Errorf("parseExpiry(%q): %v %v, want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"-1h", "0s", "2025-01-01T00:00:00Z", "soon", "1y", "2027-01-31"} {
		if got, err := parseExpiry(bad, now); err == nil {
			t.Errorf("parseExpiry(%q): %v, want an error", bad, got)
		}
	}
}

type watchedConn struct {
	*nats.Conn
	errs chan error
}

func connectWatched(t *testing.T, url, creds string) *watchedConn {
	t.Helper()
	w := &watchedConn{errs: make(chan error, 16)}
	var err error
	w.Conn, err = auth.Connect(url, creds, nil, nats.MaxReconnects(1), nats.ReconnectWait(50*time.Millisecond),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case w.errs <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatalf("connect as %s: %v", filepath.Base(creds), err)
	}
	t.Cleanup(w.Close)
	return w
}

// wantClosed waits until the server closes w with want.
func (w *watchedConn) wantClosed(t *testing.T, want error) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case err := <-w.errs:
			if errors.Is(err, want) {
				return
			}
		case <-deadline:
			t.Fatalf("not closed with %v within 5s (connected: %v)", want, w.IsConnected())
		}
	}
}

func wantRefused(t *testing.T, url, creds string) {
	t.Helper()
	nc, err := auth.Connect(url, creds, nil, nats.MaxReconnects(0))
	if err == nil {
		nc.Close()
		t.Fatalf("%s connected", filepath.Base(creds))
	}
	if !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("%s: %v; want an authorization violation", filepath.Base(creds), err)
	}
}
