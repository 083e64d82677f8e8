package main

// Scenario "cluster": several tickd processes, a fault, and what it cost; this file holds its
// flags, configuration and report types and the run itself.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tickfence/tickfence/internal/proc"
)

// optionalNode is a flag that may be given bare (--kill-node: the node with most instances) or
// with a node ID (--kill-node=n2).
type optionalNode struct {
	set  bool
	node string
}

func (o *optionalNode) String() string {
	if o == nil || !o.set {
		return ""
	}
	return o.node
}

func (o *optionalNode) Set(v string) error {
	o.set = true
	if v != "true" {
		o.node = v
	}
	if v == "false" {
		o.set, o.node = false, ""
	}
	return nil
}

func (o *optionalNode) IsBoolFlag() bool { return true }

type clusterConfig struct {
	Nodes     int           `json:"nodes"`
	Instances int           `json:"instances"`
	Shards    int           `json:"shards"`
	Lease     time.Duration `json:"lease_ns"`
	Rate      float64       `json:"commands_per_s"`
	Duration  time.Duration `json:"window_ns"`
	Warmup    time.Duration `json:"warmup_ns"`
	Fault     string        `json:"fault,omitempty"` // kill, pause
	Pause     time.Duration `json:"pause_ns,omitempty"`
	Seed      uint64        `json:"seed"`
}

type nodeResult struct {
	ID            string        `json:"id"`
	Instances     int           `json:"instances"`
	Shards        int           `json:"shards"`
	TicksPerSec   float64       `json:"ticks_per_s"`
	Ticks         float64       `json:"ticks"`
	LateP50       time.Duration `json:"lateness_p50_ns"`
	LateP99       time.Duration `json:"lateness_p99_ns"`
	Over10ms      float64       `json:"ticks_over_10ms"`
	StaleRejected float64       `json:"stale_writes_rejected"`
	Handoffs      float64       `json:"handoffs"`
	Seconds       float64       `json:"measured_s"` // the part of the window its scrapes cover
	Note          string        `json:"note,omitempty"`
}

type commandResult struct {
	Sent     int64            `json:"sent"`
	Answered int64            `json:"answered"`
	OK       int64            `json:"ok"`
	Errors   map[string]int64 `json:"errors,omitempty"` // answered with an error, by code
	Unknown  int64            `json:"unknown"`          // no answer before giving up
	Attempts int64            `json:"attempts"`         // requests published, retries included
	Retried  int64            `json:"retries"`          // attempts beyond the first of each command
	Dropped  int64            `json:"not_sent"`         // skipped: too many in flight
	P50      time.Duration    `json:"round_trip_p50_ns"`
	P99      time.Duration    `json:"round_trip_p99_ns"`
	P999     time.Duration    `json:"round_trip_p999_ns"`
	Max      time.Duration    `json:"round_trip_max_ns"`
}

type faultResult struct {
	Kind           string        `json:"kind"` // kill, pause
	Node           string        `json:"node"`
	At             float64       `json:"at_s"`
	Pause          time.Duration `json:"pause_ns,omitempty"`
	Instances      int           `json:"instances"`
	Shards         int           `json:"shards"`
	Failover       time.Duration `json:"failover_ns"`
	Complete       bool          `json:"complete"`
	Pending        int           `json:"pending,omitempty"`
	RttMaxDuring   time.Duration `json:"round_trip_max_during_ns"`
	CommandsDuring int           `json:"commands_during"`
	Error          string        `json:"error,omitempty"`
}

type latPoint struct {
	At  float64       `json:"t_s"`
	P50 time.Duration `json:"p50_ns"`
	P99 time.Duration `json:"p99_ns"`
}

type rttPoint struct {
	At  float64       `json:"t_s"`
	N   int           `json:"n"`
	P99 time.Duration `json:"p99_ns"`
	Max time.Duration `json:"max_ns"`
}

type clusterReport struct {
	Machine  machine               `json:"machine"`
	Config   clusterConfig         `json:"config"`
	Nodes    []nodeResult          `json:"nodes"`
	Commands commandResult         `json:"commands"`
	Fault    *faultResult          `json:"fault,omitempty"`
	Lateness map[string][]latPoint `json:"lateness_series,omitempty"`
	RoundTr  []rttPoint            `json:"round_trip_series,omitempty"`
}

// runCluster is the cluster scenario: several tickd processes under load, at most one fault at the
// middle of the measurement window, and what it cost.
func runCluster(args []string) error {
	cfg, fl, err := parseClusterFlags(args)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep := clusterReport{Machine: thisMachine(), Config: cfg}
	fmt.Printf("tickbench cluster on %s\n", rep.Machine)
	fmt.Printf("%d nodes + tickd server, %d instances on %d shards, lease %v, %g attacks/s, window %v after %v warm-up; %s; seed %d\n\n",
		cfg.Nodes, cfg.Instances, cfg.Shards, cfg.Lease, cfg.Rate, cfg.Duration, cfg.Warmup, describeFault(cfg), cfg.Seed)

	p := newProgress()
	b, err := startBenchCluster(ctx, p, fl.tickd, proc.ClusterConfig{Lease: cfg.Lease, Shards: cfg.Shards}, nodeIDs(cfg.Nodes))
	if err != nil {
		return err
	}
	defer b.close()
	gen, err := b.newLoad(cfg.Seed, cfg.Rate, fl.giveUp, true)
	if err != nil {
		return err
	}
	defer gen.nc.Close()
	if err := gen.setup(ctx, p, cfg.Instances); err != nil {
		return err
	}
	sam, fres, err := measureWindow(ctx, p, b, gen, cfg, fl)
	if err != nil {
		return err
	}
	return reportCluster(rep, gen, sam, fres, fl)
}

// clusterFlags are the cluster flags that are not part of the report's configuration.
type clusterFlags struct {
	target   string        // the node of --kill-node or --pause-node ("": the one with most instances)
	pauseFor time.Duration // how long --pause-node freezes the node
	giveUp   time.Duration // a command with no answer after this long counts as unknown
	tickd    string        // a tickd binary to use instead of building one
	jsonOut  string        // where to write the report as JSON ("": nowhere)
	plotOut  string        // where to write the HTML plot ("": nowhere)
}

// parseClusterFlags reads and checks the cluster flags; a --seed of 0 becomes a random seed.
func parseClusterFlags(args []string) (clusterConfig, clusterFlags, error) {
	fs := flag.NewFlagSet("cluster", flag.ExitOnError)
	nodes := fs.Int("nodes", 3, "tickd node processes")
	instances := fs.Int("instances", 300, "dungeons created by tickbench (boss HP 1e9: bosses never die)")
	rate := fs.Float64("rate", 500, "attack commands per second, in all")
	duration := fs.Duration("duration", 20*time.Second, "measurement window")
	warmup := fs.Duration("warmup", 3*time.Second, "load before the window opens")
	lease := fs.Duration("lease", 2*time.Second, "node lease TTL (whole seconds)")
	shards := fs.Int("shards", 32, "shards of the cluster")
	var kill, pause optionalNode
	fs.Var(&kill, "kill-node", "kill -9 a node at the middle of the window (bare: the one with most instances; =ID: that node)")
	fs.Var(&pause, "pause-node", "SIGSTOP a node at the middle of the window for --pause, then SIGCONT (bare or =ID as --kill-node)")
	pauseFor := fs.Duration("pause", 0, "how long --pause-node freezes the node (default 3 × lease)")
	giveUp := fs.Duration("give-up", 30*time.Second, "a command with no answer after this long counts as unknown")
	seed := fs.Uint64("seed", 0, "seed of the load generator's choices (0: random, printed)")
	bin := fs.String("tickd", "", "use this tickd binary instead of building one")
	jsonOut := fs.String("json", "", "write the figures as JSON to this file")
	plotOut := fs.String("plot", "", "write an HTML page with lateness and round trip over time to this file")
	_ = fs.Parse(args)
	if fs.NArg() > 0 {
		return clusterConfig{}, clusterFlags{}, fmt.Errorf("%s: unexpected argument %q (a node for --kill-node or --pause-node goes after =, e.g. --kill-node=n2)", fs.Name(), fs.Arg(0))
	}
	if *nodes < 1 || *instances < 1 || *rate <= 0 || *duration <= 0 {
		return clusterConfig{}, clusterFlags{}, errors.New("--nodes, --instances, --rate and --duration must be positive")
	}
	if kill.set && pause.set {
		return clusterConfig{}, clusterFlags{}, errors.New("--kill-node and --pause-node: one fault per run")
	}
	if (kill.set || pause.set) && *nodes < 2 {
		return clusterConfig{}, clusterFlags{}, errors.New("a fault needs at least 2 nodes: another must take the shards over")
	}
	if *pauseFor == 0 {
		*pauseFor = 3 * *lease
	}
	if *seed == 0 {
		*seed = mrand.Uint64()
	}
	cfg := clusterConfig{Nodes: *nodes, Instances: *instances, Shards: *shards, Lease: *lease, Rate: *rate,
		Duration: *duration, Warmup: *warmup, Seed: *seed}
	switch {
	case kill.set:
		cfg.Fault = "kill"
	case pause.set:
		cfg.Fault, cfg.Pause = "pause", *pauseFor
	}
	target := kill.node
	if pause.set {
		target = pause.node
	}
	return cfg, clusterFlags{target: target, pauseFor: *pauseFor, giveUp: *giveUp, tickd: *bin, jsonOut: *jsonOut, plotOut: *plotOut}, nil
}

// describeFault says in words which fault a run injects, for the heading.
func describeFault(cfg clusterConfig) string {
	fault := "no fault"
	switch cfg.Fault {
	case "kill":
		fault = "kill -9 of a node at the middle of the window"
	case "pause":
		fault = fmt.Sprintf("SIGSTOP of a node for %v at the middle of the window", cfg.Pause)
	}
	return fault
}

// measureWindow runs the load through the warm-up and the window, scraping every node, with the
// fault (if any) at the middle of the window; it returns once the commands in flight are answered.
func measureWindow(ctx context.Context, p *progress, b *benchCluster, gen *loadGen, cfg clusterConfig, fl clusterFlags) (*sampler, *faultResult, error) {
	// Load, warm-up, then the window: one scrape of every node at its start and every second.
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	go func(g *loadGen, c context.Context) { g.run(c) }(gen, loadCtx) // arguments evaluated here, not read later from this frame
	if err := sleepCtx(ctx, cfg.Warmup); err != nil {
		return nil, nil, err
	}
	sam := newSampler(b)
	t0 := time.Now()
	gen.markWindow(t0)
	sam.start(t0)

	var fres *faultResult
	faultDone := make(chan struct{})
	faultAt := t0.Add(cfg.Duration / 2)
	end := t0.Add(cfg.Duration)
	go func() {
		defer close(faultDone)
		if cfg.Fault == "" || sleepCtx(ctx, time.Until(faultAt)) != nil {
			return
		}
		fres = b.inject(ctx, p, sam, cfg.Fault, fl.target, fl.pauseFor, t0)
	}()
	for time.Now().Before(end) {
		if err := sleepCtx(ctx, min(time.Second, time.Until(end))); err != nil {
			return nil, nil, err
		}
		p.line("%5.1fs/%.0fs  %s  %s", time.Since(t0).Seconds(), cfg.Duration.Seconds(), gen.status(), sam.status())
	}
	sam.stop()
	stopLoad()
	p.line("window over; waiting for %d commands in flight", gen.inflight.Load())
	gen.wait()
	<-faultDone
	p.done()
	return sam, fres, nil
}

// reportCluster adds the run's figures to the report, prints it, and writes it as JSON and as a
// plot where the flags ask for them.
func reportCluster(rep clusterReport, gen *loadGen, sam *sampler, fres *faultResult, fl clusterFlags) error {
	rep.Commands = gen.result()
	rep.Nodes = sam.results()
	rep.Fault = fres
	if fres != nil && fres.Complete {
		from := fres.At
		to := fres.At + fres.Failover.Seconds()
		fres.RttMaxDuring, fres.CommandsDuring = gen.maxDuring(from, to)
	}
	rep.Lateness = sam.series()
	rep.RoundTr = gen.series(rep.Config.Duration)
	printCluster(rep)
	if err := writeJSON(fl.jsonOut, rep); err != nil {
		return err
	}
	if fl.plotOut != "" {
		if err := writeClusterPlot(fl.plotOut, rep); err != nil {
			return err
		}
		fmt.Printf("plot: %s\n", fl.plotOut)
	}
	return nil
}

func nodeIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("n%d", i+1)
	}
	return ids
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
