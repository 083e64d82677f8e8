// Command tickd runs a tickfence node: by default an embedded NATS JetStream server, the
// coordinator and a node that owns every shard, ticking demo dungeons at a fixed rate.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tickfence/tickfence"
	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/actor/dungeon"
	"github.com/tickfence/tickfence/auth"
	"github.com/tickfence/tickfence/cmd/tickd/internal/demo"
	"github.com/tickfence/tickfence/coordinator"
	"github.com/tickfence/tickfence/internal/metrics"
	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/internal/webguard"
	"github.com/tickfence/tickfence/shard"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/shard/node"
	"github.com/tickfence/tickfence/store"
)

type options struct {
	data            string
	natsURL         string
	natsListen      string
	natsWebSocket   string
	natsWSOrigins   string
	demoPageNATS    string
	creds           string
	authDir         string
	insecure        bool
	tlsCA           string
	tlsCert, tlsKey string
	nodeID          string
	shards          uint
	partitions      uint
	replicas        uint
	tickRate        float64
	tickWorkers     int
	maxCatchUp      time.Duration
	demo            int
	demoPlayers     int
	demoRate        float64
	demoFrameEvery  uint64
	demoIdle        bool
	demoPassivate   time.Duration
	checkpointEvery uint64
	sync            bool
	metricsAddr     string
	metricsAllow    webguard.Hosts
	pprof           bool
	flightDir       string
	flightP99       time.Duration
	gcPercent       int
	procs           int
	summaryEvery    time.Duration
	logLevel        string
	logJSON         bool
	lease           time.Duration
	rideThrough     time.Duration
	noCoordinator   bool
	maxMoves        int
	rebalanceEvery  time.Duration
	handoffTimeout  time.Duration
	shutdownTimeout time.Duration
	blobGCEvery     time.Duration
	blobGCGrace     time.Duration
	maxCmdDelay     time.Duration
	maxPending      int
	playerCmds      float64
	playerCreates   float64
	writeStrategy   string
	dataHistory     int64
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "server" {
		os.Exit(serverMain(os.Args[2:]))
	}
	var o options
	fs := flag.NewFlagSet("tickd", flag.ContinueOnError)
	host, _ := os.Hostname()
	fs.StringVar(&o.data, "data", "tickd-data", "directory of the embedded JetStream server's files (reused on restart)")
	fs.StringVar(&o.natsURL, "nats", os.Getenv("NATS_URL"), "use this external NATS server instead of the embedded one (default $NATS_URL)")
	fs.StringVar(&o.natsListen, "nats-listen", "", "also accept NATS clients (tickctl, the nats CLI) on this HOST:PORT; off by default")
	fs.StringVar(&o.natsWebSocket, "nats-websocket", "", "also accept NATS clients over WebSocket on this HOST:PORT (browsers: the player demo page at\n"+
		"http://<--metrics>/demo/); off by default; loopback only without --auth, unless --insecure")
	fs.StringVar(&o.natsWSOrigins, "nats-websocket-origin", "", "comma-separated origins (http://HOST:PORT) of the web pages allowed to use --nats-websocket, * for any\n"+
		"(default: this node's own demo page, http://<--metrics>)")
	fs.StringVar(&o.demoPageNATS, "demo-page-nats", "", "the NATS WebSocket URL the demo page at /demo/ connects the browser to, e.g. ws://127.0.0.1:4223 of\n"+
		"tickd server --websocket (default: the embedded server's --nats-websocket)")
	fs.StringVar(&o.creds, "creds", auth.CredsFromEnv(), "NATS credentials file of this node (node.creds from tickctl auth init; default $NATS_CREDS)")
	fs.StringVar(&o.authDir, "auth", "", "the embedded server enforces the roles of this directory (tickctl auth init DIR); the node\n"+
		"connects with its node.creds unless --creds says otherwise")
	fs.BoolVar(&o.insecure, "insecure", false, "let --nats-listen and --nats-websocket take an address other than loopback without --auth, and\n"+
		"--nats-websocket without an origin accept any page (anyone reaching them can rewrite shards and records)")
	fs.StringVar(&o.tlsCA, "tls-ca", "", "connect to --nats over TLS, verifying the server's certificate against this CA (ca.pem of tickctl auth init --tls)")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "with --tls-ca: the client certificate (PEM) to present to a server that requires one (tickd server --tls-verify; tickctl auth cert DIR NAME makes a dev one)")
	fs.StringVar(&o.tlsKey, "tls-key", "", "the key of --tls-cert")
	fs.StringVar(&o.nodeID, "node-id", defaultNodeID(host), "this node's ID, 1..64 of A-Z a-z 0-9 _ -; the default is made of the host name: its first label,\n"+
		"lowercased, any other character as -, cut to 64 with a hash of the name")
	fs.UintVar(&o.shards, "shards", 256, "shard count of a new cluster (fixed once created)")
	fs.UintVar(&o.partitions, "partitions", 1, "data buckets per epoch of a new cluster, 1..shards (fixed once created): shard S lives in\n"+
		"partition S mod P, and on a JetStream cluster the partitions' stream leaders spread the writes over the servers\n"+
		"(P ≥ the number of servers)")
	fs.UintVar(&o.replicas, "replicas", 1, "replicas of every bucket and stream of a new cluster: 1, 3 or 5 (fixed once created; 3 and 5 need a\n"+
		"JetStream cluster of at least as many servers: tickd server --cluster). R3 survives the loss of one server, R5 of two")
	fs.Float64Var(&o.tickRate, "tick-rate", 20, "ticks per second of every instance whose kind sets none (Hz; actor.KindOptions.TickRate)")
	fs.IntVar(&o.tickWorkers, "tick-workers", 0, "goroutines that tick the instances (0: 16 per GOMAXPROCS, 16 to 64: more than the cores\n"+
		"hold the tick schedule better beside the command path)")
	fs.DurationVar(&o.maxCatchUp, "max-catch-up", actor.DefaultCatchUp, "how far behind its schedule the tick engine may fall and still run every tick, late (the owed\n"+
		"ticks back to back); beyond it, it skips to the present and counts the skipped ticks (rounded up to whole\n"+
		"periods, at least 2)")
	fs.IntVar(&o.demo, "demo", 100, "create demo dungeons demo-0 … demo-N-1 if missing and play them with simulated players (0: none)")
	fs.IntVar(&o.demoPlayers, "demo-players", 4, "simulated players per demo dungeon (at least 1); each joins, then attacks")
	fs.Float64Var(&o.demoRate, "demo-rate", 1, "attacks per second of each demo player, on average (> 0); commands/s ≈ N × players × rate")
	fs.Uint64Var(&o.demoFrameEvery, "demo-frame-every", 5, "every demo dungeon publishes a frame (boss HP, phase, players; ~190 bytes) every this many ticks\n"+
		"on tickfence.out.<S>.<id>, for watchers (tickctl instance watch); 0: none. 1 costs ~3 µs of node CPU and ~2.5 µs\n"+
		"of server CPU per frame (tickbench frames): at 2 500 dungeons, 50 000 frames/s")
	fs.BoolVar(&o.demoIdle, "demo-idle", false, "create the demo dungeons and play nothing: idle instances (what --demo-passivate is for)")
	fs.DurationVar(&o.demoPassivate, "demo-passivate", 0, "the demo dungeon kind passivates a dungeon without a command or a watcher for this long: written,\n"+
		"unloaded (no tick, no timer, a few bytes of index) until its next command or watcher wakes it (0: never; see\n"+
		"actor.KindOptions.Passivate)")
	fs.Uint64Var(&o.checkpointEvery, "checkpoint-every", 20, "write an instance at least every this many ticks even without commands, unless its kind sets\n"+
		"its own (actor.KindOptions.CheckpointEvery)")
	fs.Var((*syncFlag)(&o.sync), "sync", "the embedded server fsyncs every write before it is acknowledged (JetStream sync_interval: always;\n"+
		"also spelled --sync always): it survives a power loss of the machine, not only a kill of the process;\n"+
		"slower. An external server has its own: tickd server --sync, or sync_interval: always in nats-server's config")
	fs.StringVar(&o.metricsAddr, "metrics", "127.0.0.1:9464", "serve Prometheus metrics on HOST:PORT/metrics (empty: off). Off loopback, everything else on it\n"+
		"(the demo page, the profiler, the flight-trace POST) needs a login token, logged once at start as a URL with\n"+
		"?token= ($"+metricsTokenEnv+" supplies your own; set, it is needed on loopback too); /metrics stays open")
	fs.Var(&o.metricsAllow, "metrics-allow-host", "also serve --metrics requests for this Host `NAME` (repeatable, comma-separated; IP addresses,\n"+
		"localhost and --metrics's host are always served: any other name is refused, against DNS rebinding)")
	fs.BoolVar(&o.pprof, "pprof", false, "also serve Go's profiler (net/http/pprof) under /debug/pprof/ on the --metrics listener, and sample\n"+
		"lock contention and blocking for its mutex and block profiles (costs a little CPU); for diagnosis: whoever\n"+
		"reaches the listener can read goroutine stacks and the command line")
	fs.StringVar(&o.flightDir, "flight-trace", "", "keep the last seconds of Go's execution trace in memory (up to 15 s or 24 MB) and write them to this directory when a\n"+
		"summary interval skips ticks (or, with --flight-trace-p99, runs late): what held the tick workers, for\n"+
		"go tool trace FILE; at most one file a minute; a POST to /debug/flight-trace on the --metrics listener writes\n"+
		"one at once (curl -X POST http://127.0.0.1:9464/debug/flight-trace); costs CPU while on, so for diagnosis (empty: off)")
	fs.DurationVar(&o.flightP99, "flight-trace-p99", 0, "with --flight-trace, also write a trace when an interval's tick p99 lateness is over this (0: only on skipped ticks)")
	fs.IntVar(&o.gcPercent, "gc-percent", 400, "the garbage collector's GOGC: heap growth (%) between collections; higher spends memory to save\n"+
		"CPU and tick latency (at 2 500 demo dungeons 400 took the tick p99 from ~8 ms to ~2.5 ms for ~75 MB more heap).\n"+
		"Negative: off. The GOGC environment variable wins unless this flag is given")
	fs.IntVar(&o.procs, "procs", 0, fmt.Sprintf("Go's GOMAXPROCS: goroutines running at once; 0: twice what Go would choose (%d here). Twice lets the\n"+
		"OS preempt a busy thread for a tick worker its timer woke, which Go's own scheduler may do only after 10 ms: at 5 000 demo\n"+
		"dungeons on 2 CPUs, medians of the 5 s tick p99s 4.3-6.5 ms with 4 against 6.8-9.3 ms with 2, for state writes ~9 ms\n"+
		"slower on average; 8 made writes ~10x slower. Setting it stops Go following CPU quota changes: in a CPU-limited\n"+
		"container give the quota. A valid GOMAXPROCS environment variable wins unless this flag is given", 2*runtime.GOMAXPROCS(0)))
	fs.DurationVar(&o.summaryEvery, "summary-every", 5*time.Second, "interval of the one-line summary log")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.BoolVar(&o.logJSON, "log-json", false, "log JSON lines instead of text")
	fs.DurationVar(&o.lease, "lease", 2*time.Second, "node and coordinator lease TTL (whole seconds); a dead node's shards move after about this long")
	fs.DurationVar(&o.rideThrough, "ride-through", 0, "how long a node whose lease cannot be renewed (the control bucket electing a leader) keeps ticking on the fence before it pauses its shards (e.g. 15s; 0: pause at once)")
	fs.BoolVar(&o.noCoordinator, "no-coordinator", false, "never become the coordinator leader (every node is a candidate otherwise)")
	fs.IntVar(&o.maxMoves, "max-moves", 8, "coordinator: graceful moves under way at once (failover is exempt)")
	fs.DurationVar(&o.rebalanceEvery, "rebalance-every", time.Second, "coordinator: minimum interval between load-based rebalancing rounds")
	fs.Int64Var(&o.dataHistory, "data-history", 1, "revisions kept per key when this node creates the data buckets (fault tests keep every one to check the history)")
	fs.DurationVar(&o.maxCmdDelay, "max-command-delay", 250*time.Millisecond, "admission control: when for 100 ms every command took longer than this from arrival to answer, refuse new ones with busy until answers are quick again; a command that waited this long in the node's queue before the node read it is refused busy at once (negative, e.g. -1s: admit everything)")
	fs.IntVar(&o.maxPending, "max-pending-commands", 50000, "admission control: commands admitted and not answered yet, at most; more are refused with busy")
	fs.Float64Var(&o.playerCmds, "player-commands", natscmd.DefaultQuota.Commands, "commands per second each player (an untrusted sender: the players' account) may send this node, bursts of twice that; more are refused rate_limited (0: no limit)")
	fs.Float64Var(&o.playerCreates, "player-creates", natscmd.DefaultQuota.CreatesPerMinute, "instances per minute each player may create on this node, bursts of 10; more are refused rate_limited (0: no limit)")
	fs.StringVar(&o.writeStrategy, "write-strategy", "auto", "how records are written: single (each its own fenced write, pipelined), batches (a shard's records of a\n"+
		"tick as one atomic batch, one in flight per shard) or auto (batches when the cluster's buckets have replicas: a\n"+
		"replicated stream's leader takes one fenced write per shard at a time)")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", envShutdownTimeout(), "on SIGTERM or SIGINT: exit within this long, having handed off what the other nodes could take\n"+
		"and flushed and released the rest (the hand-offs get all but a third of it, at most 2 s, kept for the\n"+
		"flush); what is left then (no NATS server reachable) is logged once and moves when the lease expires.\n"+
		"Keep it under your orchestrator's grace period (Kubernetes: 30 s). $"+shutdownTimeoutEnv+" sets the default")
	fs.DurationVar(&o.handoffTimeout, "handoff-timeout", 5*time.Second, "coordinator: reassign a moving shard anyway if its old owner has not released it by then")
	fs.DurationVar(&o.blobGCEvery, "blob-gc-every", coordinator.DefaultBlobGCEvery, "coordinator leader: collect unreferenced large-state blobs this often (negative: never; only\n"+
		"where this node's connection may delete them: the embedded server without --auth, or no credentials; else run tickctl gc as admin)")
	fs.DurationVar(&o.blobGCGrace, "blob-gc-grace", store.DefaultBlobGrace, "keep unreferenced blobs younger than this (a write on its way has uploaded its blob, not yet its record)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `tickd runs a tickfence node.

With no flags it starts an embedded NATS JetStream server (data in ./tickd-data), becomes the only
node of a 256-shard cluster, ticks 100 demo dungeons at 20 Hz with simulated players, serves
Prometheus metrics on 127.0.0.1:9464/metrics and logs a summary line every 5 s. Ctrl-C flushes every
instance's state and exits.

Usage:
  tickd [flags]                              a node (and coordinator candidate)
  tickd server --listen HOST:PORT --data DIR only the embedded JetStream server, for multi-node setups;
                                             with --cluster, one server of a JetStream cluster
                                             (tickd server --help)

Flags:
`)
		fs.PrintDefaults()
		fmt.Fprintf(fs.Output(), `
Environment:
  NATS_URL   default of --nats
  NATS_CREDS default of --creds

Examples:
  tickd                                   # everything embedded
  tickd --nats-listen 127.0.0.1:4222      # let tickctl and the nats CLI connect
  tickd --nats-websocket 127.0.0.1:4223   # and browsers: the player demo page, http://127.0.0.1:9464/demo/
  tickd --demo 2500 --demo-rate 2 --pprof # offers 20 000 commands/s; profile it:
      go tool pprof -top http://127.0.0.1:9464/debug/pprof/profile?seconds=30
  tickd server --listen 127.0.0.1:4222 --data nats-data &
  tickd --nats nats://127.0.0.1:4222 --node-id n1 --metrics 127.0.0.1:9465
  tickd --nats nats://127.0.0.1:4222 --node-id n2 --metrics 127.0.0.1:9466 --demo 0
  # on a three-server JetStream cluster (tickd server --help): R3 buckets, three partitions
  tickd --nats nats://10.0.0.1:4222,nats://10.0.0.2:4222,nats://10.0.0.3:4222 --replicas 3 --partitions 3

Profiles (what an acknowledged write survives):
  tickd                               a kill of the process (embedded server, no fsync)
  tickd --sync                        a power loss of the machine (embedded server fsyncs every write)
  3 servers, tickd --replicas 3       the loss of any one server
  5 servers, tickd --replicas 5       the loss of any two servers
A node that joins a cluster without --shards, --partitions or --replicas takes the cluster's own; given
explicitly, a value other than the cluster's is refused.

Signals: SIGINT or SIGTERM hands every shard off to the other nodes (or, alone, flushes and
releases them) and exits, within --shutdown-timeout; a second signal exits at once.
`)
	}
	parseFlags(fs, syncArgs(os.Args[1:]))
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "tickd: unexpected argument %q (see tickd --help)\n", fs.Arg(0))
		os.Exit(2)
	}
	var set shapeSet
	gcSet, procsSet := false, false
	fs.Visit(func(f *flag.Flag) {
		procsSet = procsSet || f.Name == "procs"
		set.Shards = set.Shards || f.Name == "shards"
		set.Partitions = set.Partitions || f.Name == "partitions"
		set.Replicas = set.Replicas || f.Name == "replicas"
		gcSet = gcSet || f.Name == "gc-percent"
	})
	if gcSet || os.Getenv("GOGC") == "" {
		debug.SetGCPercent(o.gcPercent)
	}
	if o.procs < 0 {
		fmt.Fprintln(os.Stderr, "tickd: --procs must be 0 (twice what Go would choose) or more")
		os.Exit(2)
	}
	if env, err := strconv.Atoi(os.Getenv("GOMAXPROCS")); procsSet || err != nil || env < 1 { // Go ignores an invalid one too
		if o.procs == 0 {
			o.procs = 2 * runtime.GOMAXPROCS(0)
		}
		runtime.GOMAXPROCS(o.procs)
	}
	log, err := newLogger(o.logLevel, o.logJSON)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tickd:", err)
		os.Exit(2)
	}
	log.Info("go runtime", "gomaxprocs", runtime.GOMAXPROCS(0), "cpus", runtime.NumCPU(), "gogc", gcPercent())
	if err := run(o, set, log); err != nil {
		if !errors.Is(err, errLogged) {
			log.Error("tickd failed", "err", err)
		}
		os.Exit(1)
	}
}

// gcPercent is the garbage collector's GOGC setting now.
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

func newLogger(level string, asJSON bool) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: l}
	if asJSON {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
}

// shapeSet says which of a new cluster's shape flags were given (an existing cluster with another
// value is then an error; coordinator.Require).
type shapeSet = coordinator.Require

func run(o options, set shapeSet, log *slog.Logger) error {
	if err := store.ValidID(o.nodeID); err != nil {
		return fmt.Errorf("--node-id: %w", err)
	}
	if o.shards == 0 || o.shards > 1<<16 {
		return fmt.Errorf("--shards must be in 1..65536, got %d", o.shards)
	}
	if o.partitions == 0 || o.partitions > o.shards {
		return fmt.Errorf("--partitions must be in 1..shards (%d), got %d", o.shards, o.partitions)
	}
	if o.replicas != 1 && o.replicas != 3 && o.replicas != 5 {
		return fmt.Errorf("--replicas must be 1, 3 or 5, got %d (an even count survives no more server losses than the odd one below it)", o.replicas)
	}
	if o.replicas > 1 && o.natsURL == "" {
		return fmt.Errorf("--replicas %d needs a JetStream cluster of at least %d servers, not the embedded server: start them with "+
			"tickd server --cluster (see tickd server --help) and give this node --nats", o.replicas, o.replicas)
	}
	if o.checkpointEvery == 0 {
		return errors.New("--checkpoint-every must be at least 1")
	}
	if o.demoPassivate < 0 {
		return fmt.Errorf("--demo-passivate must not be negative, got %v", o.demoPassivate)
	}
	if o.tickWorkers < 0 || o.tickWorkers > 4096 {
		return fmt.Errorf("--tick-workers must be in 0..4096 (0: the default), got %d", o.tickWorkers)
	}
	if o.maxCatchUp <= 0 {
		return fmt.Errorf("--max-catch-up must be positive, got %v", o.maxCatchUp)
	}
	if err := store.ValidTTL(o.lease); err != nil {
		return fmt.Errorf("--lease: %w", err)
	}
	if o.shutdownTimeout <= 0 {
		return fmt.Errorf("--shutdown-timeout must be positive, got %v (from $%s or the flag)", o.shutdownTimeout, shutdownTimeoutEnv)
	}
	every, err := demoEvery(o.demoPlayers, o.demoRate)
	if err != nil {
		return err
	}
	if o.dataHistory < 1 {
		return fmt.Errorf("--data-history must be at least 1, got %d", o.dataHistory)
	}
	if _, err := shard.ParseWriteStrategy(o.writeStrategy); err != nil {
		return fmt.Errorf("--write-strategy: %w", err)
	}
	if err := checkPlayerFlags(o); err != nil {
		return err
	}
	if o.pprof && o.metricsAddr == "" {
		return errors.New("--pprof serves the profiler on the --metrics listener: give --metrics an address")
	}
	if o.summaryEvery <= 0 {
		return fmt.Errorf("--summary-every must be positive, got %v", o.summaryEvery)
	}
	if o.flightP99 != 0 && o.flightDir == "" {
		return errors.New("--flight-trace-p99 needs --flight-trace DIR (where the traces go)")
	}
	if o.flightP99 < 0 {
		return fmt.Errorf("--flight-trace-p99 must not be negative, got %v", o.flightP99)
	}
	log = log.With("node", o.nodeID)
	var fl *flight
	if o.flightDir != "" {
		var err error
		if fl, err = startFlight(o.flightDir, "tickd", 15*time.Second, o.flightP99, log); err != nil {
			return err
		}
		defer fl.stop()
	}
	// First signal: hand off and exit. Second: exit at once.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	ctx, shutdown := context.WithCancel(context.Background())
	defer shutdown()
	go func() {
		<-sigs
		log.Info("signal: handing shards off, then exiting (signal again to exit at once)")
		shutdown()
		<-sigs
		log.Warn("second signal: exiting at once")
		os.Exit(1)
	}()

	reg := runtimeRegistry()
	m := metrics.For(reg) // the metrics the node, engine and coordinator share, read by the summary
	page := &playerPage{o: o}
	stopMetrics, err := serveMetrics(o, reg, page, fl, log)
	if err != nil {
		return err
	}
	defer stopMetrics()
	nopts := nodeOptions(o, set, reg, log)
	nopts.WebSocket, nopts.WebSocketOrigins = o.natsWebSocket, webSocketOrigins(o, page.addr)
	node, err := tickfence.Start(ctx, nopts)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer node.Close()
	page.node.Store(node)

	var driver *demo.Driver
	if o.demo > 0 && ctx.Err() == nil {
		client, err := node.Client() // the players' own connection
		if err != nil {
			return err
		}
		// The simulated players keep attacking the same dungeons: their next command acknowledges.
		// Acknowledging alone after each answer cost a quarter of the commands answered ok at 5 000
		// demo dungeons on an overloaded 2-core machine (4 501/s vs 6 010/s, the same run).
		client.NoIdleAck = true
		dctx, cancel := context.WithTimeout(ctx, time.Minute)
		driver, err = demo.Start(dctx, demo.Config{Client: client, Instances: o.demo,
			Players: o.demoPlayers, Every: every, Idle: o.demoIdle, Logger: log})
		cancel()
		if err != nil && ctx.Err() == nil {
			log.Error("demo dungeons could not be created", "err", err)
		}
	}
	summarize(ctx, o.summaryEvery, node.Shard(), node.Engine(), m, driver, fl, log)

	// The deadline counts from the signal: the demo players' stop comes out of it too.
	began := time.Now()
	lctx, cancel := context.WithTimeout(context.Background(), o.shutdownTimeout)
	defer cancel()
	if driver != nil {
		driver.Stop()
	}
	n := 0
	if h := node.Shard().Host(); h != nil {
		n = h.Instances()
	}
	err = node.Stop(lctx)
	if le, ok := leaveError(err); ok {
		// Once, with what kept them: the shards' own errors ("still loading: context deadline
		// exceeded") say only that time ran out.
		log.Error("left the cluster with shards not handed off: they move once this node's lease expires, their unwritten ticks lost",
			"shards", le.Shards, "held", len(le.Held), "cause", leaveCause(le), "shutdown_timeout", o.shutdownTimeout,
			"took", time.Since(began).Round(time.Millisecond), "instances_at_signal", n)
		return errLogged
	}
	if err != nil {
		return err
	}
	log.Info("left the cluster: every shard handed off or flushed and released", "instances_at_signal", n,
		"took", time.Since(began).Round(time.Millisecond))
	return nil
}

// leaveCause is why a leave left shards behind: the node's diagnosis, or the first shard's error.
func leaveCause(le *node.LeaveError) string {
	if le.Cause != "" {
		return le.Cause
	}
	if j, ok := le.Err.(interface{ Unwrap() []error }); ok && len(j.Unwrap()) > 0 {
		return j.Unwrap()[0].Error()
	}
	return le.Err.Error()
}

// leaveError is err's *node.LeaveError, if it has one.
func leaveError(err error) (*node.LeaveError, bool) {
	var le *node.LeaveError
	return le, errors.As(err, &le)
}

// errLogged is a failure run has logged itself: main exits 1 without logging it again.
var errLogged = errors.New("logged")

// shutdownTimeoutEnv is the default of --shutdown-timeout.
const shutdownTimeoutEnv = "TICKFENCE_SHUTDOWN_TIMEOUT"

// envShutdownTimeout is $TICKFENCE_SHUTDOWN_TIMEOUT as a duration, 5 s if unset, and -1 if it is
// not a duration (run refuses it).
func envShutdownTimeout() time.Duration {
	v := os.Getenv(shutdownTimeoutEnv)
	if v == "" {
		return 5 * time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return -1
	}
	return d
}

// nodeOptions are the node's options from the flags: NATS (embedded unless --nats/NATS_URL
// names a server), the store, the engine, the shards' host, the command transport and a
// coordinator candidate (package tickfence), with the demo dungeon as the only kind.
func nodeOptions(o options, set shapeSet, reg prometheus.Registerer, log *slog.Logger) tickfence.Options {
	beforeWrite, beforeRelease := faultHooks(log)
	return tickfence.Options{
		Kinds: []actor.Kind{dungeon.Kind{FrameEvery: o.demoFrameEvery, Options: actor.KindOptions{Passivate: o.demoPassivate}}}, NodeID: o.nodeID,
		NATS: o.natsURL, DataDir: o.data, Listen: o.natsListen, Sync: o.sync, Creds: o.creds, Auth: o.authDir, Insecure: o.insecure, TLSCA: o.tlsCA, TLSCert: o.tlsCert, TLSKey: o.tlsKey,
		Shards: uint32(o.shards), RequireShards: set.Shards, Partitions: uint32(o.partitions), RequirePartitions: set.Partitions,
		Replicas: uint32(o.replicas), RequireReplicas: set.Replicas, TickRate: o.tickRate, TickWorkers: o.tickWorkers, MaxCatchUp: o.maxCatchUp, CheckpointEvery: o.checkpointEvery,
		LeaseTTL: o.lease, RideThrough: o.rideThrough, DataHistory: o.dataHistory,
		NoCoordinator: o.noCoordinator, MaxMoves: o.maxMoves, RebalanceEvery: o.rebalanceEvery, HandOffTimeout: o.handoffTimeout,
		BlobGCEvery: o.blobGCEvery, BlobGCGrace: o.blobGCGrace,
		MaxCommandDelay: o.maxCmdDelay, MaxPendingCommands: o.maxPending, WriteStrategy: shard.WriteStrategy(o.writeStrategy),
		PlayerQuota: &natscmd.Quota{Commands: o.playerCmds, Burst: int(2 * o.playerCmds), CreatesPerMinute: o.playerCreates, CreateBurst: natscmd.DefaultQuota.CreateBurst},
		Registerer:  reg, Logger: log, BeforeWrite: beforeWrite, BeforeRelease: beforeRelease}
}

// serveMetrics serves reg on --metrics (and the profiler with --pprof); stop closes it.
func serveMetrics(o options, reg *prometheus.Registry, page *playerPage, fl *flight, log *slog.Logger) (stop func(), err error) {
	if o.metricsAddr == "" {
		return func() {}, nil
	}
	return serveHTTP(o.metricsAddr, o.metricsAllow, reg, o.pprof, fl, log, func(mux *http.ServeMux, addr string) {
		mux.Handle(playerPath, page.handler())
		page.addr = addr
		if o.natsWebSocket != "" || o.demoPageNATS != "" {
			log.Info("player demo page", "url", "http://"+addr+playerPath)
		}
	})
}

// runtimeRegistry is a registry with Go's and the process's collectors, as every tickd serves.
func runtimeRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// metricsTokenEnv supplies the --metrics listener's login token instead of a random one.
const metricsTokenEnv = "TICKFENCE_METRICS_TOKEN"

// serveHTTP serves reg's metrics on addr, the profiler with pprof, the flight recorder's POST
// with fl, and what each of more adds; stop closes it. The listener is guarded (package
// webguard): only its own Host names (allow adds some), and off loopback (or with
// $TICKFENCE_METRICS_TOKEN set) everything but /metrics needs the login token logged once here.
func serveHTTP(addr string, allow []string, reg *prometheus.Registry, pprof bool, fl *flight, log *slog.Logger, more ...func(mux *http.ServeMux, addr string)) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics: %w", err)
	}
	guardAddr := webguard.Addr(addr, ln.Addr())
	addr = ln.Addr().String()
	login := "/" // the path of the login URL logged: a page that is there
	switch {
	case pprof:
		login = "/debug/pprof/"
	case len(more) > 0:
		login = playerPath // the node's demo page (serveMetrics)
	}
	guard, err := webguard.New(webguard.Options{Name: "metrics", Addr: guardAddr, AllowHosts: allow, AllowFlag: "--metrics-allow-host",
		TokenEnv: metricsTokenEnv, Open: []string{"/metrics", "/healthz"}, LoginPath: login, Log: log})
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("--metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	if pprof {
		servePprof(mux)
	}
	if fl != nil {
		mux.Handle("/debug/flight-trace", fl.handler())
	}
	for _, m := range more {
		m(mux, addr)
	}
	hs := &http.Server{Handler: guard.Wrap(mux), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	log.Info("metrics", "url", "http://"+addr+"/metrics")
	if pprof {
		log.Info("pprof", "url", "http://"+addr+"/debug/pprof/")
	}
	return func() { _ = hs.Close() }, nil
}

// demoEvery validates --demo-players and --demo-rate and returns the mean time between two
// attacks of one player.
func demoEvery(players int, rate float64) (time.Duration, error) {
	if players < 1 {
		return 0, fmt.Errorf("--demo-players must be at least 1, got %d", players)
	}
	// !(rate > 0) also refuses NaN.
	if !(rate > 0) || math.IsInf(rate, 0) || time.Duration(float64(time.Second)/rate) < time.Microsecond {
		return 0, fmt.Errorf("--demo-rate must be a number of attacks per player per second in (0, 1e6], got %v", rate)
	}
	return time.Duration(float64(time.Second) / rate), nil
}

// servePprof registers net/http/pprof on mux (the metrics listener's own mux, never
// http.DefaultServeMux) and turns on the sampling behind its mutex and block profiles.
func servePprof(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprof.Index) // also heap, allocs, goroutine, mutex, block, …
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	// One contended unlock in 10, and blocking sampled about once per 100 µs blocked (debiased
	// by the runtime): about 2 % of the CPU at 2 500 demo dungeons, and enough to show a lock
	// held across I/O on the tick path.
	runtime.SetMutexProfileFraction(10)
	runtime.SetBlockProfileRate(int(100 * time.Microsecond))
}

func summarize(ctx context.Context, every time.Duration, nd *node.Node, engine *actor.Engine, m *metrics.Node, d *demo.Driver, fl *flight, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	lastTicks, lastWrites, lastAt, lastSkipped := engine.Ticks(), m.WritesOK(), time.Now(), engine.Skipped()
	var lastSent uint64
	m.TakeLateness() // start a fresh window
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		secs := now.Sub(lastAt).Seconds()
		ticks, writes := engine.Ticks(), m.WritesOK()
		p99 := m.TakeLateness().Quantile(0.99)
		instances, shards := 0, 0
		if h := nd.Host(); h != nil {
			instances, shards = h.Instances(), len(h.Shards())
		}
		attrs := []any{"instances", instances, "shards", shards,
			"ticks_per_s", int((float64(ticks-lastTicks) / secs) + 0.5),
			"p99_lateness", p99.String(),
			"writes_per_s", int((float64(writes-lastWrites) / secs) + 0.5),
			"skipped_ticks", engine.Skipped()}
		if d != nil {
			sent, failed := d.Sent()
			rtt := d.RoundTrips()
			attrs = append(attrs, "commands_per_s", int(float64(sent-lastSent)/secs+0.5), "commands_unanswered", failed,
				"command_p50", rtt.Quantile(0.5).String(), "command_p99", rtt.Quantile(0.99).String())
			lastSent = sent
		}
		log.Info("summary", attrs...)
		skipped := engine.Skipped()
		fl.check(now, skipped-lastSkipped, p99)
		lastTicks, lastWrites, lastAt, lastSkipped = ticks, writes, now, skipped
	}
}

// serverMain runs only the embedded JetStream server (`tickd server`): nodes connect to it with
// --nats, so freezing or killing a node never freezes the store. With --cluster it is one server
// of a JetStream cluster (R3/R5 buckets: DESIGN 10).
func serverMain(args []string) int {
	fs := flag.NewFlagSet("tickd server", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:4222", "HOST:PORT for NATS clients")
	data := fs.String("data", "tickd-server-data", "directory of JetStream's files (reused on restart)")
	sync := new(bool)
	fs.Var((*syncFlag)(sync), "sync", "fsync every write before it is acknowledged (JetStream sync_interval: always; also spelled\n"+
		"--sync always): an acknowledged write survives a power loss of this machine, not only a kill of the process; slower")
	clusterAddr := fs.String("cluster", "", "HOST:PORT to accept the routes of the other servers of a JetStream cluster on (empty: standalone)")
	routes := fs.String("routes", "", "comma-separated URLs of the cluster's servers, nats-route://HOST:PORT (or nats://HOST:PORT);\n"+
		"this server's own may be in the list, so every server can be given the same one")
	name := fs.String("server-name", "", "this server's name (default \"tickd-server\" standalone); required with --cluster: unique in the\n"+
		"cluster and the same on every restart, as JetStream's peers know each other by name")
	clusterName := fs.String("cluster-name", natsserver.DefaultClusterName, "the JetStream cluster's name; the same on every server of it")
	noAdvertise := fs.Bool("no-advertise", false, "with --cluster: do not tell clients the other servers' client URLs (nats-server's cluster\n"+
		"no_advertise): clients reconnect only to the URLs they were given (tickd --nats lists every server), so a\n"+
		"client behind a proxy or NAT never tries an address it cannot reach, and one partitioned from its servers\n"+
		"stays partitioned instead of reconnecting around the partition")
	logJSON := fs.Bool("log-json", false, "log JSON lines instead of text (the NATS server's own warnings and errors too)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error (debug adds the NATS server's notices)")
	authDir := fs.String("auth", "", "enforce the roles of this directory (tickctl auth init DIR): every client needs one of its credentials")
	insecure := fs.Bool("insecure", false, "let --listen and --websocket take an address other than loopback without --auth, and --websocket\n"+
		"without --websocket-origin accept any page (anyone reaching them can rewrite shards and records)")
	tlsCert := fs.String("tls-cert", "", "TLS certificate of this server (PEM) for clients and, with --cluster, routes (tickctl auth init --tls: server.pem)")
	tlsKey := fs.String("tls-key", "", "its key (server-key.pem)")
	tlsCA := fs.String("tls-ca", "", "the CA routes verify each other against (required with --tls-cert and --cluster; ca.pem)")
	tlsVerify := fs.Bool("tls-verify", false, "clients must present a certificate signed by --tls-ca")
	webSocket := fs.String("websocket", "", "also accept NATS clients over WebSocket on this HOST:PORT (browsers: tickd's player demo page,\n"+
		"tickd --demo-page-nats ws://HOST:PORT); wss with --tls-cert; loopback only without --auth, unless --insecure")
	wsOrigins := fs.String("websocket-origin", "", "comma-separated origins (http://HOST:PORT) of the web pages allowed to use --websocket, * for\n"+
		"any; required without --auth (any page a browser visits could open the socket otherwise)")
	metricsAddr := fs.String("metrics", "", "serve Prometheus metrics on HOST:PORT/metrics: the server's messages and bytes in and out, bytes queued\n"+
		"to slow readers, connections, JetStream's usage, and Go's runtime (empty: off; e.g. 127.0.0.1:9470); and\n"+
		"HOST:PORT/healthz, the readiness of a rolling restart: 200 once this server is current with the meta leader\n"+
		"and with every stream it holds a replica of (JSON: each stream, its leader, whether this replica is current),\n"+
		"503 before (and while it stops): take the next server down only after a 200 from the restarted one. Off loopback,\n"+
		"--pprof and --flight-trace on it need a login token, logged once at start as a URL with ?token= ($"+metricsTokenEnv+"\n"+
		"supplies your own; set, it is needed on loopback too); /metrics stays open")
	var metricsAllow webguard.Hosts
	fs.Var(&metricsAllow, "metrics-allow-host", "also serve --metrics requests for this Host `NAME` (repeatable, comma-separated; IP addresses,\n"+
		"localhost and --metrics's host are always served: any other name is refused, against DNS rebinding)")
	pprofOn := fs.Bool("pprof", false, "also serve Go's profiler (net/http/pprof) under /debug/pprof/ on the --metrics listener, and sample\n"+
		"lock contention and blocking for its mutex and block profiles (costs a little CPU); for diagnosis: whoever\n"+
		"reaches the listener can read goroutine stacks and the command line")
	lameDuck := fs.Duration("lame-duck", natsserver.DefaultLameDuck, "on SIGTERM or SIGINT, with --cluster: first move the leadership of every stream and consumer this\n"+
		"server leads to the others (up to 10 s), then lame duck mode: stop accepting clients, tell them and the routes, stop\n"+
		"JetStream here, and close the clients a few at a time over this long (after a fifth of it, at most 2 s), so they\n"+
		"reconnect to the other servers while their requests still reach the leaders: a rolling restart leaves no request\n"+
		"unanswered (0: stop at once; a second signal always does). A standalone server stops at once")
	flightDir := fs.String("flight-trace", "", "keep the last seconds of Go's execution trace in memory (up to 15 s or 24 MB); a POST to\n"+
		"/debug/flight-trace on the --metrics listener writes them to a file in this directory (at most one per 5 s;\n"+
		"go tool trace FILE): what the server was doing when clients saw a stall; costs CPU while on (empty: off)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `tickd server runs only the embedded NATS JetStream server that tickd nodes share: on its own, or
as one server of a JetStream cluster (--cluster), for replicated buckets (tickd --replicas 3).

Usage: tickd server [flags]

Flags:
`)
		fs.PrintDefaults()
		fmt.Fprintf(fs.Output(), `
What each profile survives (an acknowledged write is kept through):
  tickd server                     a kill of the server process; a power loss may lose the last writes
  tickd server --sync              a power loss of that machine
  3 servers, tickd --replicas 3    the loss of any one server, power loss included (all three losing power
                                   at once: add --sync on each)
  5 servers, tickd --replicas 5    the loss of any two servers

Examples:
  tickd server --listen 127.0.0.1:4222 --data nats-data
  tickd server --sync --listen 0.0.0.0:4222 --data /var/lib/tickd --auth /etc/tickd/auth   # tickctl auth init /etc/tickd/auth
  # browsers too (the player demo page of a node started with --metrics 127.0.0.1:9465):
  tickd server --listen 127.0.0.1:4222 --websocket 127.0.0.1:4223 --websocket-origin http://127.0.0.1:9465

  # three servers of one cluster (one per machine in production; here, one machine):
  R=nats-route://127.0.0.1:6222,nats-route://127.0.0.1:6223,nats-route://127.0.0.1:6224
  tickd server --server-name s1 --listen 127.0.0.1:4222 --cluster 127.0.0.1:6222 --routes $R --data d1 --sync &
  tickd server --server-name s2 --listen 127.0.0.1:4223 --cluster 127.0.0.1:6223 --routes $R --data d2 --sync &
  tickd server --server-name s3 --listen 127.0.0.1:4224 --cluster 127.0.0.1:6224 --routes $R --data d3 --sync &
  tickd --nats nats://127.0.0.1:4222,nats://127.0.0.1:4223,nats://127.0.0.1:4224 --replicas 3 --partitions 3

Signals: with --cluster, SIGINT or SIGTERM stops gracefully (--lame-duck: leaderships moved to the
other servers, then lame duck mode); a second signal stops at once. For a rolling restart, start the
next server's stop only once the restarted one's --metrics /healthz answers 200.
`)
	}
	parseFlags(fs, syncArgs(args))
	log, err := newLogger(*logLevel, *logJSON)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tickd server:", err)
		return 2
	}
	if fs.NArg() > 0 {
		log.Error("tickd server: unexpected argument (see tickd server --help)", "arg", fs.Arg(0))
		return 2
	}
	cfg := natsserver.Config{Listen: *listen, Sync: *sync, Name: *name, Cluster: *clusterAddr, AuthDir: *authDir, Insecure: *insecure, LameDuck: *lameDuck,
		TLSCert: *tlsCert, TLSKey: *tlsKey, TLSCA: *tlsCA, TLSVerify: *tlsVerify, WebSocket: *webSocket,
		Logger: natsserver.SlogLogger(log)}
	if *wsOrigins != "" {
		cfg.WebSocketOrigins = strings.Split(*wsOrigins, ",")
	}
	cfg.DataDir, _ = filepath.Abs(*data)
	if *clusterAddr == "" {
		if *routes != "" {
			log.Error("tickd server: --routes needs --cluster (the address this server accepts routes on)")
			return 2
		}
		if *noAdvertise {
			log.Error("tickd server: --no-advertise needs --cluster (a standalone server has no other servers to advertise)")
			return 2
		}
		if cfg.Name == "" {
			cfg.Name = "tickd-server"
		}
	} else {
		if cfg.Name == "" {
			log.Error("tickd server: --cluster needs --server-name: every server of a JetStream cluster needs a name of its own, " +
				"unique in the cluster and the same on every restart, because JetStream's peers know each other by name")
			return 2
		}
		cfg.ClusterName, cfg.NoAdvertise = *clusterName, *noAdvertise
		for r := range strings.SplitSeq(*routes, ",") {
			if r = strings.TrimSpace(r); r != "" {
				cfg.Routes = append(cfg.Routes, r)
			}
		}
	}
	if (*pprofOn || *flightDir != "") && *metricsAddr == "" {
		log.Error("tickd server: --pprof and --flight-trace are served on the --metrics listener: give --metrics an address")
		return 2
	}
	var fl *flight
	if *flightDir != "" {
		if fl, err = startFlight(*flightDir, "tickd-server", 15*time.Second, 0, log); err != nil {
			log.Error("tickd server", "err", err)
			return 1
		}
		defer fl.stop()
	}
	srv, err := natsserver.Start(cfg)
	if err != nil {
		log.Error("tickd server", "err", err)
		return 1
	}
	if *metricsAddr != "" {
		reg := runtimeRegistry()
		reg.MustRegister(srv.Collector())
		stop, err := serveHTTP(*metricsAddr, metricsAllow, reg, *pprofOn, fl, log, func(mux *http.ServeMux, addr string) {
			mux.Handle("/healthz", healthHandler(srv))
			log.Info("readiness", "url", "http://"+addr+"/healthz")
		})
		if err != nil {
			srv.Stop()
			log.Error("tickd server", "err", err)
			return 1
		}
		defer stop()
	}
	attrs := []any{"name", srv.Name(), "url", srv.ClientURL(), "data", cfg.DataDir, "sync_every_write", *sync, "auth", *authDir != "", "tls", *tlsCert != ""}
	if *webSocket != "" {
		attrs = append(attrs, "websocket", srv.WebSocketURL())
	}
	if *clusterAddr != "" {
		attrs = append(attrs, "cluster", srv.ClusterName(), "route_url", srv.RouteURL(), "routes", strings.Join(cfg.Routes, ","),
			"advertise", !*noAdvertise)
	}
	log.Info("NATS JetStream server ready", attrs...)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	<-sigs
	if *lameDuck <= 0 || *clusterAddr == "" {
		log.Info("shutting down")
		srv.Stop()
		return 0
	}
	log.Info("stopping gracefully: moving stream leaders to the other servers, then lame duck mode (signal again to stop at once)",
		"lame_duck", *lameDuck)
	go func() {
		<-sigs
		log.Warn("second signal: stopping at once")
		srv.Shutdown()
	}()
	began := time.Now()
	rep, err := srv.GracefulStop(10 * time.Second)
	attrs = []any{"leaderships_moved", rep.Moved, "moved_in", rep.MovedIn.Round(time.Millisecond),
		"lame_duck_took", rep.LameDuck.Round(time.Millisecond), "took", time.Since(began).Round(time.Millisecond)}
	if err != nil || rep.Left.Assets() > 0 {
		log.Warn("stopped; some leaderships did not move before lame duck mode (it moved them itself)",
			append(attrs, "still_led", rep.Left.String(), "err", err)...)
		return 0
	}
	log.Info("stopped gracefully", attrs...)
	return 0
}

// healthHandler serves the server's readiness for a rolling restart (natsserver.Health) as JSON:
// 200 when ready, 503 when not.
func healthHandler(srv *natsserver.Server) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		h := srv.Health()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if !h.Ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(h)
	})
}

// faultHooks returns the fault-injection hooks of the process tests, or nils. Only with
// TICKFENCE_FAULT_HOOKS=1 in the environment. Then SIGUSR1 arms a freeze: the next fenced state
// write stops the whole process (SIGSTOP to itself) just before it is sent — a GC pause at the
// worst moment; SIGCONT resumes it and the write goes out. SIGUSR2 arms a crash: the next fenced
// write kills the process (SIGKILL to itself). TICKFENCE_FAULT_CRASH_HANDOFF=1 kills it in its
// first hand-off, once the instances are flushed but before the move is released.
func faultHooks(log *slog.Logger) (beforeWrite, beforeRelease func(shard uint32, id string)) {
	if os.Getenv("TICKFENCE_FAULT_HOOKS") != "1" {
		return nil, nil
	}
	var freeze, crash, crashHandOff atomic.Bool
	// TICKFENCE_FAULT_CRASH_HANDOFF=1: crash in the first hand-off, before its release.
	crashHandOff.Store(os.Getenv("TICKFENCE_FAULT_CRASH_HANDOFF") == "1")
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGUSR2)
	go func() {
		for sig := range sigs {
			if sig == syscall.SIGUSR1 {
				freeze.Store(true)
				log.Warn("fault hook armed: freezing before the next write")
			} else {
				crash.Store(true)
				log.Warn("fault hook armed: crashing before the next write or hand-off release")
			}
		}
	}()
	stop := func(sig syscall.Signal) {
		_ = syscall.Kill(os.Getpid(), sig)
		// The signal lands a moment after kill returns: wait here so nothing slips out before
		// it. After SIGCONT this sleep is long over and the write goes out at once.
		time.Sleep(100 * time.Millisecond)
	}
	beforeWrite = func(shard uint32, id string) {
		switch {
		case freeze.CompareAndSwap(true, false):
			log.Warn("fault hook: frozen before a write", "shard", shard, "instance", id)
			stop(syscall.SIGSTOP)
		case crash.CompareAndSwap(true, false):
			log.Warn("fault hook: crashing before a write", "shard", shard, "instance", id)
			stop(syscall.SIGKILL)
		}
	}
	beforeRelease = func(shard uint32, _ string) {
		if crashHandOff.CompareAndSwap(true, false) {
			log.Warn("fault hook: crashing in a hand-off before its release", "shard", shard)
			stop(syscall.SIGKILL)
		}
	}
	return beforeWrite, beforeRelease
}
