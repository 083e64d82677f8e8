package auth_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/auth"
	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/shard/natscmd"
)

// watched is a client connection and the errors its server sent it.
type watched struct {
	*nats.Conn
	errs chan error
}

// dial connects as the user of creds, keeping the errors the server sends; one reconnect attempt.
func dial(url, creds string) (*watched, error) {
	opts, err := auth.ClientOptions(creds, nil)
	if err != nil {
		return nil, err
	}
	w := &watched{errs: make(chan error, 16)}
	opts = append(opts, nats.MaxReconnects(1), nats.ReconnectWait(50*time.Millisecond),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case w.errs <- err:
			default:
			}
		}))
	w.Conn, err = nats.Connect(url, opts...)
	return w, err
}

// closedWith waits until the server tells w want and w is no longer connected.
func (w *watched) closedWith(t *testing.T, want error, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case err := <-w.errs:
			if !errors.Is(err, want) {
				continue
			}
			for end := time.Now().Add(within); w.IsConnected() && time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			}
			if w.IsConnected() {
				t.Fatalf("told %v, but still connected", want)
			}
			return
		case <-deadline:
			t.Fatalf("the server did not close the connection with %v within %v (connected: %v)", want, within, w.IsConnected())
		}
	}
}

// refusedConnect wants a new connection as creds refused by the server.
func refusedConnect(t *testing.T, url, creds string) {
	t.Helper()
	// A server applies a pushed account JWT a moment after it answers the push (seen once in a
	// full -race run on a loaded machine): refused within 5 s, or the revocation did not reach it.
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var w *watched
		if w, err = dial(url, creds); err != nil {
			break
		}
		w.Close()
		if time.Now().After(deadline) {
			t.Fatalf("%s connected, 5 s after the revocation", filepath.Base(creds))
		}
	}
	if !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(err.Error(), "uthorization") {
		t.Fatalf("%s: %v; want an authorization violation", filepath.Base(creds), err)
	}
}

// push revokes name in dir and pushes its account's JWT as sys.creds through url, wanting every
// server (servers of them) to apply it.
func revokeAndPush(t *testing.T, dir, url, name string, servers int) auth.Revocation {
	t.Helper()
	r, err := auth.Revoke(dir, name)
	if err != nil {
		t.Fatal(err)
	}
	sysCreds, err := auth.SystemCreds(dir)
	if err != nil {
		t.Fatal(err)
	}
	sys, err := auth.Connect(url, sysCreds, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	replies, err := auth.Push(ctx, sys, r.AccountJWT)
	if err != nil {
		t.Fatal(err)
	}
	if len(replies) != servers {
		t.Fatalf("push of %s: %d answers, want %d: %+v", r.Account, len(replies), servers, replies)
	}
	for _, p := range replies {
		if !p.Applied || p.Account != r.Account {
			t.Fatalf("push of %s: %+v", r.Account, p)
		}
	}
	return r
}

// TestRevokeClosesAndRefuses: tickctl auth revoke's library path against a server enforcing a
// fresh directory, with node n1 serving d1. A revoked gateway (PLAYERS) and a revoked operator
// (TICKFENCE) each have their open connection closed by the server ("authentication revoked") and
// cannot connect again; no server restarts. Everyone else keeps working: the gateway of Init still
// gets d1's answers through the command service after each account changed, and the revocations
// show in List. Revoking again changes nothing.
func TestRevokeClosesAndRefuses(t *testing.T) {
	e := newEnv(t)
	gw1File, err := auth.NewUser(e.dir, auth.Gateway, "gw1")
	if err != nil {
		t.Fatal(err)
	}
	op2File, err := auth.NewUser(e.dir, auth.Operator, "op2")
	if err != nil {
		t.Fatal(err)
	}
	gw1, err := dial(e.url, gw1File)
	if err != nil {
		t.Fatal(err)
	}
	defer gw1.Close()
	op2, err := dial(e.url, op2File)
	if err != nil {
		t.Fatal(err)
	}
	defer op2.Close()
	gw, _ := e.connect(t, "gateway")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	command := func(what string) {
		t.Helper()
		if r, err := natscmd.NewClient(gw, shards).SendMap(ctx, "d1", fmt.Sprintf("c-%d", time.Now().UnixNano()),
			map[string]any{"type": "status"}); err != nil || !r.OK {
			t.Fatalf("%s: the gateway's command: %+v %v", what, r, err)
		}
	}
	command("before")

	r := revokeAndPush(t, e.dir, e.url, "gw1", 1)
	if r.Account != auth.PlayersAccount || r.Already {
		t.Fatalf("revocation: %+v", r)
	}
	gw1.closedWith(t, nats.ErrAuthRevoked, 5*time.Second)
	refusedConnect(t, e.url, gw1File)
	if !op2.IsConnected() {
		t.Fatal("op2 lost its connection when gw1 was revoked")
	}
	command("after gw1's revocation")

	r = revokeAndPush(t, e.dir, e.url, "op2", 1)
	if r.Account != auth.Account {
		t.Fatalf("revocation: %+v", r)
	}
	op2.closedWith(t, nats.ErrAuthRevoked, 5*time.Second)
	refusedConnect(t, e.url, op2File)
	command("after op2's revocation")

	users, err := auth.List(e.dir)
	if err != nil {
		t.Fatal(err)
	}
	revoked := map[string]bool{}
	for _, u := range users {
		revoked[u.Name] = u.Revoked
	}
	for name, want := range map[string]bool{"gw1": true, "op2": true, "gateway": false, "node": false, "operator": false, auth.SystemUser: false} {
		if got, ok := revoked[name]; !ok || got != want {
			t.Errorf("List: %s revoked %v (listed: %v), want %v", name, got, ok, want)
		}
	}
	again, err := auth.Revoke(e.dir, "gw1")
	if err != nil || !again.Already {
		t.Errorf("revoking gw1 again: %+v %v; want Already", again, err)
	}
	if _, err := auth.Revoke(e.dir, "nobody"); err == nil || !strings.Contains(err.Error(), "no credential nobody") {
		t.Errorf("revoking an unknown user: %v", err)
	}
}

// TestRevocationHoldsWhereNotLoadedAndAcrossRestart: a server that has never loaded the players'
// account (no gateway connected yet) still stores the pushed revocation, and refuses the revoked
// gateway when it first connects; restarted on its data directory with the server.conf of before
// the revocation (an old copy), it still refuses it: the resolver keeps the newer JWT.
func TestRevocationHoldsWhereNotLoadedAndAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	adir := filepath.Join(dir, "auth")
	if _, err := auth.Init(adir); err != nil {
		t.Fatal(err)
	}
	gw1File, err := auth.NewUser(adir, auth.Gateway, "gw1")
	if err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(filepath.Join(adir, auth.ServerConf))
	if err != nil {
		t.Fatal(err)
	}
	cfg := natsserver.Config{DataDir: filepath.Join(dir, "nats"), Listen: "127.0.0.1:0", AuthDir: adir}
	srv, err := natsserver.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	revokeAndPush(t, adir, srv.ClientURL(), "gw1", 1)
	refusedConnect(t, srv.ClientURL(), gw1File)
	srv.Stop()

	if err := os.WriteFile(filepath.Join(adir, auth.ServerConf), before, 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err = natsserver.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	refusedConnect(t, srv.ClientURL(), gw1File)
	w, err := dial(srv.ClientURL(), auth.CredsFile(adir, "gateway"))
	if err != nil {
		t.Fatalf("the gateway after the restart: %v", err)
	}
	w.Close()
}

// TestRevokeReachesEveryServer: two clustered servers; the revoked gateway is connected to the
// second, the push goes through the first; both answer, the second closes the connection, and
// neither accepts the credential again.
func TestRevokeReachesEveryServer(t *testing.T) {
	dir := t.TempDir()
	adir := filepath.Join(dir, "auth")
	if _, err := auth.Init(adir); err != nil {
		t.Fatal(err)
	}
	gw1File, err := auth.NewUser(adir, auth.Gateway, "gw1")
	if err != nil {
		t.Fatal(err)
	}
	routes := []string{"nats-route://" + freeAddr(t), "nats-route://" + freeAddr(t)}
	var srvs []*natsserver.Server
	for i := range routes {
		s, err := natsserver.Start(natsserver.Config{Name: fmt.Sprintf("s%d", i), DataDir: filepath.Join(dir, fmt.Sprint(i)),
			Listen: "127.0.0.1:0", AuthDir: adir, Cluster: strings.TrimPrefix(routes[i], "nats-route://"), Routes: routes})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Stop()
		srvs = append(srvs, s)
	}
	for deadline := time.Now().Add(10 * time.Second); srvs[0].NumRoutes() == 0 || srvs[1].NumRoutes() == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no route between the servers")
		}
	}
	gw1, err := dial(srvs[1].ClientURL(), gw1File)
	if err != nil {
		t.Fatal(err)
	}
	defer gw1.Close()
	revokeAndPush(t, adir, srvs[0].ClientURL(), "gw1", 2)
	gw1.closedWith(t, nats.ErrAuthRevoked, 5*time.Second)
	for _, s := range srvs {
		refusedConnect(t, s.ClientURL(), gw1File)
	}
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestCredentialExpires: a credential made to expire in 2 s connects, is closed by the server
// when it expires ("authentication expired"), and cannot connect again. The server reads its own
// clock (a JWT's expiry is whole seconds), so this waits for real: 2-3 s.
func TestCredentialExpires(t *testing.T) {
	dir := t.TempDir()
	adir := filepath.Join(dir, "auth")
	if _, err := auth.Init(adir); err != nil {
		t.Fatal(err)
	}
	srv, err := natsserver.Start(natsserver.Config{DataDir: filepath.Join(dir, "nats"), Listen: "127.0.0.1:0", AuthDir: adir})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	expires := time.Now().Add(2 * time.Second)
	f, err := auth.NewUserWith(adir, auth.Gateway, "brief", auth.UserOptions{Expires: expires})
	if err != nil {
		t.Fatal(err)
	}
	if u, err := auth.ReadCreds(f); err != nil || u.Expires.Unix() != expires.Unix() {
		t.Fatalf("ReadCreds: %+v %v; want expiry %v", u, err, expires)
	}
	w, err := dial(srv.ClientURL(), f)
	if err != nil {
		t.Fatalf("before its expiry: %v", err)
	}
	defer w.Close()
	w.closedWith(t, nats.ErrAuthExpired, 5*time.Second)
	// The server closes the connection at the expiry, but a JWT is valid through its last second
	// (exp is whole seconds, expired when now > exp): a new connection is refused after it.
	time.Sleep(time.Until(time.Unix(expires.Unix()+1, 0)))
	refusedConnect(t, srv.ClientURL(), f)
	if _, err := auth.NewUserWith(adir, auth.Gateway, "late", auth.UserOptions{Expires: time.Now().Add(-time.Second)}); err == nil {
		t.Error("a credential expiring in the past was made")
	}
}

// TestSystemUserIsNarrow: sys.creds may push account JWTs and ping the servers, nothing else of
// the system account (it cannot, say, kick a client or read the servers' events); no other user
// may be named sys; and an auth directory without it (made before revocations could be pushed)
// is named as such.
func TestSystemUserIsNarrow(t *testing.T) {
	dir := t.TempDir()
	adir := filepath.Join(dir, "auth")
	if _, err := auth.Init(adir); err != nil {
		t.Fatal(err)
	}
	srv, err := natsserver.Start(natsserver.Config{DataDir: filepath.Join(dir, "nats"), Listen: "127.0.0.1:0", AuthDir: adir})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	sysCreds, err := auth.SystemCreds(adir)
	if err != nil {
		t.Fatal(err)
	}
	violations := make(chan error, 8)
	opts, err := auth.ClientOptions(sysCreds, nil)
	if err != nil {
		t.Fatal(err)
	}
	sys, err := nats.Connect(srv.ClientURL(), append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		violations <- err
	}))...)
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	if _, err := sys.Request("$SYS.REQ.SERVER.PING.CONNZ", nil, time.Second); err == nil {
		t.Error("sys.creds read the server's connections")
	}
	if _, err := sys.SubscribeSync("$SYS.ACCOUNT.>"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-violations:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Errorf("sys.creds: %v; want permission violations", err)
		}
	case <-time.After(2 * time.Second):
		t.Error("sys.creds subscribed to the servers' events")
	}
	if _, err := auth.NewUser(adir, auth.Operator, auth.SystemUser); err == nil {
		t.Error("a user named sys (it would replace sys.creds) was made")
	}
	for _, f := range []string{"sys.nk", "sys.creds"} {
		if err := os.Remove(filepath.Join(adir, f)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := auth.SystemCreds(adir); !errors.Is(err, auth.ErrNoSystemUser) {
		t.Errorf("an old directory: %v", err)
	}
}
