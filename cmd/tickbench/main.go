// Command tickbench measures tickfence's tick engine and write path against baselines measured in
// the same run on the same machine, and prints a table per scenario:
//
//	tickbench ticks   [--instances 10000,50000,40000 --rate 20 --work 5us,0,5us --duration 10s]
//	tickbench writes  [--storage memory,file --sync --inflight 64 --duration 5s --cluster]
//	tickbench cluster [--nodes 3 --instances 300 --rate 500 --duration 20s --kill-node | --pause-node]
//	tickbench chaos   [--nodes 3 --duration 10m --seed N]
//	tickbench overload [--instances 1000 --steps 10,25,50,75,100,125,150,200 --step 15s --capacity N]
//	tickbench frames  [--instances 10000 --duration 30s --rounds 1 --frame-every 1 --watch]
//
// Every scenario takes --json FILE (the figures, machine-readable); ticks and cluster take --plot
// FILE (a self-contained HTML page with an SVG plot over time). Progress goes to stderr. cluster
// and chaos build tickd and run a `tickd server` and node processes.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"
)

func main() {
	if len(os.Args) < 2 || strings.HasPrefix(os.Args[1], "-") {
		usage()
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "ticks":
		err = runTicks(os.Args[2:])
	case "writes":
		err = runWrites(os.Args[2:])
	case "cluster":
		err = runCluster(os.Args[2:])
	case "chaos":
		err = runChaos(os.Args[2:])
	case "overload":
		err = runOverload(os.Args[2:])
	case "frames":
		err = runFrames(os.Args[2:])
	case "help", "-h", "--help":
		usage()
		return
	default:
		usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tickbench:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, `usage: tickbench SCENARIO [flags]

scenarios:
  ticks    tick engine vs the raw loop and one goroutine + time.Ticker per instance
  writes   fenced writes vs raw JetStream compare-on-revision publishes (embedded server)
  cluster  tickd server + N node processes under command load: lateness per node, command round
           trip, failover time after --kill-node or --pause-node
  chaos    nemesis soak: random pauses, kills, moves, drains and frozen saves under load, then
           the stored history, every acknowledged command and every effect (loot from the
           killable dungeons, consumed during the soak) are checked (exit 1 on a violation)
  overload one node under command load from 10 % to 200 % of its capacity: ok / busy / timed
           out, round trip, ticks vs schedule, lateness, write latency, record bytes per step
  frames   one node with N demo dungeons, without and with a frame from each every tick: tick
           lateness, CPU per tick, frames published and dropped

tickbench SCENARIO --help lists its flags.`)
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
