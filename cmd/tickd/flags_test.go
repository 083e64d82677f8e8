package main

import (
	"flag"
	"io"
	"testing"
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
