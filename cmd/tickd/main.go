// Command tickd runs a tickfence node: by default an embedded NATS JetStream server, the
// coordinator and a node that owns every shard, ticking demo dungeons at a fixed rate.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/actor/dungeon"
	"github.com/tickfence/tickfence/coordinator"
	"github.com/tickfence/tickfence/internal/demo"
	"github.com/tickfence/tickfence/internal/metrics"
	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/shard"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/natskv"
)

type options struct {
	data            string
	natsURL         string
	natsListen      string
	nodeID          string
	shards          uint
	tickRate        float64
	demo            int
	checkpointEvery uint64
	sync            bool
	metricsAddr     string
	summaryEvery    time.Duration
	logLevel        string
	logJSON         bool
}

func main() {
	var o options
	fs := flag.NewFlagSet("tickd", flag.ExitOnError)
	host, _ := os.Hostname()
	fs.StringVar(&o.data, "data", "tickd-data", "directory of the embedded JetStream server's files (reused on restart)")
	fs.StringVar(&o.natsURL, "nats", os.Getenv("NATS_URL"), "use this external NATS server instead of the embedded one (default $NATS_URL)")
	fs.StringVar(&o.natsListen, "nats-listen", "", "also accept NATS clients (tickctl, the nats CLI) on this HOST:PORT; off by default")
	fs.StringVar(&o.nodeID, "node-id", host, "this node's ID (instance ID rules: A-Z a-z 0-9 _ -)")
	fs.UintVar(&o.shards, "shards", 256, "shard count of a new cluster (fixed once created)")
	fs.Float64Var(&o.tickRate, "tick-rate", 20, "ticks per second of every instance (Hz)")
	fs.IntVar(&o.demo, "demo", 100, "create demo dungeons demo-0 … demo-N-1 if missing and play them with simulated players (0: none)")
	fs.Uint64Var(&o.checkpointEvery, "checkpoint-every", 20, "write an instance at least every this many ticks even without commands")
	fs.BoolVar(&o.sync, "sync", false, "embedded server fsyncs every write (survives power loss; slower)")
	fs.StringVar(&o.metricsAddr, "metrics", "127.0.0.1:9464", "serve Prometheus metrics on HOST:PORT/metrics (empty: off)")
	fs.DurationVar(&o.summaryEvery, "summary-every", 5*time.Second, "interval of the one-line summary log")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.BoolVar(&o.logJSON, "log-json", false, "log JSON lines instead of text")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `tickd runs a tickfence node.

With no flags it starts an embedded NATS JetStream server (data in ./tickd-data), becomes the only
node of a 256-shard cluster, ticks 100 demo dungeons at 20 Hz with simulated players, serves
Prometheus metrics on 127.0.0.1:9464/metrics and logs a summary line every 5 s. Ctrl-C flushes every
instance's state and exits.

Usage: tickd [flags]

Flags:
`)
		fs.PrintDefaults()
		fmt.Fprintf(fs.Output(), `
Environment:
  NATS_URL   default of --nats

Examples:
  tickd                                   # everything embedded
  tickd --nats-listen 127.0.0.1:4222      # let tickctl and the nats CLI connect
  tickd --nats nats://10.0.0.5:4222 --node-id n1 --demo 0
`)
	}
	_ = fs.Parse(os.Args[1:])
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "tickd: unexpected argument %q (see tickd --help)\n", fs.Arg(0))
		os.Exit(2)
	}
	shardsSet := false
	fs.Visit(func(f *flag.Flag) { shardsSet = shardsSet || f.Name == "shards" })
	log, err := newLogger(o.logLevel, o.logJSON)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tickd:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, shardsSet, log); err != nil {
		log.Error("tickd failed", "err", err)
		os.Exit(1)
	}
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

func newSession() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func run(ctx context.Context, o options, shardsSet bool, log *slog.Logger) error {
	if err := store.ValidID(o.nodeID); err != nil {
		return fmt.Errorf("--node-id: %w", err)
	}
	if o.shards == 0 || o.shards > 1<<16 {
		return fmt.Errorf("--shards must be in 1..65536, got %d", o.shards)
	}
	if o.checkpointEvery == 0 {
		return errors.New("--checkpoint-every must be at least 1")
	}
	session := newSession()
	log = log.With("node", o.nodeID)

	// NATS: embedded unless --nats/NATS_URL names a server.
	var nc *nats.Conn
	var err error
	var srv *natsserver.Server
	if o.natsURL == "" {
		dir, _ := filepath.Abs(o.data)
		srv, err = natsserver.Start(natsserver.Config{DataDir: dir, Listen: o.natsListen, Sync: o.sync, Name: o.nodeID})
		if err != nil {
			return err
		}
		defer srv.Stop()
		attrs := []any{"data", dir, "sync_every_write", o.sync}
		if o.natsListen != "" {
			attrs = append(attrs, "listen", srv.ClientURL())
		}
		log.Info("embedded NATS JetStream server started", attrs...)
		nc, err = natskv.Connect("", srv.ConnectOption(), nats.Name("tickd "+o.nodeID))
	} else {
		if o.sync {
			log.Warn("--sync applies to the embedded server only; configure sync on the external server")
		}
		nc, err = natskv.Connect(o.natsURL, nats.Name("tickd "+o.nodeID))
	}
	if err != nil {
		return fmt.Errorf("connect to NATS: %w", err)
	}
	defer nc.Close()
	st, err := natskv.Open(nc, natskv.Options{})
	if err != nil {
		return err
	}
	defer st.Close()

	coord, err := coordinator.New(coordinator.Config{Store: st, Node: o.nodeID, Session: session, Logger: log,
		Progress: func(done, total int) { log.Debug("coordinator reading shards", "done", done, "of", total) }})
	if err != nil {
		return err
	}
	want := store.DefaultCluster()
	want.Shards = uint32(o.shards)
	cl, err := coord.Bootstrap(ctx, want, shardsSet)
	if err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var engine *actor.Engine
	m := metrics.NewNode(reg, func() float64 {
		if engine == nil {
			return 0
		}
		return float64(engine.Skipped())
	})
	if o.metricsAddr != "" {
		ln, err := net.Listen("tcp", o.metricsAddr)
		if err != nil {
			return fmt.Errorf("--metrics: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = hs.Serve(ln) }()
		defer hs.Close()
		log.Info("metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	}

	engine, err = actor.NewEngine(actor.EngineConfig{Rate: o.tickRate, Observe: m.ObserveTick})
	if err != nil {
		return fmt.Errorf("--tick-rate: %w", err)
	}
	defer engine.Stop()
	kinds, _ := actor.NewKinds(dungeon.Kind{})
	host, err := shard.New(ctx, shard.Config{Node: o.nodeID, Session: session, Store: st,
		Commands: natscmd.NewServer(nc, cl.Shards, m), Kinds: kinds, Engine: engine,
		CheckpointEvery: o.checkpointEvery, Logger: log, Metrics: m})
	if err != nil {
		return err
	}
	wctx, stopWatch := context.WithCancel(context.Background())
	watchDone := make(chan error, 1)
	go func() { watchDone <- host.Watch(wctx) }()

	if _, err := coord.Round(ctx); err != nil {
		stopWatch()
		return err
	}
	if err := waitRunning(ctx, host, cl.Shards, log); err != nil {
		stopWatch()
		<-watchDone
		return err
	}
	log.Info("node running", "session", session, "shards", cl.Shards, "instances", host.Instances(),
		"tick_rate_hz", o.tickRate, "checkpoint_every", o.checkpointEvery)

	var driver *demo.Driver
	if o.demo > 0 {
		driver, err = demo.Start(ctx, demo.Config{Client: natscmd.NewClient(nc, cl.Shards), Instances: o.demo,
			Session: session, Logger: log})
		if err != nil && ctx.Err() == nil {
			log.Error("demo dungeons could not be created", "err", err)
		}
	}
	summarize(ctx, o.summaryEvery, host, engine, m, driver, log)

	log.Info("shutting down: flushing every instance")
	if driver != nil {
		driver.Stop()
	}
	fctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := host.Instances()
	ferr := host.Close(fctx)
	stopWatch()
	<-watchDone
	engine.Stop()
	if ferr != nil {
		return fmt.Errorf("flush: %w", ferr)
	}
	log.Info("flushed and released", "instances", n)
	return nil
}

// waitRunning waits until every shard is loaded, logging progress.
func waitRunning(ctx context.Context, host *shard.Host, shards uint32, log *slog.Logger) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	last := time.Now()
	for {
		running := 0
		for s := uint32(0); s < shards; s++ {
			if host.Running(s) {
				running++
			}
		}
		if running == int(shards) {
			return nil
		}
		if time.Since(last) > 2*time.Second {
			log.Info("loading shards", "running", running, "of", shards)
			last = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

func summarize(ctx context.Context, every time.Duration, host *shard.Host, engine *actor.Engine, m *metrics.Node, d *demo.Driver, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	lastTicks, lastWrites, lastAt := engine.Ticks(), m.WritesOK(), time.Now()
	var lastSent uint64
	m.Lateness.Quantile(0.99) // start a fresh window
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		secs := now.Sub(lastAt).Seconds()
		ticks, writes := engine.Ticks(), m.WritesOK()
		p99, _ := m.Lateness.Quantile(0.99)
		attrs := []any{"instances", host.Instances(), "shards", len(host.Shards()),
			"ticks_per_s", int((float64(ticks-lastTicks) / secs) + 0.5),
			"p99_lateness", p99.String(),
			"writes_per_s", int((float64(writes-lastWrites) / secs) + 0.5),
			"skipped_ticks", engine.Skipped()}
		if d != nil {
			sent, failed := d.Sent()
			attrs = append(attrs, "commands_per_s", int(float64(sent-lastSent)/secs+0.5), "commands_unanswered", failed)
			lastSent = sent
		}
		log.Info("summary", attrs...)
		lastTicks, lastWrites, lastAt = ticks, writes, now
	}
}
