package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/tickfence/tickfence/internal/natsserver"
)

// TestProgressNotOnATerminal (issue 36, item 3): progress meant for a terminal (a line redrawn
// with \r and cleared with \x1b[K) is not written when stderr is not one: a backup and a restore
// whose output is captured, as a script or a CI log captures it, carry no terminal control.
func TestProgressNotOnATerminal(t *testing.T) {
	dir := t.TempDir()
	srv, err := natsserver.Start(natsserver.Config{DataDir: filepath.Join(dir, "nats"), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	url := srv.ClientURL()
	file := filepath.Join(dir, "backup")
	for _, args := range [][]string{
		{"cluster", "init", "--shards", "8"},
		{"backup", file},
		{"restore", file, "--yes"},
		{"rebalance"},
	} {
		stdout, stderr, code := runBin(t, nil, append(args, "--nats", url)...)
		if code != 0 {
			t.Fatalf("tickctl %q: exit %d\n%s%s", args, code, stdout, stderr)
		}
		for _, out := range []string{stdout, stderr} {
			if strings.ContainsAny(out, "\r\x1b") {
				t.Errorf("tickctl %q wrote terminal control into captured output: %q", args, out)
			}
		}
	}
}
