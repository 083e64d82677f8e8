package main

// Scenario "cluster": several tickd processes, a fault, and what it cost; this file holds its
// flags, configuration and report types and the run itself.

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tickfence/tickfence/internal/proc"
	"github.com/tickfence/tickfence/store/natskv"
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
	Fault     string        `json:"fault,omitempty"` // kill, pause, kill-leader
	Pause     time.Duration `json:"pause_ns,omitempty"`
	Seed      uint64        `json:"seed"`
	// The store: one tickd server, or a JetStream cluster of Servers; the new cluster's buckets.
	Servers       int    `json:"servers"`
	Replicas      int    `json:"replicas"`
	Partitions    int    `json:"partitions"`
	WriteStrategy string `json:"write_strategy"` // the nodes' --write-strategy
	// CheckpointEvery and TickRate are the nodes' --checkpoint-every and --tick-rate.
	CheckpointEvery int     `json:"checkpoint_every"`
	TickRate        float64 `json:"tick_rate_hz"`
	// LeaderOf names the stream whose leader --kill-leader kills: p<k> (data partition k) or control.
	LeaderOf string `json:"leader_of,omitempty"`
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
	// Fenced writes acknowledged ok (records), the atomic batches that carried them (0 with
	// single writes) and their records, and a write's latency from sent to acknowledged.
	Records      float64       `json:"records_ok"`
	Batches      float64       `json:"batches"`
	BatchRecords float64       `json:"batch_records"`
	WriteP50     time.Duration `json:"write_p50_ns"`
	WriteP99     time.Duration `json:"write_p99_ns"`
	Skipped      float64       `json:"ticks_skipped"`
	SelfFenced   float64       `json:"self_fenced"`
	Rotations    float64       `json:"token_rotations"`
}

// clusterTotals are the nodes' figures over the window, added up (histograms merged).
type clusterTotals struct {
	Instances       int           `json:"instances"` // served as the window closed (the nodes' gauges)
	Scheduled       float64       `json:"scheduled_ticks_per_s"`
	TicksPerSec     float64       `json:"ticks_per_s"`
	TicksPct        float64       `json:"ticks_pct_of_schedule"`
	Skipped         float64       `json:"ticks_skipped"`
	LateP50         time.Duration `json:"lateness_p50_ns"`
	LateP99         time.Duration `json:"lateness_p99_ns"`
	Over10ms        float64       `json:"ticks_over_10ms"`
	Records         float64       `json:"records_ok"`
	RecordsPerSec   float64       `json:"records_per_s"`
	Batches         float64       `json:"batches"`
	RecordsPerBatch float64       `json:"records_per_batch"` // 0: no batches (single writes)
	WriteP50        time.Duration `json:"write_p50_ns"`
	WriteP99        time.Duration `json:"write_p99_ns"`
	StaleRejected   float64       `json:"stale_writes_rejected"`
	SelfFenced      float64       `json:"self_fenced"`
	Rotations       float64       `json:"token_rotations"`
	Handoffs        float64       `json:"handoffs"`
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
	Kind  string        `json:"kind"` // kill, pause, kill-leader
	Node  string        `json:"node,omitempty"`
	At    float64       `json:"at_s"`
	Pause time.Duration `json:"pause_ns,omitempty"`
	// Instances and Shards are the victim node's, or (kill-leader) those of the data partitions
	// the killed server led.
	Instances int `json:"instances"`
	Shards    int `json:"shards"`
	// Failover: a node fault, until every instance of the victim had a record under another token
	// with a higher tick; kill-leader, until every sampled instance of the affected partitions had
	// a record stored with a higher tick (writes resumed).
	Failover       time.Duration `json:"failover_ns"`
	Complete       bool          `json:"complete"`
	Pending        int           `json:"pending,omitempty"`
	RttMaxDuring   time.Duration `json:"round_trip_max_during_ns"`
	CommandsDuring int           `json:"commands_during"`
	Error          string        `json:"error,omitempty"`

	// kill-leader: the server killed, the stream it was chosen by, every stream it led, the
	// affected data partitions, how many of their instances were watched, and when the stream
	// had a new leader (and which).
	Server     string        `json:"server,omitempty"`
	Stream     string        `json:"stream,omitempty"`
	Led        []string      `json:"led,omitempty"`
	Partitions []int         `json:"partitions,omitempty"`
	Sampled    int           `json:"sampled,omitempty"`
	Elected    time.Duration `json:"new_leader_ns,omitempty"`
	NewLeader  string        `json:"new_leader,omitempty"`
	LoadOnIt   bool          `json:"load_client_on_it,omitempty"`

	// AckPause is the longest stretch, from the fault to the end of the window, without an
	// acknowledged command to an affected instance (the victim node's, or the affected
	// partitions'); AckPauseAll the same over every instance.
	AckPause    time.Duration `json:"ack_pause_ns"`
	AckPauseAll time.Duration `json:"ack_pause_all_ns"`
	// TickMinPct is the cluster's lowest second of ticks from the fault's second on, in % of the
	// schedule; TickSecsBelow90 counts the seconds under 90 %.
	TickMinPct      float64 `json:"tick_min_pct"`
	TickSecsBelow90 int     `json:"tick_seconds_below_90pct"`

	affected []string // instance IDs behind AckPause
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
	Machine  machine                  `json:"machine"`
	Config   clusterConfig            `json:"config"`
	Nodes    []nodeResult             `json:"nodes"`
	Totals   clusterTotals            `json:"totals"`
	CPU      cpuResult                `json:"cpu"`
	Streams  []natskv.PartitionStream `json:"streams,omitempty"` // the data partitions' streams as the window opened
	LoadOn   string                   `json:"load_client_server,omitempty"`
	Commands commandResult            `json:"commands"`
	Fault    *faultResult             `json:"fault,omitempty"`
	Lateness map[string][]latPoint    `json:"lateness_series,omitempty"`
	RoundTr  []rttPoint               `json:"round_trip_series,omitempty"`
	Ticks    []tickPoint              `json:"ticks_series,omitempty"`
}

// runCluster is the cluster scenario: several tickd processes under load, at most one fault at the
// middle of the measurement window, and what it cost. `tickbench cluster compare FILE...` compares
// the JSON reports of earlier runs instead.
func runCluster(args []string) error {
	if len(args) > 0 && args[0] == "compare" {
		return runClusterCompare(args[1:])
	}
	cfg, fl, err := parseClusterFlags(args)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep := clusterReport{Machine: thisMachine(), Config: cfg}
	fmt.Printf("tickbench cluster on %s\n", rep.Machine)
	fmt.Printf("%s\n\n", describeRun(cfg))

	p := newProgress()
	ccfg := proc.ClusterConfig{Lease: cfg.Lease, Shards: cfg.Shards, NodeArgs: []string{
		"--replicas", fmt.Sprint(cfg.Replicas), "--partitions", fmt.Sprint(cfg.Partitions),
		"--write-strategy", cfg.WriteStrategy, "--checkpoint-every", fmt.Sprint(cfg.CheckpointEvery),
		"--tick-rate", fmt.Sprint(cfg.TickRate)}}
	b, err := startBenchServers(ctx, p, fl.tickd, ccfg, cfg.Servers, cfg.Replicas, nodeIDs(cfg.Nodes))
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
	if cfg.Servers > 1 {
		rep.Streams = b.partitionStreams(ctx, uint32(cfg.Partitions))
		rep.LoadOn = gen.nc.ConnectedServerName()
	}
	sam, fres, err := measureWindow(ctx, p, b, gen, cfg, fl)
	if err != nil {
		return err
	}
	return reportCluster(rep, gen, sam, fres, fl)
}

// describeRun is the run's heading: processes, load, store shape and fault.
func describeRun(cfg clusterConfig) string {
	store := "1 tickd server"
	if cfg.Servers > 1 {
		store = fmt.Sprintf("%d tickd servers (one JetStream cluster)", cfg.Servers)
	}
	return fmt.Sprintf("%d nodes + %s; R%d, %d partition(s), write strategy %s, checkpoint every %d ticks at %g Hz\n"+
		"%d instances on %d shards, lease %v, %g attacks/s, window %v after %v warm-up; %s; seed %d",
		cfg.Nodes, store, cfg.Replicas, cfg.Partitions, cfg.WriteStrategy, cfg.CheckpointEvery, cfg.TickRate,
		cfg.Instances, cfg.Shards, cfg.Lease, cfg.Rate, cfg.Duration, cfg.Warmup, describeFault(cfg), cfg.Seed)
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
	fs := newFlagSet("cluster", "tickd servers (--servers: 1, or 3 or 5 forming one JetStream cluster) and --nodes node processes\n"+
		"under --rate attack commands on --instances dungeons: lateness per node, command round trip, writes,\n"+
		"and the failover after --kill-node, --pause-node or --kill-leader at the middle of the window.\n"+
		"tickbench cluster compare REPORT.json... compares the --json reports of runs.")
	nodes := fs.Int("nodes", 3, "tickd node processes")
	instances := fs.Int("instances", 300, "dungeons created by tickbench (boss HP 1e9: bosses never die)")
	rate := fs.Float64("rate", 500, "attack commands per second, in all")
	duration := fs.Duration("duration", 20*time.Second, "measurement window")
	warmup := fs.Duration("warmup", 3*time.Second, "load before the window opens")
	lease := fs.Duration("lease", 2*time.Second, "node lease TTL (whole seconds)")
	shards := fs.Int("shards", 32, "shards of the cluster")
	servers := fs.Int("servers", 1, "tickd server processes: 1, or 3 or 5 forming one JetStream cluster")
	replicas := fs.Int("replicas", 0, "replicas of the new cluster's buckets: 1, 3 or 5, at most --servers (default: 3 on 3 or more servers, else 1)")
	partitions := fs.Int("partitions", 1, "data buckets per epoch (shard S in partition S mod P)")
	strategy := fs.String("write-strategy", "auto", "the nodes' --write-strategy: auto (batches with replicas), single or batches")
	checkpoint := fs.Int("checkpoint-every", 20, "the nodes' --checkpoint-every: write every instance at least every this many ticks (1: every tick)")
	tickRate := fs.Float64("tick-rate", 20, "the nodes' --tick-rate (Hz)")
	var kill, pause, leader optionalNode
	fs.Var(&kill, "kill-node", "kill -9 a node at the middle of the window (bare: the one with most instances; =ID: that node)")
	fs.Var(&pause, "pause-node", "SIGSTOP a node at the middle of the window for --pause, then SIGCONT (bare or =ID as --kill-node)")
	fs.Var(&leader, "kill-leader", "kill -9 the server leading a stream at the middle of the window (bare: data partition 0's; =p<k>: partition k's;\n"+
		"=data: a data partition's whose server does not lead the control bucket (which carries the leases; its leadership is\n"+
		"moved away first if need be); =control: the control bucket's); needs --servers 3 and --replicas 3. It stays dead to the end")
	pauseFor := fs.Duration("pause", 0, "how long --pause-node freezes the node (default 3 × lease)")
	giveUp := fs.Duration("give-up", 30*time.Second, "a command with no answer after this long counts as unknown")
	seed := fs.Uint64("seed", 0, "seed of the load generator's choices (0: random, printed)")
	bin := fs.String("tickd", "", "use this tickd binary instead of building one")
	jsonOut := fs.String("json", "", "write the figures as JSON to this file")
	plotOut := fs.String("plot", "", "write an HTML page with lateness and round trip over time to this file")
	if err := parseFlags(fs, args, "a node for --kill-node or --pause-node goes after =, e.g. --kill-node=n2"); err != nil {
		return clusterConfig{}, clusterFlags{}, err
	}
	fail := func(format string, a ...any) (clusterConfig, clusterFlags, error) {
		return clusterConfig{}, clusterFlags{}, fmt.Errorf(format, a...)
	}
	if *nodes < 1 || *instances < 1 || *rate <= 0 || *duration <= 0 || *tickRate <= 0 {
		return fail("--nodes, --instances, --rate, --duration and --tick-rate must be positive")
	}
	if *servers < 1 || *servers > 5 {
		return fail("--servers %d: want 1 to 5", *servers)
	}
	if *replicas == 0 {
		*replicas = 1
		if *servers >= 3 {
			*replicas = 3
		}
	}
	if *replicas != 1 && *replicas != 3 && *replicas != 5 || *replicas > *servers {
		return fail("--replicas %d: want 1, 3 or 5, and at most --servers (%d)", *replicas, *servers)
	}
	if *partitions < 1 || *partitions > *shards {
		return fail("--partitions %d: want 1 to --shards (%d)", *partitions, *shards)
	}
	switch *strategy {
	case "auto", "single", "batches":
	default:
		return fail("--write-strategy %q: want auto, single or batches", *strategy)
	}
	if *checkpoint < 1 {
		return fail("--checkpoint-every must be at least 1")
	}
	faults := 0
	for _, f := range []bool{kill.set, pause.set, leader.set} {
		if f {
			faults++
		}
	}
	if faults > 1 {
		return fail("--kill-node, --pause-node and --kill-leader: one fault per run")
	}
	if (kill.set || pause.set) && *nodes < 2 {
		return fail("a node fault needs at least 2 nodes: another must take the shards over")
	}
	leaderOf := ""
	if leader.set {
		if *servers < 3 || *replicas < 3 {
			return fail("--kill-leader needs --servers 3 and --replicas 3: with one replica the stream's server is its only copy, and its loss an outage, not a failover")
		}
		leaderOf = leader.node
		if leaderOf == "" {
			leaderOf = "p0"
		}
		if leaderOf != "control" && leaderOf != "data" {
			k, err := strconv.Atoi(strings.TrimPrefix(leaderOf, "p"))
			if err != nil || !strings.HasPrefix(leaderOf, "p") || k < 0 || k >= *partitions {
				return fail("--kill-leader=%s: want p0 … p%d (a data partition), data or control", leaderOf, *partitions-1)
			}
		}
	}
	if *pauseFor == 0 {
		*pauseFor = 3 * *lease
	}
	if *seed == 0 {
		*seed = mrand.Uint64()
	}
	cfg := clusterConfig{Nodes: *nodes, Instances: *instances, Shards: *shards, Lease: *lease, Rate: *rate,
		Duration: *duration, Warmup: *warmup, Seed: *seed, Servers: *servers, Replicas: *replicas, Partitions: *partitions,
		WriteStrategy: *strategy, CheckpointEvery: *checkpoint, TickRate: *tickRate, LeaderOf: leaderOf}
	switch {
	case kill.set:
		cfg.Fault = "kill"
	case pause.set:
		cfg.Fault, cfg.Pause = "pause", *pauseFor
	case leader.set:
		cfg.Fault = "kill-leader"
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
	case "kill-leader":
		what := "data partition " + strings.TrimPrefix(cfg.LeaderOf, "p") + "'s stream"
		switch cfg.LeaderOf {
		case "control":
			what = "the control bucket's stream"
		case "data":
			what = "a data partition's stream (and not the control bucket's)"
		}
		fault = "kill -9 of the server leading " + what + " at the middle of the window"
	}
	return fault
}

// measureWindow runs the load through the warm-up and the window, scraping every node, with the
// fault (if any) at the middle of the window; it returns once the commands in flight are answered.
func measureWindow(ctx context.Context, p *progress, b *benchCluster, gen *loadGen, cfg clusterConfig, fl clusterFlags) (*sampler, *faultResult, error) {
	// Load, warm-up, then the window: one scrape of every node at its start and every second.
	stopLoad := gen.start(ctx)
	defer stopLoad()
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
		if cfg.Fault == "kill-leader" {
			fres = b.killLeader(ctx, p, sam, gen, cfg.LeaderOf, uint32(cfg.Partitions), t0)
			return
		}
		fres = b.inject(ctx, p, sam, cfg.Fault, fl.target, fl.pauseFor, t0)
	}()
	for time.Now().Before(end) {
		if err := sleepCtx(ctx, min(time.Second, time.Until(end))); err != nil {
			return nil, nil, err
		}
		p.line("%5.1fs/%.0fs  %s  %s", time.Since(t0).Seconds(), cfg.Duration.Seconds(), gen.status(), sam.status(cfg.scheduled()))
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
	rep.Totals = sam.totals(rep.Nodes, rep.Config)
	rep.CPU = sam.cpu.result(rep.Totals.Records)
	rep.Ticks = sam.tickSeries(rep.Config.Duration)
	rep.Fault = fres
	if fres != nil {
		if fres.Complete {
			from := fres.At
			to := fres.At + fres.Failover.Seconds()
			fres.RttMaxDuring, fres.CommandsDuring = gen.maxDuring(from, to)
		}
		if fres.Error == "" {
			end := rep.Config.Duration.Seconds()
			affected := gen.indexSet(fres.affected)
			fres.AckPause = gen.ackPause(fres.At, end, func(i int) bool { return affected[i] })
			fres.AckPauseAll = gen.ackPause(fres.At, end, func(int) bool { return true })
			fres.TickMinPct, fres.TickSecsBelow90 = tickDip(rep.Ticks, fres.At, rep.Config.scheduled())
		}
	}
	rep.Lateness = sam.series()
	rep.RoundTr = gen.series(rep.Config.Duration)
	printCluster(os.Stdout, rep)
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

// scheduled is the ticks per second the schedule asks of the whole cluster.
func (c clusterConfig) scheduled() float64 { return float64(c.Instances) * c.TickRate }

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
