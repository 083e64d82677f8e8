package main

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// runBin runs the tickbench binary bin and returns its stdout, stderr and exit status.
func runBin(t *testing.T, bin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return stdout.String(), stderr.String(), ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), 0
}

// helpFlag matches a flag's first line in the flag package's listing: "  -name type".
var helpFlag = regexp.MustCompile(`^  -([a-z-]+)(?: (\S+))?$`)

// flagsOf parses a scenario's --help into its flags: name → type and usage.
func flagsOf(help string) map[string]string {
	fl := map[string]string{}
	name := ""
	for _, l := range strings.Split(help, "\n") {
		if m := helpFlag.FindStringSubmatch(l); m != nil {
			name = m[1]
			fl[name] = m[2] + ":"
			continue
		}
		if name != "" && strings.HasPrefix(l, "    \t") {
			fl[name] += " " + strings.TrimSpace(l)
		}
	}
	return fl
}

// TestHelpAndUsage runs the built binary: help on stdout with exit 0 (tickbench --help, -h,
// help, SCENARIO --help, help SCENARIO), each naming tickbench SCENARIO; usage errors exit 2 on
// stderr; and a flag shared by several scenarios means the same in each (the audit of issue 15.5,
// kept).
func TestHelpAndUsage(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "tickbench")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build tickbench: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		stdout, stderr, code := runBin(t, bin, args...)
		if code != 0 || stderr != "" || !strings.HasPrefix(stdout, "usage: tickbench SCENARIO [flags]") {
			t.Errorf("tickbench %q: exit %d, stderr %q, stdout %.80q", args, code, stderr, stdout)
		}
	}
	if stdout, stderr, code := runBin(t, bin); code != 2 || stdout != "" || !strings.Contains(stderr, "usage: tickbench SCENARIO") {
		t.Errorf("tickbench: exit %d, stdout %q, stderr %.80q; want the usage on stderr, exit 2", code, stdout, stderr)
	}
	var names []string
	for n := range scenarios {
		names = append(names, n)
	}
	sort.Strings(names)
	flags := map[string]map[string]string{} // scenario → flag → type and usage
	for _, n := range append(names, "cluster compare") {
		for _, args := range [][]string{append(strings.Fields(n), "--help"), append(strings.Fields(n), "-h"), {"help", n}} {
			if n == "cluster compare" && args[0] == "help" {
				continue
			}
			stdout, stderr, code := runBin(t, bin, args...)
			if code != 0 || stderr != "" || !strings.HasPrefix(stdout, "usage: tickbench "+n+" ") {
				t.Errorf("tickbench %q: exit %d, stderr %q, stdout %.80q", args, code, stderr, stdout)
			}
			flags[n] = flagsOf(stdout)
		}
		if len(flags[n]) == 0 {
			t.Errorf("tickbench %s --help lists no flags", n)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"frob"}, `unknown scenario "frob" (see tickbench --help)`},
		{[]string{"ticks", "--rate", "20"}, "tickbench ticks: unknown flag --rate; it is --tick-rate"},
		{[]string{"overload", "--timeout", "1s"}, "tickbench overload: unknown flag --timeout; it is --give-up"},
		{[]string{"cluster", "n2"}, `tickbench cluster: unexpected argument "n2"; a node for --kill-node`},
		{[]string{"frames", "--nope"}, "tickbench frames: unknown flag --nope (see tickbench frames --help)"},
		{[]string{"chaos", "--seed", "x"}, `tickbench chaos: invalid value "x" for flag -seed`},
		{[]string{"writes", "extra"}, `tickbench writes: unexpected argument "extra"`},
		{[]string{"cluster", "compare"}, "no report given"},
	} {
		stdout, stderr, code := runBin(t, bin, c.args...)
		if code != 2 || stdout != "" || !strings.Contains(stderr, c.want) {
			t.Errorf("tickbench %q: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.args, code, stdout, stderr, c.want)
		}
	}
	// The same name, the same meaning: its type and what its usage says.
	meaning := map[string]*regexp.Regexp{
		"rate":             regexp.MustCompile(`commands per second`),
		"tick-rate":        regexp.MustCompile(`Hz`),
		"instances":        regexp.MustCompile(`instances|dungeons`),
		"shards":           regexp.MustCompile(`^int: shards`),
		"give-up":          regexp.MustCompile(`^duration: .*no answer after this long`),
		"duration":         regexp.MustCompile(`^duration: (measurement window|how long)`),
		"warmup":           regexp.MustCompile(`^duration: `),
		"json":             regexp.MustCompile(`^string: write the figures as JSON to this file`),
		"plot":             regexp.MustCompile(`^string: write an HTML page`),
		"tickd":            regexp.MustCompile(`^string: use this tickd binary instead of building one`),
		"seed":             regexp.MustCompile(`^uint: seed`),
		"nodes":            regexp.MustCompile(`^int: tickd node processes`),
		"lease":            regexp.MustCompile(`^duration: node lease TTL`),
		"checkpoint-every": regexp.MustCompile(`^int: .*checkpoint-every`),
		"sync":             regexp.MustCompile(`fsync every write`),
	}
	seen := map[string][]string{}
	for n, fl := range flags {
		for name, u := range fl {
			seen[name] = append(seen[name], n)
			if re := meaning[name]; re != nil && !re.MatchString(u) {
				t.Errorf("tickbench %s --%s: %q, want it to match %q (what --%s means everywhere)", n, name, u, re, name)
			}
		}
	}
	for name, in := range seen {
		if len(in) > 1 && meaning[name] == nil {
			t.Errorf("--%s is a flag of %v: add what it means to this test", name, in)
		}
	}
	t.Logf("flags shared by scenarios: rate %v, instances %v, shards %v, give-up %v", seen["rate"], seen["instances"], seen["shards"], seen["give-up"])
	if len(seen["rate"]) < 2 || len(seen["instances"]) < 4 || len(seen["shards"]) < 3 {
		t.Errorf("shared flags: --rate in %v, --instances in %v, --shards in %v", seen["rate"], seen["instances"], seen["shards"])
	}
}
