package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"html"
	"math"
	mrand "math/rand/v2"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/cmd/tickbench/internal/proc"
	"github.com/tickfence/tickfence/coordinator"
	"github.com/tickfence/tickfence/internal/hdr"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/store"
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

func runCluster(args []string) error {
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
		return fmt.Errorf("%s: unexpected argument %q (a node for --kill-node or --pause-node goes after =, e.g. --kill-node=n2)", fs.Name(), fs.Arg(0))
	}
	if *nodes < 1 || *instances < 1 || *rate <= 0 || *duration <= 0 {
		return errors.New("--nodes, --instances, --rate and --duration must be positive")
	}
	if kill.set && pause.set {
		return errors.New("--kill-node and --pause-node: one fault per run")
	}
	if (kill.set || pause.set) && *nodes < 2 {
		return errors.New("a fault needs at least 2 nodes: another must take the shards over")
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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep := clusterReport{Machine: thisMachine(), Config: cfg}
	fmt.Printf("tickbench cluster on %s\n", rep.Machine)
	fault := "no fault"
	switch cfg.Fault {
	case "kill":
		fault = "kill -9 of a node at the middle of the window"
	case "pause":
		fault = fmt.Sprintf("SIGSTOP of a node for %v at the middle of the window", cfg.Pause)
	}
	fmt.Printf("%d nodes + tickd server, %d instances on %d shards, lease %v, %g attacks/s, window %v after %v warm-up; %s; seed %d\n\n",
		cfg.Nodes, cfg.Instances, cfg.Shards, cfg.Lease, cfg.Rate, cfg.Duration, cfg.Warmup, fault, cfg.Seed)

	p := newProgress()
	b, err := startBenchCluster(ctx, p, *bin, proc.ClusterConfig{Lease: *lease, Shards: *shards}, nodeIDs(*nodes))
	if err != nil {
		return err
	}
	defer b.close()
	gen, err := b.newLoad(*seed, *rate, *giveUp, true)
	if err != nil {
		return err
	}
	defer gen.nc.Close()
	if err := gen.setup(ctx, p, *instances); err != nil {
		return err
	}

	// Load, warm-up, then the window: one scrape of every node at its start and every second.
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	go gen.run(loadCtx)
	if err := sleepCtx(ctx, *warmup); err != nil {
		return err
	}
	sam := newSampler(b)
	t0 := time.Now()
	gen.markWindow(t0)
	sam.start(t0)

	var fres *faultResult
	faultDone := make(chan struct{})
	faultAt := t0.Add(*duration / 2)
	end := t0.Add(*duration)
	go func() {
		defer close(faultDone)
		if cfg.Fault == "" || sleepCtx(ctx, time.Until(faultAt)) != nil {
			return
		}
		target := kill.node
		if pause.set {
			target = pause.node
		}
		fres = b.inject(ctx, p, sam, cfg.Fault, target, *pauseFor, t0)
	}()
	for time.Now().Before(end) {
		if err := sleepCtx(ctx, min(time.Second, time.Until(end))); err != nil {
			return err
		}
		p.line("%5.1fs/%.0fs  %s  %s", time.Since(t0).Seconds(), duration.Seconds(), gen.status(), sam.status())
	}
	sam.stop()
	stopLoad()
	p.line("window over; waiting for %d commands in flight", gen.inflight.Load())
	gen.wait()
	<-faultDone
	p.done()

	// Figures.
	rep.Commands = gen.result()
	rep.Nodes = sam.results()
	rep.Fault = fres
	if fres != nil && fres.Complete {
		from := fres.At
		to := fres.At + fres.Failover.Seconds()
		fres.RttMaxDuring, fres.CommandsDuring = gen.maxDuring(from, to)
	}
	rep.Lateness = sam.series()
	rep.RoundTr = gen.series(*duration)
	printCluster(rep)
	if err := writeJSON(*jsonOut, rep); err != nil {
		return err
	}
	if *plotOut != "" {
		if err := writeClusterPlot(*plotOut, rep); err != nil {
			return err
		}
		fmt.Printf("plot: %s\n", *plotOut)
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

// benchCluster is a tickd server and its nodes, run as processes from a freshly built binary.
type benchCluster struct {
	*proc.Cluster
	ids    []string
	dir    string
	shards uint32
	epoch  uint64
}

func startBenchCluster(ctx context.Context, p *progress, bin string, cfg proc.ClusterConfig, ids []string) (*benchCluster, error) {
	dir, err := os.MkdirTemp("", "tickbench-cluster")
	if err != nil {
		return nil, err
	}
	b := &benchCluster{ids: ids, dir: dir}
	if bin == "" {
		p.line("building tickd")
		if bin, err = proc.Build(ctx, dir); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	cfg.Bin, cfg.DataDir = bin, dir+"/nats"
	p.line("starting tickd server")
	if b.Cluster, err = proc.StartCluster(ctx, cfg); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	// The first node creates the cluster; the others join it.
	for i, id := range ids {
		_, err := b.StartNode(id)
		if err == nil && (i == 0 || i == len(ids)-1) {
			wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			for _, id := range ids[:i+1] {
				if err = proc.WaitJoined(wctx, b.Node(id)); err != nil {
					break
				}
			}
			cancel()
		}
		if err != nil {
			b.close()
			return nil, fmt.Errorf("node %s: %w", id, err)
		}
	}
	p.line("%d nodes joined; waiting until every node owns shards", len(ids))
	wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	s, err := b.WaitState(wctx, "every shard is owned by a live node and every node owns shards", func(s *coordinator.State) bool {
		if !proc.AllOwnedLive(s) || len(s.Nodes) < len(ids) {
			return false
		}
		for _, n := range s.Nodes {
			if n.Owned == 0 {
				return false
			}
		}
		return true
	})
	if err != nil {
		b.close()
		return nil, err
	}
	b.shards, b.epoch = s.Cluster.Shards, s.Cluster.Epoch
	return b, nil
}

func (b *benchCluster) close() {
	b.Close()
	os.RemoveAll(b.dir)
}

// inject runs the fault of the cluster scenario and measures failover: from the fault until every
// instance of the victim has a record written under another token with a higher tick.
func (b *benchCluster) inject(ctx context.Context, p *progress, sam *sampler, kind, node string, pauseFor time.Duration, t0 time.Time) *faultResult {
	res := &faultResult{Kind: kind, Pause: pauseFor}
	if kind == "kill" {
		res.Pause = 0
	}
	fail := func(err error) *faultResult { res.Error = err.Error(); return res }
	s, err := b.State(ctx)
	if err != nil {
		return fail(err)
	}
	if node == "" { // the node with most instances
		best := -1
		for _, n := range s.Nodes {
			if n.Record.Instances > best {
				node, best = n.ID, n.Record.Instances
			}
		}
	}
	res.Node = node
	victim := b.Node(node)
	if victim == nil {
		return fail(fmt.Errorf("no node %q", node))
	}
	insts, err := b.InstancesOf(ctx, s, node)
	if err != nil {
		return fail(err)
	}
	for _, sh := range s.Shards {
		if sh.Owner.Owner == node {
			res.Shards++
		}
	}
	res.Instances = len(insts)
	before := map[string]store.Record{}
	for id, sh := range insts {
		r, err := b.Load(ctx, b.epoch, sh, id)
		if err != nil {
			return fail(fmt.Errorf("load %s: %w", id, err))
		}
		before[id] = r
	}
	sam.final(victim) // its counters as late as possible before the fault
	at := time.Now()
	res.At = at.Sub(t0).Seconds()
	sig := syscall.SIGKILL
	if kind == "pause" {
		sig = syscall.SIGSTOP
	}
	if err := victim.Signal(sig); err != nil {
		return fail(err)
	}
	sam.faulted(node, kind, res.At)
	var resumed chan struct{}
	if kind == "pause" {
		resumed = make(chan struct{})
		go func() {
			defer close(resumed)
			_ = sleepCtx(ctx, time.Until(at.Add(pauseFor)))
			_ = victim.Signal(syscall.SIGCONT)
		}()
	}
	pending := make(map[string]uint32, len(insts))
	for id, sh := range insts {
		pending[id] = sh
	}
	deadline := at.Add(b.Lease() + 60*time.Second)
	for len(pending) > 0 && time.Now().Before(deadline) && ctx.Err() == nil {
		for id, sh := range pending {
			r, err := b.Load(ctx, b.epoch, sh, id)
			if err == nil && r.Token != before[id].Token && r.Tick > before[id].Tick {
				delete(pending, id)
			}
		}
		if len(pending) > 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	res.Failover = time.Since(at)
	res.Complete = len(pending) == 0
	res.Pending = len(pending)
	if res.Complete {
		sam.recovered(time.Now().Sub(t0).Seconds())
	}
	if resumed != nil {
		<-resumed
	}
	return res
}

// loadGen sends attacks at a fixed rate to random instances through natscmd.Client, each with a
// unique request ID, retried with the same ID until answered or --give-up passes. It has its own
// NATS connection so that the requests it published (retries included) are its own count.
type loadGen struct {
	nc      *nats.Conn
	client  *natscmd.Client
	ids     []string
	rate    float64
	giveUp  time.Duration
	runID   string
	rng     *mrand.Rand // the scheduler's only
	keep    bool        // keep every round trip for the series
	window0 atomic.Int64
	// attempts0 is the connection's published count when the attacks started (setup excluded).
	attempts0 atomic.Int64

	seq      atomic.Uint64
	sent     atomic.Int64
	ok       atomic.Int64
	unknown  atomic.Int64
	dropped  atomic.Int64
	inflight atomic.Int64
	rtt      *hdr.Histogram
	wg       sync.WaitGroup

	mu      sync.Mutex
	errs    map[string]int64
	samples []rttSample
	// Per instance: damage of acknowledged attacks, attacks with no answer.
	acked   []atomic.Int64
	unknowN []atomic.Int64
}

type rttSample struct {
	sent float64 // s since the window opened
	rtt  time.Duration
}

const maxInflight = 20000

func (b *benchCluster) newLoad(seed uint64, rate float64, giveUp time.Duration, keep bool) (*loadGen, error) {
	nc, err := natskv.Connect(b.URL, nats.Name("tickbench load"))
	if err != nil {
		return nil, err
	}
	rb := make([]byte, 4)
	_, _ = rand.Read(rb)
	return &loadGen{nc: nc, client: natscmd.NewClient(nc, b.shards), rate: rate, giveUp: giveUp,
		runID: hex.EncodeToString(rb), rng: mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		keep: keep, rtt: hdr.New(7), errs: map[string]int64{}}, nil
}

// setup creates the instances (boss HP 1e9) and joins player p in each.
func (g *loadGen) setup(ctx context.Context, p *progress, n int) error {
	g.ids = make([]string, n)
	for i := range g.ids {
		g.ids[i] = fmt.Sprintf("bench-%d", i)
	}
	g.acked = make([]atomic.Int64, n)
	g.unknowN = make([]atomic.Int64, n)
	start := time.Now()
	sem := make(chan struct{}, 32)
	errc := make(chan error, n)
	var wg sync.WaitGroup
	var done atomic.Int64
	for i, id := range g.ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			cctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			r, err := g.client.SendMap(cctx, id, g.runID+"-create-"+id, map[string]any{"type": "create", "kind": "dungeon", "boss_hp": 1_000_000_000})
			if err == nil && !r.OK {
				err = r.Error
			}
			if err == nil {
				r, err = g.client.SendMap(cctx, id, g.runID+"-join-"+id, map[string]any{"type": "join", "player": "p"})
				if err == nil && !r.OK {
					err = r.Error
				}
			}
			if err != nil {
				errc <- fmt.Errorf("set up instance %d (%s): %w", i, id, err)
				return
			}
			if d := done.Add(1); d%50 == 0 {
				p.line("instances created and joined: %d/%d", d, n)
			}
		}()
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return err
	}
	p.line("%d instances created and joined in %v", n, time.Since(start).Round(time.Millisecond))
	return nil
}

func (g *loadGen) markWindow(t time.Time) { g.window0.Store(t.UnixNano()) }

func (g *loadGen) attempts() int64 { return int64(g.nc.Stats().OutMsgs) }

// run schedules attacks at the rate until ctx ends (open loop: a slow answer never slows the
// schedule; past maxInflight commands in flight, scheduled ones are counted as not sent).
func (g *loadGen) run(ctx context.Context) {
	g.attempts0.CompareAndSwap(0, g.attempts())
	start := time.Now()
	issued := 0
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			due := int(now.Sub(start).Seconds() * g.rate)
			for ; issued < due; issued++ {
				if g.inflight.Load() >= maxInflight {
					g.dropped.Add(1)
					continue
				}
				i := g.rng.IntN(len(g.ids))
				g.inflight.Add(1)
				g.wg.Add(1)
				go func() {
					defer g.wg.Done()
					defer g.inflight.Add(-1)
					g.attack(i)
				}()
			}
		}
	}
}

// attack sends one attack and accounts for its outcome. It ignores the run's context: a command
// under way is retried until answered or given up, even after the schedule stopped.
func (g *loadGen) attack(i int) (ok bool) {
	rid := fmt.Sprintf("%s-a%d", g.runID, g.seq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), g.giveUp)
	defer cancel()
	g.sent.Add(1)
	start := time.Now()
	r, err := g.client.SendMap(ctx, g.ids[i], rid, map[string]any{"type": "attack", "player": "p"})
	rtt := time.Since(start)
	if err != nil {
		g.unknown.Add(1)
		g.unknowN[i].Add(1)
		return false
	}
	g.rtt.Record(rtt)
	if g.keep {
		g.mu.Lock()
		g.samples = append(g.samples, rttSample{sent: float64(start.UnixNano()-g.window0.Load()) / 1e9, rtt: rtt})
		g.mu.Unlock()
	}
	if !r.OK {
		g.mu.Lock()
		g.errs[r.Error.Code]++
		g.mu.Unlock()
		return false
	}
	g.ok.Add(1)
	res, _ := r.Result.(map[string]any)
	dmg, okd := toInt64(res["damage"])
	if !okd {
		g.mu.Lock()
		g.errs["no_damage_in_result"]++
		g.mu.Unlock()
	}
	g.acked[i].Add(dmg)
	return true
}

func (g *loadGen) wait() { g.wg.Wait() }

func (g *loadGen) status() string {
	return fmt.Sprintf("sent %d ok %d unknown %d in flight %d  rtt p99 %s ms max %s ms",
		g.sent.Load(), g.ok.Load(), g.unknown.Load(), g.inflight.Load(), ms(g.rtt.Quantile(0.99)), ms(g.rtt.Max()))
}

// result summarizes the attacks sent so far.
func (g *loadGen) result() commandResult {
	r := commandResult{Sent: g.sent.Load(), OK: g.ok.Load(), Unknown: g.unknown.Load(), Dropped: g.dropped.Load(),
		Attempts: g.attempts() - g.attempts0.Load(), P50: g.rtt.Quantile(0.5), P99: g.rtt.Quantile(0.99), P999: g.rtt.Quantile(0.999), Max: g.rtt.Max()}
	g.mu.Lock()
	if len(g.errs) > 0 {
		r.Errors = map[string]int64{}
	}
	var failed int64
	for k, v := range g.errs {
		r.Errors[k] = v
		failed += v
	}
	g.mu.Unlock()
	r.Answered = r.OK + failed
	r.Retried = max(0, r.Attempts-r.Sent)
	return r
}

// maxDuring is the largest round trip of the commands under way at some moment in [from, to]
// (seconds since the window opened), and how many there were.
func (g *loadGen) maxDuring(from, to float64) (time.Duration, int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var m time.Duration
	n := 0
	for _, s := range g.samples {
		if s.sent <= to && s.sent+s.rtt.Seconds() >= from {
			m = max(m, s.rtt)
			n++
		}
	}
	return m, n
}

// series bins round trips by the second they were sent in.
func (g *loadGen) series(window time.Duration) []rttPoint {
	g.mu.Lock()
	defer g.mu.Unlock()
	bins := int(math.Ceil(window.Seconds()))
	hs := make([]*hdr.Histogram, bins)
	for _, s := range g.samples {
		b := int(math.Floor(s.sent))
		if b < 0 || b >= bins {
			continue
		}
		if hs[b] == nil {
			hs[b] = hdr.New(5)
		}
		hs[b].Record(s.rtt)
	}
	var out []rttPoint
	for i, h := range hs {
		if h == nil {
			continue
		}
		out = append(out, rttPoint{At: float64(i) + 0.5, N: int(h.Count()), P99: h.Quantile(0.99), Max: h.Max()})
	}
	return out
}

func toInt64(v any) (int64, bool) {
	switch x := v.(type) {
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case int:
		return int64(x), true
	case uint8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case uint64:
		return int64(x), true
	case float64:
		return int64(x), true
	}
	return 0, false
}

// sampler scrapes every node once a second (concurrently, with a short deadline: a stopped node
// never answers) and keeps the scrapes of the window.
type sampler struct {
	b    *benchCluster
	t0   time.Time
	quit chan struct{}
	wg   sync.WaitGroup

	mu      sync.Mutex
	scrapes map[string][]scrapeAt // by node ID (one process per node in this scenario)
	note    map[string]string
	last    string
}

type scrapeAt struct {
	at float64
	m  proc.Metrics
}

func newSampler(b *benchCluster) *sampler {
	return &sampler{b: b, quit: make(chan struct{}), scrapes: map[string][]scrapeAt{}, note: map[string]string{}}
}

func (s *sampler) start(t0 time.Time) {
	s.t0 = t0
	s.scrapeAll()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-s.quit:
				return
			case <-t.C:
				s.scrapeAll()
			}
		}
	}()
}

func (s *sampler) stop() {
	close(s.quit)
	s.wg.Wait()
	s.scrapeAll()
}

func (s *sampler) scrapeAll() {
	var wg sync.WaitGroup
	for _, id := range s.b.ids {
		n := s.b.Node(id)
		if n == nil || !n.Alive() || n.Stopped() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.final(n)
		}()
	}
	wg.Wait()
}

// final scrapes one node now and keeps the scrape.
func (s *sampler) final(n *proc.Proc) {
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	m, err := n.Scrape(ctx)
	if err != nil {
		return
	}
	at := time.Since(s.t0).Seconds()
	s.mu.Lock()
	s.scrapes[n.Name] = append(s.scrapes[n.Name], scrapeAt{at: at, m: m})
	s.mu.Unlock()
}

func (s *sampler) faulted(node, kind string, at float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	verb := map[string]string{"kill": "killed", "pause": "paused"}[kind]
	s.note[node] = fmt.Sprintf("%s at %.1fs", verb, at)
	s.last = fmt.Sprintf("%s %s at %.1fs", verb, node, at)
}

func (s *sampler) recovered(at float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last += fmt.Sprintf(", its instances ticking elsewhere at %.1fs", at)
}

// status is the last second's p99 lateness of each node.
func (s *sampler) status() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var parts []string
	for _, id := range s.b.ids {
		sc := s.scrapes[id]
		if n := s.b.Node(id); len(sc) < 2 || n == nil || !n.Alive() || n.Stopped() {
			continue
		}
		d := proc.Delta(sc[len(sc)-2].m.Histogram("tickfence_tick_lateness_seconds"), sc[len(sc)-1].m.Histogram("tickfence_tick_lateness_seconds"))
		if q := proc.Quantile(d, 0.99); !math.IsNaN(q) {
			parts = append(parts, fmt.Sprintf("%s p99 %.2fms", id, q*1e3))
		}
	}
	if s.last != "" {
		parts = append(parts, "["+s.last+"]")
	}
	return strings.Join(parts, " ")
}

func secs(v float64) time.Duration {
	if math.IsNaN(v) {
		return 0
	}
	return time.Duration(v * 1e9)
}

// results is each node's figures over the window, from its first to its last scrape.
func (s *sampler) results() []nodeResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []nodeResult
	for _, id := range s.b.ids {
		r := nodeResult{ID: id, Note: s.note[id]}
		sc := s.scrapes[id]
		if len(sc) == 0 {
			r.Note += " (never scraped)"
			out = append(out, r)
			continue
		}
		a, z := sc[0], sc[len(sc)-1]
		h := proc.Delta(a.m.Histogram("tickfence_tick_lateness_seconds"), z.m.Histogram("tickfence_tick_lateness_seconds"))
		r.LateP50, r.LateP99 = secs(proc.Quantile(h, 0.5)), secs(proc.Quantile(h, 0.99))
		r.Over10ms = proc.Above(h, 0.01)
		r.Seconds = z.at - a.at
		r.Ticks = z.m["tickfence_ticks_total"] - a.m["tickfence_ticks_total"]
		if r.Seconds > 0 {
			r.TicksPerSec = r.Ticks / r.Seconds
		}
		r.Instances = int(z.m["tickfence_instances"])
		r.Shards = int(z.m["tickfence_shards_owned"])
		r.StaleRejected = z.m[`tickfence_state_writes_total{result="stale_owner"}`] - a.m[`tickfence_state_writes_total{result="stale_owner"}`]
		for k, v := range z.m {
			if strings.HasPrefix(k, "tickfence_handoffs_total") {
				r.Handoffs += v - a.m[k]
			}
		}
		out = append(out, r)
	}
	return out
}

// series is each node's lateness per second of the window.
func (s *sampler) series() map[string][]latPoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][]latPoint{}
	for id, sc := range s.scrapes {
		for i := 1; i < len(sc); i++ {
			d := proc.Delta(sc[i-1].m.Histogram("tickfence_tick_lateness_seconds"), sc[i].m.Histogram("tickfence_tick_lateness_seconds"))
			if proc.Count(d) == 0 {
				continue
			}
			out[id] = append(out[id], latPoint{At: sc[i].at, P50: secs(proc.Quantile(d, 0.5)), P99: secs(proc.Quantile(d, 0.99))})
		}
	}
	return out
}

func printCluster(rep clusterReport) {
	fmt.Println("tick lateness per node over the window (Prometheus histogram deltas, interpolated in its buckets):")
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "node\tinstances\tshards\tticks/s\tlate p50 ms\tp99 ms\tticks >10ms\tstale rejected\thand-offs\tscraped s\t\t")
	for _, n := range rep.Nodes {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%s\t%s\t%.0f\t%.0f\t%.0f\t%.1f\t%s\t\n", n.ID, n.Instances, n.Shards, n.TicksPerSec,
			ms(n.LateP50), ms(n.LateP99), n.Over10ms, n.StaleRejected, n.Handoffs, n.Seconds, n.Note)
	}
	tw.Flush()
	c := rep.Commands
	fmt.Printf("\ncommands (attacks, warm-up included): sent %d, answered %d (ok %d", c.Sent, c.Answered, c.OK)
	codes := make([]string, 0, len(c.Errors))
	for k := range c.Errors {
		codes = append(codes, k)
	}
	sort.Strings(codes)
	for _, k := range codes {
		fmt.Printf(", %s %d", k, c.Errors[k])
	}
	fmt.Printf("), unknown %d, retries %d (%d requests published), not sent %d\n", c.Unknown, c.Retried, c.Attempts, c.Dropped)
	fmt.Printf("command round trip (request → answer after commit, retries included): p50 %s ms, p99 %s ms, p99.9 %s ms, max %s ms\n",
		ms(c.P50), ms(c.P99), ms(c.P999), ms(c.Max))
	if f := rep.Fault; f != nil {
		what := "kill -9"
		if f.Kind == "pause" {
			what = fmt.Sprintf("SIGSTOP for %v of", f.Pause)
		}
		fmt.Printf("\nfault: %s %s at %.1fs (%d instances on %d shards)\n", what, f.Node, f.At, f.Instances, f.Shards)
		switch {
		case f.Error != "":
			fmt.Printf("fault failed: %s\n", f.Error)
		case f.Complete:
			fmt.Printf("failover: %s ms until every one of its instances had a record under another token with a higher tick\n", ms(f.Failover))
			fmt.Printf("command round trip max during the failover: %s ms (%d commands under way)\n", ms(f.RttMaxDuring), f.CommandsDuring)
		default:
			fmt.Printf("failover INCOMPLETE: %d of %d instances not ticking elsewhere after %v\n", f.Pending, f.Instances, f.Failover.Round(time.Millisecond))
		}
	}
}

// writeClusterPlot writes a self-contained HTML page: per node the p99 tick lateness of each
// second, and the p99 and max command round trip of the commands sent in each second, on a log
// scale, with the fault and the end of the failover marked.
func writeClusterPlot(path string, rep clusterReport) error {
	var b strings.Builder
	b.WriteString("<!doctype html><meta charset=utf-8><title>tickbench cluster</title>" +
		"<style>body{font:14px sans-serif;margin:2em}svg{background:#fafafa;border:1px solid #ddd}</style>")
	c := rep.Config
	fmt.Fprintf(&b, "<h1>tickbench cluster: lateness and round trip over time</h1><p>%s</p><p>%d nodes, %d instances, %d shards, lease %v, %g attacks/s</p>",
		html.EscapeString(rep.Machine.String()), c.Nodes, c.Instances, c.Shards, c.Lease, c.Rate)
	const w, h, left, bottom = 900.0, 360.0, 60.0, 30.0
	tmax := c.Duration.Seconds()
	lo, hi := math.Log10(0.01), math.Log10(10) // ms
	for _, pts := range rep.Lateness {
		for _, p := range pts {
			if v := float64(p.P99) / 1e6; v > 0 {
				hi = math.Max(hi, math.Ceil(math.Log10(v)))
			}
		}
	}
	for _, p := range rep.RoundTr {
		if v := float64(p.Max) / 1e6; v > 0 {
			hi = math.Max(hi, math.Ceil(math.Log10(v)))
		}
	}
	x := func(t float64) float64 { return left + (w-left-10)*math.Max(0, math.Min(t, tmax))/tmax }
	y := func(v time.Duration) float64 {
		l := math.Log10(math.Max(float64(v)/1e6, 0.01))
		return (h - bottom) - (h-bottom-10)*(l-lo)/(hi-lo)
	}
	fmt.Fprintf(&b, "<svg width=%v height=%v>", w, h)
	for e := lo; e <= hi; e++ {
		v := time.Duration(math.Pow(10, e) * 1e6)
		fmt.Fprintf(&b, "<line x1=%v x2=%v y1=%.1f y2=%.1f stroke=#ddd /><text x=4 y=%.1f font-size=11>%g ms</text>",
			left, w-10, y(v), y(v), y(v)+4, math.Pow(10, e))
	}
	fmt.Fprintf(&b, "<text x=%v y=%v font-size=11>time in the window (s) 0 … %.0f</text>", left, h-8, tmax)
	if f := rep.Fault; f != nil && f.Error == "" {
		fmt.Fprintf(&b, "<line x1=%.1f x2=%.1f y1=10 y2=%v stroke=#d62728 stroke-width=2 /><text x=%.1f y=22 font-size=11 fill=#d62728>%s %s</text>",
			x(f.At), x(f.At), h-bottom, x(f.At)+4, f.Kind, html.EscapeString(f.Node))
		if f.Complete {
			end := f.At + f.Failover.Seconds()
			fmt.Fprintf(&b, "<line x1=%.1f x2=%.1f y1=10 y2=%v stroke=#2ca02c stroke-dasharray=4 /><text x=%.1f y=36 font-size=11 fill=#2ca02c>failover done (%s ms)</text>",
				x(end), x(end), h-bottom, x(end)+4, ms(f.Failover))
		}
	}
	colors := []string{"#1f77b4", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"}
	legend := 0
	line := func(col, dash, name string, pts []string) {
		fmt.Fprintf(&b, "<polyline fill=none stroke=%s stroke-width=1.5 stroke-dasharray=%q points=%q />", col, dash, strings.Join(pts, " "))
		fmt.Fprintf(&b, "<text x=%v y=%d font-size=12 fill=%s>%s</text>", w-230, 16+14*legend, col, html.EscapeString(name))
		legend++
	}
	ids := make([]string, 0, len(rep.Lateness))
	for id := range rep.Lateness {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for i, id := range ids {
		var pts []string
		for _, p := range rep.Lateness[id] {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(p.At), y(p.P99)))
		}
		line(colors[i%len(colors)], "", id+" tick lateness p99 (per s)", pts)
	}
	var p99, mx []string
	for _, p := range rep.RoundTr {
		p99 = append(p99, fmt.Sprintf("%.1f,%.1f", x(p.At), y(p.P99)))
		mx = append(mx, fmt.Sprintf("%.1f,%.1f", x(p.At), y(p.Max)))
	}
	line("#333", "", "command round trip p99 (by send second)", p99)
	line("#999", "3,3", "command round trip max", mx)
	b.WriteString("</svg>")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
