package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// tickctlBin builds tickctl into the test's temporary directory (once per test).
func tickctlBin(t *testing.T) string {
	t.Helper()
	bins.Lock()
	defer bins.Unlock()
	if p, ok := bins.m[t]; ok {
		return p
	}
	p := filepath.Join(t.TempDir(), "tickctl")
	if out, err := exec.Command("go", "build", "-o", p, ".").CombinedOutput(); err != nil {
		t.Fatalf("build tickctl: %v\n%s", err, out)
	}
	bins.m[t] = p
	return p
}

var bins = struct {
	sync.Mutex
	m map[*testing.T]string
}{m: map[*testing.T]string{}}

// runBin runs the binary and returns its stdout, stderr and exit status.
func runBin(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(tickctlBin(t), args...)
	cmd.Env = append(cmd.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), code
}

// listener counts the connections made to it: a command line that must not connect points there.
func listener(t *testing.T) (string, *atomic.Int32) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var n atomic.Int32
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
	return "nats://" + l.Addr().String(), &n
}

// TestHelpOnStdout: every way of asking for help prints it on stdout, nothing on stderr, exit 0.
func TestHelpOnStdout(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"tickctl inspects", "tickctl drain <node>", "--nats URL", "tickctl completion bash|zsh"}},
		{[]string{"--help"}, []string{"tickctl inspects", "tickctl instance watch <id>"}},
		{[]string{"-h"}, []string{"tickctl inspects"}},
		{[]string{"help"}, []string{"tickctl inspects"}},
		{[]string{"drain", "--help"}, []string{"Usage: tickctl drain <node>", "--nats", "--timeout of tickctl drain: default 2m"}},
		{[]string{"help", "drain"}, []string{"Usage: tickctl drain <node>"}},
		{[]string{"drain", "-h", "n1", "--nats", "nats://127.0.0.1:1"}, []string{"Usage: tickctl drain <node>"}},
		{[]string{"rebalance", "--help"}, []string{"Usage: tickctl rebalance", "--dry-run", "--max-moves N", "--tolerance F"}},
		{[]string{"help", "instance", "send"}, []string{"Usage: tickctl instance send <id> '<json command>'", "--request-id ID"}},
		{[]string{"instance", "--help"}, []string{"tickctl instance get <id>", "tickctl instance watch <id>"}},
		{[]string{"auth", "init", "--help"}, []string{"Usage: tickctl auth init <dir>", "--tls", "--hosts HOSTS"}},
		{[]string{"completion", "--help"}, []string{"source <(tickctl completion bash)"}},
	} {
		stdout, stderr, code := runBin(t, nil, c.args...)
		if code != 0 || stderr != "" {
			t.Errorf("tickctl %q: exit %d, stderr %q", c.args, code, stderr)
		}
		for _, w := range c.want {
			if !strings.Contains(stdout, w) {
				t.Errorf("tickctl %q: stdout lacks %q:\n%s", c.args, w, stdout)
			}
		}
	}
	// A verb's help lists its own flags and the global ones, not other verbs'.
	stdout, _, _ := runBin(t, nil, "drain", "--help")
	for _, foreign := range []string{"--dry-run", "--kind", "--yes", "--count"} {
		if strings.Contains(stdout, foreign) {
			t.Errorf("tickctl drain --help lists %s:\n%s", foreign, stdout)
		}
	}
}

// TestUsageErrorsBeforeConnecting: a wrong verb, a foreign flag or a bad argument is refused with
// exit 2, a message about it and a hint, and the NATS server given is never contacted.
func TestUsageErrorsBeforeConnecting(t *testing.T) {
	url, conns := listener(t)
	closed, err := net.Listen("tcp", "127.0.0.1:0") // a port nothing listens on any more
	if err != nil {
		t.Fatal(err)
	}
	closedURL := "nats://" + closed.Addr().String()
	closed.Close()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"frobnicate"}, `unknown command "frobnicate" (see tickctl --help)`},
		{[]string{"stauts"}, `did you mean "status"?`},
		{[]string{"instance"}, "instance needs one of: get, create, end, reload, send, watch (see tickctl instance --help)"},
		{[]string{"instance", "frob", "d1"}, `unknown command "instance frob"`},
		{[]string{"drain", "n1", "--dry-run"}, "drain does not take --dry-run (a flag of: rebalance, gc) (see tickctl drain --help)"},
		{[]string{"--kind", "dungeon", "instance", "send", "d1", "{}"}, "instance send does not take --kind"},
		{[]string{"status", "--nope"}, "unknown flag --nope (see tickctl status --help)"},
		{[]string{"--nope", "status"}, "unknown flag --nope (see tickctl --help)"},
		{[]string{"drain"}, "drain needs <node> (see tickctl drain --help)"},
		{[]string{"drain", "n1", "n2"}, `drain takes <node>, not "n1 n2"`},
		{[]string{"status", "extra"}, `status takes no arguments, not "extra"`},
		{[]string{"move", "x", "n1"}, `shard "x": want a shard number`},
		{[]string{"weight", "n1", "0"}, `weight "0": want a number in (0, 1000]`},
		{[]string{"instance", "get", "bad id!"}, "only A-Z a-z 0-9 _ - allowed"},
		{[]string{"instance", "create", "d1"}, "instance create needs --kind"},
		{[]string{"instance", "send", "d1", "not json"}, "command is not valid JSON"},
		{[]string{"instance", "watch", "d1", "--topic", "hud.ada"}, `--topic: invalid frame: topic "hud.ada"`},
		{[]string{"instance", "watch", "d1", "--player", "a.b"}, `--player "a.b": want 1-64 of A-Z a-z 0-9 _ -`},
		{[]string{"rebalance", "--max-moves", "0"}, "--max-moves must be at least 1"},
		{[]string{"restore", "--undo", "file"}, "restore --undo takes no file"},
		{[]string{"--timeout", "x", "status"}, `invalid value "x" for flag -timeout`},
	} {
		for _, u := range []string{url, closedURL} {
			args := append(append([]string{}, c.args...), "--nats", u)
			stdout, stderr, code := runBin(t, nil, args...)
			if code != 2 || !strings.Contains(stderr, c.want) || stdout != "" {
				t.Errorf("tickctl %q: exit %d, stdout %q, stderr %q; want exit 2 and %q", args, code, stdout, stderr, c.want)
			}
			if strings.Contains(stderr, "connect") {
				t.Errorf("tickctl %q tried to connect: %s", args, stderr)
			}
		}
	}
	// Through the environment too (no --nats on the line).
	if _, stderr, code := runBin(t, []string{"NATS_URL=" + url}, "frobnicate"); code != 2 || !strings.Contains(stderr, "unknown command") {
		t.Errorf("NATS_URL=%s tickctl frobnicate: exit %d, %s", url, code, stderr)
	}
	if n := conns.Load(); n != 0 {
		t.Errorf("%d connections to the NATS URL given to refused command lines", n)
	}
	// The offline verbs take no connection flags.
	if _, stderr, code := runBin(t, nil, "auth", "init", t.TempDir(), "--nats", url); code != 2 || !strings.Contains(stderr, "auth init runs offline: it takes no --nats") {
		t.Errorf("tickctl auth init --nats: exit %d, %s", code, stderr)
	}
	// A well-formed command does connect (so the listener above would have seen the others).
	if _, stderr, code := runBin(t, nil, "status", "--nats", closedURL, "--timeout", "2s"); code != 1 || !strings.Contains(stderr, "connect to") {
		t.Errorf("tickctl status against a closed port: exit %d, %s", code, stderr)
	}
	runBin(t, nil, "status", "--nats", url, "--timeout", "2s")
	if conns.Load() == 0 {
		t.Error("tickctl status did not connect to the listener")
	}
}

// TestCompletion: the scripts print, and bash completes verbs, a group's verbs, a verb's flags
// and completion's shells through tickctl __complete.
func TestCompletion(t *testing.T) {
	bin := tickctlBin(t)
	script, stderr, code := runBin(t, nil, "completion", "bash")
	if code != 0 || stderr != "" || !strings.Contains(script, "complete -o default -F _tickctl tickctl") {
		t.Fatalf("tickctl completion bash: exit %d, %s\n%s", code, stderr, script)
	}
	zsh, _, code := runBin(t, nil, "completion", "zsh")
	if code != 0 || !strings.HasPrefix(zsh, "#compdef tickctl") || !strings.Contains(zsh, "__complete") {
		t.Errorf("tickctl completion zsh: exit %d\n%s", code, zsh)
	}
	if zshPath, err := exec.LookPath("zsh"); err == nil {
		// The script's function with compsys's compadd, _files and compdef stood in for (they print
		// what they were given): what zsh would offer.
		prog := `compadd() { shift; print -r -- "$*"; }; _files() { print -r -- _files; }; compdef() { print -r -- "compdef $*"; }
eval "$SCRIPT"
words=("$BIN" dr); CURRENT=2; _tickctl
words=("$BIN" instance ""); CURRENT=3; _tickctl
words=("$BIN" rebalance --d); CURRENT=3; _tickctl
words=("$BIN" backup ""); CURRENT=3; _tickctl`
		cmd := exec.Command(zshPath, "-f", "-c", prog)
		cmd.Env = append(cmd.Environ(), "SCRIPT="+zsh, "BIN="+bin)
		out, err := cmd.CombinedOutput()
		if want := "compdef _tickctl tickctl\ndrain\ncreate end get send watch\n--dry-run\n_files\n"; err != nil || string(out) != want {
			t.Errorf("zsh completion: %v\n%s\nwant:\n%s", err, out, want)
		}
	} else {
		t.Log("no zsh here: the zsh script is checked by its text only")
	}
	if _, stderr, code := runBin(t, nil, "completion", "fish"); code != 2 || !strings.Contains(stderr, "want bash or zsh") {
		t.Errorf("tickctl completion fish: exit %d, %s", code, stderr)
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal("bash not found: ", err)
	}
	for _, c := range []struct {
		words []string // the line, the last one being typed
		want  string
	}{
		{[]string{"dr"}, "drain"},
		{[]string{""}, "audit auth backup cluster completion console drain gc help instance instances move nodes pin rebalance restore shards status undrain unpin weight"},
		{[]string{"instance", ""}, "create end get reload send watch"},
		{[]string{"instance", "watch", "d1", "--c"}, "--count --creds"},
		{[]string{"rebalance", "--d"}, "--dry-run"},
		{[]string{"drain", "--d"}, ""},
		{[]string{"--json", "instance", "cr"}, "create"},
		{[]string{"--timeout", ""}, ""},
		{[]string{"completion", ""}, "bash zsh"},
		{[]string{"auth", "user", "dir", "o"}, "observer operator"},
		{[]string{"help", "ins"}, "instance instances"},
	} {
		line := "eval \"$SCRIPT\"; COMP_WORDS=(\"$BIN\""
		for _, w := range c.words {
			line += " '" + w + "'"
		}
		line += fmt.Sprintf("); COMP_CWORD=%d; _tickctl; echo \"${COMPREPLY[*]}\"", len(c.words))
		cmd := exec.Command(bash, "--norc", "--noprofile", "-c", line)
		cmd.Env = append(cmd.Environ(), "SCRIPT="+script, "BIN="+bin)
		out, err := cmd.CombinedOutput()
		if got := strings.TrimSpace(string(out)); err != nil || got != c.want {
			t.Errorf("bash completion of %q: %q (%v), want %q", c.words, got, err, c.want)
		}
	}
}
