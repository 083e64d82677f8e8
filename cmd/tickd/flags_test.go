package main

import (
	"flag"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestSyncFlag: --sync, DESIGN.md's --sync always, --sync=always and --sync=false, with the
// arguments around them left alone.
func TestSyncFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
		rest int
	}{
		{nil, false, 0},
		{[]string{"--sync"}, true, 0},
		{[]string{"--sync", "always"}, true, 0},
		{[]string{"-sync", "always", "--demo", "3"}, true, 0},
		{[]string{"--sync=always"}, true, 0},
		{[]string{"--sync=true"}, true, 0},
		{[]string{"--sync=false"}, false, 0},
		{[]string{"--sync", "--demo", "3"}, true, 0},
		{[]string{"--demo", "3", "--", "--sync", "always"}, false, 2},
		{[]string{"--sync", "extra"}, true, 1},
	} {
		fs := flag.NewFlagSet("tickd", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var on bool
		fs.Var((*syncFlag)(&on), "sync", "")
		fs.Int("demo", 0, "")
		if err := fs.Parse(syncArgs(c.args)); err != nil {
			t.Errorf("%q: %v", c.args, err)
			continue
		}
		if on != c.want || fs.NArg() != c.rest {
			t.Errorf("%q: sync %v, %d arguments left; want %v, %d", c.args, on, fs.NArg(), c.want, c.rest)
		}
	}
	fs := flag.NewFlagSet("tickd", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var on bool
	fs.Var((*syncFlag)(&on), "sync", "")
	if err := fs.Parse([]string{"--sync=sometimes"}); err == nil {
		t.Error("--sync=sometimes accepted")
	}
}

// TestShutdownTimeoutEnv: --shutdown-timeout defaults to $TICKFENCE_SHUTDOWN_TIMEOUT, else 5 s;
// a value that is not a duration is refused at start (run), not taken as the default.
func TestShutdownTimeoutEnv(t *testing.T) {
	for _, c := range []struct {
		env  string
		want time.Duration
	}{{"", 5 * time.Second}, {"3s", 3 * time.Second}, {"1m", time.Minute}, {"soon", -1}} {
		t.Setenv(shutdownTimeoutEnv, c.env)
		if got := envShutdownTimeout(); got != c.want {
			t.Errorf("$%s=%q: default %v, want %v", shutdownTimeoutEnv, c.env, got, c.want)
		}
	}
	t.Setenv(shutdownTimeoutEnv, "soon")
	o := options{nodeID: "n1", shards: 1, partitions: 1, replicas: 1, checkpointEvery: 1, maxCatchUp: time.Second,
		lease: 2 * time.Second, demoPlayers: 1, demoRate: 1, dataHistory: 1, writeStrategy: "auto", shutdownTimeout: envShutdownTimeout()}
	if err := run(o, shapeSet{}, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "--shutdown-timeout") {
		t.Fatalf("run with $%s=soon: %v; want --shutdown-timeout refused", shutdownTimeoutEnv, err)
	}
}
