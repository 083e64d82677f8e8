package main_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tickfence/tickfence/internal/proc"
)

// TestAuthProcesses runs the processes as an operator would deploy them: tickctl auth init --tls,
// a tickd server --auth with TLS, a node before tickctl cluster init refused naming it, cluster
// init on admin.creds, two tickd nodes on node.creds (one through NATS_CREDS), tickctl status and
// drain on operator.creds, status on observer.creds (all verifying the server against the dev CA),
// tickctl without credentials refused, and with another CA refused naming the certificate. A
// tickd server on a non-loopback address without --auth refuses to start and says why.
func TestAuthProcesses(t *testing.T) {
	dir := t.TempDir()
	tickd, err := proc.Build(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	tickctl := filepath.Join(dir, "tickctl")
	if out, err := exec.Command("go", "build", "-o", tickctl, "../tickctl").CombinedOutput(); err != nil {
		t.Fatalf("build tickctl: %v\n%s", err, out)
	}
	out, err := exec.Command(tickd, "server", "--listen", "0.0.0.0:0", "--data", filepath.Join(dir, "open")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "without authentication") || !strings.Contains(string(out), "--insecure") {
		t.Fatalf("tickd server on 0.0.0.0 without --auth: %v\n%s", err, out)
	}
	adir := filepath.Join(dir, "auth")
	if out, err := exec.Command(tickctl, "auth", "init", adir, "--tls").CombinedOutput(); err != nil {
		t.Fatalf("tickctl auth init: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := proc.Start(tickd, "server", nil, "server", "--listen", "127.0.0.1:0", "--data", filepath.Join(dir, "nats"), "--auth", adir, "--log-json",
		"--tls-cert", filepath.Join(adir, "server.pem"), "--tls-key", filepath.Join(adir, "server-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Kill)
	_, ready, err := srv.WaitLog(ctx, 0, proc.Msg("NATS JetStream server ready"))
	if err != nil {
		t.Fatal(err)
	}
	url, _ := ready["url"].(string)
	node := func(id string, alone bool, env []string, args ...string) *proc.Proc {
		p, err := proc.Start(tickd, id, env, append([]string{"--nats", url, "--node-id", id, "--shards", "8", "--metrics", "", "--log-json",
			"--summary-every", "1s", "--tls-ca", filepath.Join(adir, "ca.pem")}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Kill)
		if _, m, err := p.WaitLog(ctx, 0, func(m map[string]any) bool {
			return m["level"] == "ERROR" || m["msg"] == "summary" && (!alone || m["instances"] == float64(4))
		}); err != nil || m["level"] == "ERROR" {
			t.Fatalf("node %s: %v %v", id, m, err)
		}
		return p
	}
	tc := func(creds string, args ...string) (string, error) {
		a := append(args, "--nats", url, "--tls-ca", filepath.Join(adir, "ca.pem"))
		if creds != "" {
			a = append(a, "--creds", filepath.Join(adir, creds+".creds"))
		}
		out, err := exec.CommandContext(ctx, tickctl, a...).CombinedOutput()
		return string(out), err
	}
	// Nodes make no storage (DESIGN 9): before cluster init a node stops, saying what to run.
	out, err = exec.CommandContext(ctx, tickd, "--nats", url, "--node-id", "n0", "--shards", "8", "--metrics", "", "--demo", "0",
		"--tls-ca", filepath.Join(adir, "ca.pem"), "--creds", filepath.Join(adir, "node.creds")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "cluster init --shards 8 --partitions 1 --replicas 1") {
		t.Fatalf("a node before cluster init: %v\n%s", err, out)
	}
	if out, err := tc("admin", "cluster", "init", "--shards", "8"); err != nil || !strings.Contains(out, "created  cluster record") {
		t.Fatalf("tickctl cluster init as admin: %v\n%s", err, out)
	}
	node("n1", true, nil, "--creds", filepath.Join(adir, "node.creds"), "--demo", "4")
	node("n2", false, []string{"NATS_CREDS=" + filepath.Join(adir, "node.creds")}, "--demo", "4") // the same demo dungeons, players of its own
	for _, c := range [][]string{{"operator", "status"}, {"operator", "drain", "n2"}, {"operator", "undrain", "n2"}, {"observer", "status"}, {"observer", "instances"}} {
		if out, err := tc(c[0], c[1:]...); err != nil {
			t.Errorf("tickctl %s as %s: %v\n%s", c[1:], c[0], err, out)
		}
	}
	if out, err := tc("observer", "drain", "n2"); err == nil || !strings.Contains(strings.ToLower(out), "permission") {
		t.Errorf("tickctl drain as observer: %v\n%s", err, out)
	}
	if out, err := tc("", "status"); err == nil || !strings.Contains(strings.ToLower(out), "authorization") {
		t.Errorf("tickctl status without credentials: %v\n%s", err, out)
	}
	other := filepath.Join(dir, "other")
	if out, err := exec.Command(tickctl, "auth", "init", other, "--tls").CombinedOutput(); err != nil {
		t.Fatalf("tickctl auth init: %v\n%s", err, out)
	}
	out, err = exec.CommandContext(ctx, tickctl, "status", "--nats", url, "--creds", filepath.Join(adir, "operator.creds"),
		"--tls-ca", filepath.Join(other, "ca.pem")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "certificate signed by unknown authority") {
		t.Errorf("tickctl status with another CA: %v\n%s", err, out)
	}

	// A server that requires client certificates (--tls-verify): a node and tickctl presenting
	// one from tickctl auth cert get in; tickctl without one is refused and told what to give.
	for _, name := range []string{"n3", "op", "admin"} {
		if out, err := exec.Command(tickctl, "auth", "cert", adir, name).CombinedOutput(); err != nil {
			t.Fatalf("tickctl auth cert %s: %v\n%s", name, err, out)
		}
	}
	cert := func(name string) []string {
		return []string{"--tls-cert", filepath.Join(adir, name+".pem"), "--tls-key", filepath.Join(adir, name+"-key.pem")}
	}
	vsrv, err := proc.Start(tickd, "server-verify", nil, "server", "--listen", "127.0.0.1:0", "--data", filepath.Join(dir, "nats-verify"), "--auth", adir, "--log-json",
		"--tls-cert", filepath.Join(adir, "server.pem"), "--tls-key", filepath.Join(adir, "server-key.pem"), "--tls-ca", filepath.Join(adir, "ca.pem"), "--tls-verify")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(vsrv.Kill)
	_, ready, err = vsrv.WaitLog(ctx, 0, proc.Msg("NATS JetStream server ready"))
	if err != nil {
		t.Fatal(err)
	}
	url, _ = ready["url"].(string)
	if out, err := tc("admin", append([]string{"cluster", "init", "--shards", "8"}, cert("admin")...)...); err != nil {
		t.Fatalf("tickctl cluster init with a client certificate: %v\n%s", err, out)
	}
	node("n3", true, nil, append([]string{"--creds", filepath.Join(adir, "node.creds"), "--demo", "4"}, cert("n3")...)...)
	if out, err := tc("operator", append([]string{"status"}, cert("op")...)...); err != nil {
		t.Errorf("tickctl status with a client certificate: %v\n%s", err, out)
	}
	if out, err := tc("operator", "status"); err == nil || !strings.Contains(out, "--tls-cert") {
		t.Errorf("tickctl status without a client certificate: %v\n%s; want a refusal saying to give --tls-cert", err, out)
	}
}
