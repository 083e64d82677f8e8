package main_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tickfence/tickfence/internal/proc"
)

// TestDefaultNodeIDOfAWeirdHostname runs tickd without --node-id on a machine whose host name has
// dots, capitals and an underscore (a UTS namespace of its own, by unshare): it starts, joins as
// the ID made of that name, and stops cleanly. Before, it refused its own default (--node-id:
// invalid ID). TestDefaultNodeID covers more names; this is the binary's use of it.
func TestDefaultNodeIDOfAWeirdHostname(t *testing.T) {
	const host, want = "Tick_Node.Example.COM", "tick_node"
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare(1) here to give tickd a host name of its own; TestDefaultNodeID covers the derivation")
	}
	// A new user namespace (mapped to root) and UTS namespace; the host name is set inside, then
	// tickd is exec'ed in place (same pid, so signals reach it).
	wrap := []string{"-Uru", "sh", "-c", `printf %s "$H" > /proc/sys/kernel/hostname && exec "$0" "$@"`}
	probe := exec.Command(unshare, append(wrap, "hostname")...)
	probe.Env = append(probe.Environ(), "H="+host)
	out, err := probe.CombinedOutput()
	if err != nil {
		t.Skipf("unshare cannot make a UTS namespace here (%v: %s); TestDefaultNodeID covers the derivation", err, out)
	}
	if strings.TrimSpace(string(out)) != host {
		t.Fatalf("host name in the namespace: %q, want %q", out, host)
	}
	dir := t.TempDir()
	tickd, err := proc.Build(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := proc.Start(unshare, "tickd", []string{"H=" + host}, append(wrap, tickd, "--data", filepath.Join(dir, "data"),
		"--demo", "2", "--shards", "4", "--metrics", "127.0.0.1:0", "--log-json")...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	if err := proc.WaitJoined(ctx, p); err != nil {
		t.Fatalf("tickd on host %q did not join: %v\n%v", host, err, p.Lines(0))
	}
	if _, m := p.Find(0, proc.Msg("node joined")); m["node"] != want {
		t.Errorf("tickd on host %q joined as %v, want %q", host, m["node"], want)
	}
	if err := p.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Exited():
		if err := p.ExitErr(); err != nil {
			t.Errorf("tickd exit: %v\n%v", err, p.Lines(0))
		}
	case <-ctx.Done():
		t.Fatal("tickd did not exit after SIGINT")
	}
}
