package main_test

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/tickfence/tickfence/internal/proc"
)

// TestHelpAndUsageErrors runs the binary: tickd's and tickd server's help on stdout with exit 0;
// a bad flag or argument one line on stderr naming the help, exit 2; --sync always (DESIGN.md's
// spelling) is one flag, not a flag and an argument.
func TestHelpAndUsageErrors(t *testing.T) {
	tickd, err := proc.Build(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, string, int) {
		cmd := exec.Command(tickd, args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return stdout.String(), stderr.String(), ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return stdout.String(), stderr.String(), 0
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--help"}, []string{"tickd runs a tickfence node.", "-node-id string", "-sync", "also spelled --sync always"}},
		{[]string{"-h"}, []string{"tickd runs a tickfence node."}},
		{[]string{"server", "--help"}, []string{"tickd server runs only the embedded NATS JetStream server", "-sync"}},
		{[]string{"server", "-h"}, []string{"Usage: tickd server [flags]"}},
	} {
		stdout, stderr, code := run(c.args...)
		if code != 0 || stderr != "" {
			t.Errorf("tickd %q: exit %d, stderr %q", c.args, code, stderr)
		}
		for _, w := range c.want {
			if !strings.Contains(stdout, w) {
				t.Errorf("tickd %q: stdout lacks %q", c.args, w)
			}
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--nope"}, "tickd: flag provided but not defined: -nope (see tickd --help)"},
		{[]string{"--demo", "x"}, `tickd: invalid value "x" for flag -demo`},
		{[]string{"--sync", "always", "extra"}, `tickd: unexpected argument "extra" (see tickd --help)`},
		{[]string{"server", "--sync=sometimes"}, "tickd server: invalid boolean value \"sometimes\" for -sync"},
		{[]string{"server", "--sync", "always", "extra"}, "unexpected argument"},
	} {
		stdout, stderr, code := run(c.args...)
		if code != 2 || stdout != "" || !strings.Contains(stderr, c.want) {
			t.Errorf("tickd %q: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.args, code, stdout, stderr, c.want)
		}
		if strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("tickd %q: more than one line on stderr:\n%s", c.args, stderr)
		}
	}
}
