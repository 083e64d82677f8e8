// Command tickbench measures tickfence's tick engine and write path against baselines measured in
// the same run on the same machine, and prints a table per scenario:
//
//	tickbench ticks    [--instances 10000,50000,40000 --tick-rate 20 --work 5us,0,5us --duration 10s]
//	tickbench writes   [--storage memory,file --sync --inflight 64 --duration 5s --cluster --auth --tls]
//	tickbench cluster  [--servers 1|3|5 --replicas N --partitions P --nodes 3 --instances 300 --rate 500
//	                    --duration 20s --kill-node[=ID] | --pause-node[=ID] | --kill-leader[=data|=p<k>]]
//	tickbench cluster compare [--markdown] REPORT.json...
//	tickbench chaos    [--nodes 3 --instances 100 --rate 200 --duration 10m --seed N]
//	tickbench overload [--instances 1000 --steps 10,25,50,75,100,125,150,200 --step 15s --capacity N]
//	tickbench frames   [--instances 10000 --duration 30s --rounds 1 --frame-every 1 --watch]
//
// A flag means the same in every scenario that takes it: --instances (instances, or dungeons, to
// run), --rate (commands per second, in all), --tick-rate (ticks per second of each instance, as
// tickd's), --shards (shards of the cluster), --give-up (how long a command waits for its answer),
// --duration (the measurement window), --json FILE and --plot FILE. tickbench SCENARIO --help
// lists a scenario's flags (on stdout, exit 0); a usage error exits 2. Progress goes to stderr.
// cluster, chaos, overload and frames build tickd and run a `tickd server` and node processes.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"
)

func main() { os.Exit(run(os.Args[1:])) }

// scenarios run a scenario on its arguments.
var scenarios = map[string]func([]string) error{
	"ticks": runTicks, "writes": runWrites, "cluster": runCluster, "chaos": runChaos,
	"overload": runOverload, "frames": runFrames,
}

// run runs a command line and returns the exit status: 0 done (or help printed), 1 failed, 2 a
// usage error.
func run(args []string) int {
	if len(args) == 0 {
		usage(os.Stderr)
		return 2
	}
	name := args[0]
	switch name {
	case "help", "-h", "--help", "-help":
		if len(args) > 1 && scenarios[args[1]] != nil { // tickbench help SCENARIO
			name, args = args[1], []string{args[1], "--help"}
			break
		}
		usage(os.Stdout)
		return 0
	}
	f := scenarios[name]
	if f == nil {
		fmt.Fprintf(os.Stderr, "tickbench: unknown scenario %q (see tickbench --help)\n", name)
		return 2
	}
	err := f(args[1:])
	var ue usageError
	switch {
	case err == nil, errors.Is(err, errHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintln(os.Stderr, err) // it names the scenario
		return 2
	default:
		fmt.Fprintln(os.Stderr, "tickbench:", err)
		return 1
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, `usage: tickbench SCENARIO [flags]

scenarios:
  ticks    tick engine vs the raw loop and one goroutine + time.Ticker per instance
  writes   fenced writes vs raw JetStream compare-on-revision publishes (embedded server; --cluster:
           also three in-process servers with R3 buckets)
  cluster  tickd servers (--servers 1, 3 or 5; --replicas, --partitions) and N node processes under
           command load: lateness per node, command round trip, failover time after --kill-node,
           --pause-node or --kill-leader; tickbench cluster compare REPORT.json... compares runs
  chaos    nemesis soak: random pauses, kills, moves, drains and frozen saves under load, then
           the stored history, every acknowledged command and every effect (loot from the
           killable dungeons, consumed during the soak) are checked (exit 1 on a violation)
  overload one node under command load from 10 % to 200 % of its capacity: ok / busy / timed
           out, round trip, ticks vs schedule, lateness, write latency, record bytes per step
  frames   one node with N demo dungeons, without and with a frame from each every tick: tick
           lateness, CPU per tick, frames published and dropped

Flags mean the same in every scenario that takes them: --instances (instances to run), --rate
(commands per second, in all), --tick-rate (ticks per second of each instance), --shards (shards
of the cluster), --give-up (how long a command waits for its answer), --duration (the measurement
window), --json FILE (the figures), --plot FILE (an HTML page plotting them).

tickbench SCENARIO --help (or tickbench help SCENARIO) lists its flags.`)
}

// errHelp: a scenario printed its --help (exit 0).
var errHelp = errors.New("help printed")

// usageError is a command line a scenario cannot run (exit 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// renamed are flags a scenario once had under another name, for the error's hint.
var renamed = map[string]string{
	"ticks rate":       "--tick-rate (ticks per second of each instance, as in cluster, overload and tickd; --rate is commands per second)",
	"overload timeout": "--give-up (how long a command waits for its answer, as in cluster and chaos)",
}

// newFlagSet is the flags of scenario name (its words after tickbench); about says what it does
// in its --help, after the usage line.
func newFlagSet(name, about string) *flag.FlagSet {
	fs := flag.NewFlagSet("tickbench "+name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: tickbench %s [flags]\n\n%s\n\nflags:\n", name, about)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses a scenario's flags: --help or -h prints its help on stdout (errHelp); an
// unknown flag, a bad value or an argument is a usageError pointing at the help (argHint says
// more about an argument).
func parseFlags(fs *flag.FlagSet, args []string, argHint ...string) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(os.Stdout)
		fs.Usage()
		return errHelp
	}
	if err == nil && fs.NArg() > 0 {
		err = fmt.Errorf("unexpected argument %q%s", fs.Arg(0), strings.Join(append([]string{""}, argHint...), "; "))
	}
	if err != nil {
		msg := err.Error()
		if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
			msg = "unknown flag --" + name
			if to := renamed[strings.TrimPrefix(fs.Name(), "tickbench ")+" "+name]; to != "" {
				msg += "; it is " + to
			}
		}
		return usageError{fmt.Sprintf("%s: %s (see %s --help)", fs.Name(), msg, fs.Name())}
	}
	return nil
}

// machine describes where a run happened, for the report.
type machine struct {
	GoVersion  string `json:"go_version"`
	GOOS       string `json:"goos"`
	GOARCH     string `json:"goarch"`
	CPUs       int    `json:"cpus"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	CPUModel   string `json:"cpu_model"`
	When       string `json:"when"`
}

func thisMachine() machine {
	m := machine{GoVersion: runtime.Version(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH,
		CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), When: time.Now().UTC().Format(time.RFC3339)}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}

func (m machine) String() string {
	return fmt.Sprintf("%s, %d CPUs (GOMAXPROCS %d), %s %s/%s", m.CPUModel, m.CPUs, m.GOMAXPROCS, m.GoVersion, m.GOOS, m.GOARCH)
}

func writeJSON(path string, v any) error {
	if path == "" {
		return nil
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// progress prints one status line to stderr, overwriting the last one on a terminal.
type progress struct{ tty bool }

func newProgress() *progress {
	fi, err := os.Stderr.Stat()
	return &progress{tty: err == nil && fi.Mode()&os.ModeCharDevice != 0}
}

func (p *progress) line(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	if p.tty {
		fmt.Fprintf(os.Stderr, "\r\033[K%s", s)
	} else {
		fmt.Fprintln(os.Stderr, s)
	}
}

func (p *progress) done() {
	if p.tty {
		fmt.Fprint(os.Stderr, "\r\033[K")
	}
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.3f", float64(d)/1e6)
}

// parseList splits a comma-separated flag value.
func parseList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
