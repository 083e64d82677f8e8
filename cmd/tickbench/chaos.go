package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/tickfence/tickfence/auth"
	"github.com/tickfence/tickfence/coordinator"
	"github.com/tickfence/tickfence/internal/history"
	"github.com/tickfence/tickfence/internal/proc"
	"github.com/tickfence/tickfence/store"
)

// maxAttackDamage bounds one attack's damage in the dungeon kind (50 + rand%50).
const maxAttackDamage = 99

// The nemesis's faults.
const (
	faultPause = "pause"       // SIGSTOP for 1–3 × lease, then SIGCONT
	faultKill  = "kill"        // kill -9, then a new process with the same node ID
	faultMove  = "move"        // move.<S>: a graceful hand-off of a random shard
	faultDrain = "drain"       // drain.<node> for 1–3 × lease, then undrain
	faultHook  = "freeze-save" // the fault hook: frozen just before a fenced write, for 1–3 × lease
)

var faultKinds = []string{faultPause, faultKill, faultMove, faultDrain, faultHook}

type chaosConfig struct {
	Nodes      int           `json:"nodes"`
	Instances  int           `json:"instances"`
	Shards     int           `json:"shards"`
	Lease      time.Duration `json:"lease_ns"`
	Rate       float64       `json:"commands_per_s"`
	Duration   time.Duration `json:"duration_ns"`
	FaultEvery time.Duration `json:"fault_every_ns"`
	GiveUp     time.Duration `json:"give_up_ns"`
	Seed       uint64        `json:"seed"`
	Killable   int           `json:"killable"`    // instances whose boss dies and respawns
	KillableHP int64         `json:"killable_hp"` // their boss's HP
	FxNak      float64       `json:"fx_nak"`      // share of first effect deliveries applied, then refused
}

type faultEvent struct {
	At     float64 `json:"t_s"`
	Kind   string  `json:"kind"`
	Node   string  `json:"node,omitempty"`
	Detail string  `json:"detail,omitempty"`
}

// life is one process of a node: a restart is a new life (and a new session).
type life struct {
	Node          string  `json:"node"`
	N             int     `json:"life"`
	Pid           int     `json:"pid"`
	Started       float64 `json:"started_s"`
	Ended         float64 `json:"ended_s,omitempty"`
	End           string  `json:"end,omitempty"` // killed, exited: …; empty while running
	StaleRejected float64 `json:"stale_writes_rejected"`
	FxEmitted     float64 `json:"effects_emitted"`
	FxPublished   float64 `json:"effects_published"`
	FxFailed      float64 `json:"effects_publish_failures"`
	Scrapes       int     `json:"scrapes"`
	instances     float64
	p             *proc.Proc
}

type historyResult struct {
	Buckets    []string `json:"buckets"`
	Messages   int      `json:"messages"`
	Records    int      `json:"records"`
	Stale      int      `json:"stale_accepted"`
	Backwards  int      `json:"ticks_backwards"`
	Incomplete string   `json:"incomplete,omitempty"`
	Error      string   `json:"error,omitempty"`
	Examples   []string `json:"examples,omitempty"`
}

type damageResult struct {
	Instances        int      `json:"instances"`
	Lost             int      `json:"lost"` // stored < acknowledged
	LostDamage       int64    `json:"lost_damage"`
	Duplicates       int      `json:"duplicates"` // stored above what acknowledged (+ unknown) attacks explain
	DuplicateDamage  int64    `json:"duplicate_damage"`
	WithUnknown      int      `json:"instances_with_unknown"`
	UnknownApplied   int64    `json:"unknown_damage_applied"` // stored − acknowledged on those, within bounds
	Unreadable       int      `json:"unreadable"`
	Examples         []string `json:"examples,omitempty"`
	AckedDamage      int64    `json:"acknowledged_damage"`
	StoredDamage     int64    `json:"stored_damage"`
	FinalWriteAcked  int      `json:"final_write_acknowledged"`
	FinalWriteFailed int      `json:"final_write_failed"`
}

type chaosReport struct {
	Machine       machine        `json:"machine"`
	Config        chaosConfig    `json:"config"`
	Faults        map[string]int `json:"faults"`
	FaultLog      []faultEvent   `json:"fault_log"`
	Lives         []*life        `json:"lives"`
	Unexpected    int            `json:"unexpected_exits"`
	HealSeconds   float64        `json:"heal_s"`
	Commands      commandResult  `json:"commands"`
	StaleRejected float64        `json:"stale_writes_rejected"`
	History       historyResult  `json:"history"`
	Damage        damageResult   `json:"damage"`
	Effects       effectsResult  `json:"effects"`
	Failures      []string       `json:"failures"`
	Pass          bool           `json:"pass"`
}

// errChaosFailed makes the exit status non-zero after the report is printed.
var errChaosFailed = errors.New("chaos: checks failed")

// runChaos is the chaos scenario: faults injected into a cluster under load, then every instance
// and the whole stored history checked.
func runChaos(args []string) error {
	cfg, fl, err := parseChaosFlags(args)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep := &chaosReport{Machine: thisMachine(), Config: cfg, Faults: map[string]int{}}
	fmt.Printf("tickbench chaos on %s\n", rep.Machine)
	fmt.Printf("%d nodes + tickd server, %d instances on %d shards (%d killable, boss HP %d), lease %v, %g attacks/s, nemesis for %v (a fault every ~%v: %s)\nseed %d\n\n",
		cfg.Nodes, cfg.Instances, cfg.Shards, cfg.Killable, cfg.KillableHP, cfg.Lease, cfg.Rate, cfg.Duration, cfg.FaultEvery, strings.Join(fl.picks, ", "), cfg.Seed)
	fmt.Fprintf(os.Stderr, "seed %d\n", cfg.Seed)

	p := newProgress()
	// Every revision is kept, so the whole stored history can be checked afterwards.
	// Every process on its own role's credentials (DESIGN 9): the server enforces them, each
	// node has a node credential, the load is a gateway and the effects consumer an effects
	// consumer; only the checker reading the whole history is admin.
	authDir, err := os.MkdirTemp("", "tickbench-chaos-auth")
	if err != nil {
		return err
	}
	defer os.RemoveAll(authDir)
	b, err := startBenchCluster(ctx, p, fl.tickd, proc.ClusterConfig{Lease: cfg.Lease, Shards: cfg.Shards, History: 100_000_000,
		FaultHooks: true, AuthDir: authDir}, nodeIDs(cfg.Nodes))
	if err != nil {
		return err
	}
	defer b.close()
	gen, err := b.newLoad(cfg.Seed, cfg.Rate, cfg.GiveUp, false)
	if err != nil {
		return err
	}
	defer gen.nc.Close()
	gen.killable, gen.killableHP = cfg.Killable, cfg.KillableHP
	if err := gen.setup(ctx, p, cfg.Instances); err != nil {
		return err
	}
	// The effects consumer runs the whole soak, on the server the nemesis never touches: its
	// deliveries are what a loot service would get while owners die, move and republish.
	fxConn, err := b.ConnectAs(auth.Effects, "tickbench-effects", nats.Name("tickbench effects consumer"))
	if err != nil {
		return err
	}
	fc, err := startFxConsumer(ctx, fxConn, cfg.FxNak, cfg.Seed)
	if err != nil {
		return err
	}
	defer fc.stop()
	c := &chaos{b: b, cfg: cfg, rep: rep, p: p, rng: mrand.New(mrand.NewPCG(cfg.Seed, cfg.Seed+1)), picks: fl.picks,
		cur: map[string]*life{}, t0: time.Now(), fx: fc}
	for _, id := range b.ids {
		c.newLife(id, b.Node(id))
	}

	if err := c.runNemesis(ctx, gen); err != nil {
		return err
	}
	c.checkRun(ctx, gen)
	printChaos(rep)
	if err := writeJSON(fl.jsonOut, rep); err != nil {
		return err
	}
	if !rep.Pass {
		return fmt.Errorf("%w (seed %d): %s", errChaosFailed, cfg.Seed, strings.Join(rep.Failures, "; "))
	}
	return nil
}

// chaosFlags are the chaos flags that are not part of the report's configuration.
type chaosFlags struct {
	picks   []string // the fault kinds the nemesis picks from
	tickd   string   // a tickd binary to use instead of building one
	jsonOut string   // where to write the report as JSON ("": nowhere)
}

// parseChaosFlags reads and checks the chaos flags; a --seed of 0 becomes a random seed.
func parseChaosFlags(args []string) (chaosConfig, chaosFlags, error) {
	fs := newFlagSet("chaos", "A nemesis soak: a tickd server and --nodes node processes under --rate attacks, with random pauses,\n"+
		"kills, moves, drains and frozen saves (--faults) every --fault-every; then the stored history, every\n"+
		"acknowledged command and every effect are checked (exit 1 on a violation). --seed replays a run.")
	nodes := fs.Int("nodes", 3, "tickd node processes")
	instances := fs.Int("instances", 100, "dungeons created by tickbench (boss HP 1e9 but the killable ones, one joined player)")
	killable := fs.Int("killable", 20, "of the instances, how many get a boss of --killable-hp that dies and respawns (one loot effect per kill); at most --instances")
	killableHP := fs.Int64("killable-hp", 50, "boss HP of the killable instances (50: one attack kills, and the boss never enrages, so the only player is never downed)")
	fxNak := fs.Float64("fx-nak", 0.05, "share of first effect deliveries the consumer applies and then refuses (as if it crashed before acknowledging): each must come again and not be applied again")
	rate := fs.Float64("rate", 200, "attack commands per second, in all")
	duration := fs.Duration("duration", 10*time.Minute, "how long the nemesis runs")
	every := fs.Duration("fault-every", 5*time.Second, "mean pause between two faults (uniform in 0.5–1.5 ×)")
	lease := fs.Duration("lease", 2*time.Second, "node lease TTL (whole seconds)")
	shards := fs.Int("shards", 32, "shards of the cluster")
	giveUp := fs.Duration("give-up", 30*time.Second, "an attack with no answer after this long counts as unknown")
	seed := fs.Uint64("seed", 0, "seed of the nemesis and the load (0: random, printed)")
	kinds := fs.String("faults", strings.Join(faultKinds, ","), "fault kinds the nemesis picks from")
	bin := fs.String("tickd", "", "use this tickd binary instead of building one")
	jsonOut := fs.String("json", "", "write the figures as JSON to this file")
	if err := parseFlags(fs, args); err != nil {
		return chaosConfig{}, chaosFlags{}, err
	}
	if *nodes < 2 || *instances < 1 || *rate <= 0 || *duration <= 0 || *every <= 0 {
		return chaosConfig{}, chaosFlags{}, errors.New("--nodes must be at least 2; --instances, --rate, --duration and --fault-every positive")
	}
	if *killable < 0 || *killableHP < 1 || *killableHP > 1e12 || *fxNak < 0 || *fxNak >= 1 {
		return chaosConfig{}, chaosFlags{}, errors.New("--killable must not be negative, --killable-hp within 1..1e12, --fx-nak within [0, 1)")
	}
	*killable = min(*killable, *instances)
	if *seed == 0 {
		*seed = mrand.Uint64()
	}
	picks, err := parseFaultKinds(*kinds)
	if err != nil {
		return chaosConfig{}, chaosFlags{}, err
	}
	cfg := chaosConfig{Nodes: *nodes, Instances: *instances, Shards: *shards, Lease: *lease, Rate: *rate,
		Duration: *duration, FaultEvery: *every, GiveUp: *giveUp, Seed: *seed, Killable: *killable, KillableHP: *killableHP, FxNak: *fxNak}
	return cfg, chaosFlags{picks: picks, tickd: *bin, jsonOut: *jsonOut}, nil
}

// parseFaultKinds reads the --faults list: known fault kinds, at least one.
func parseFaultKinds(list string) ([]string, error) {
	var picks []string
	for _, k := range parseList(list) {
		found := false
		for _, f := range faultKinds {
			found = found || f == k
		}
		if !found {
			return nil, fmt.Errorf("--faults: unknown kind %q (%s)", k, strings.Join(faultKinds, ", "))
		}
		picks = append(picks, k)
	}
	if len(picks) == 0 {
		return nil, errors.New("--faults: none")
	}
	return picks, nil
}

// runNemesis runs the load and the sampler while it injects faults for the configured duration,
// then heals the cluster and makes the final write; an interrupt stops it with ctx's error.
func (c *chaos) runNemesis(ctx context.Context, gen *loadGen) error {
	stopLoad := gen.start(ctx)
	defer stopLoad()
	c.scrapeAll()
	samCtx, stopSam := context.WithCancel(ctx)
	defer stopSam()
	var samWG sync.WaitGroup
	samWG.Add(1)
	go func() { defer samWG.Done(); c.sample(samCtx, gen) }()

	c.injectFaults(ctx)
	if ctx.Err() != nil {
		stopSam()
		samWG.Wait()
		return ctx.Err()
	}
	stopLoad()
	c.event("nemesis", "", "stopped; healing")
	c.healAndFinalWrite(ctx, gen)
	stopSam()
	samWG.Wait()
	c.scrapeAll() // the last counters of every process still running
	c.p.done()
	return nil
}

// injectFaults injects a fault of a random picked kind every 0.5–1.5 × --fault-every until the
// duration is over or ctx ends, restarting first any node that exited on its own.
func (c *chaos) injectFaults(ctx context.Context) {
	end := c.t0.Add(c.cfg.Duration)
	for time.Now().Before(end) && ctx.Err() == nil {
		c.reapUnexpected()
		c.inject(ctx, c.picks[c.rng.IntN(len(c.picks))])
		gap := time.Duration((0.5 + c.rng.Float64()) * float64(c.cfg.FaultEvery))
		_ = sleepCtx(ctx, min(gap, time.Until(end)))
	}
}

// healAndFinalWrite heals the cluster, waits for the answers still under way, then sends one more
// attack per instance, each of which must be acknowledged; what fails goes into the report.
func (c *chaos) healAndFinalWrite(ctx context.Context, gen *loadGen) {
	rep := c.rep
	healStart := time.Now()
	if err := c.heal(ctx, gen.ids); err != nil {
		rep.Failures = append(rep.Failures, "heal: "+err.Error())
	}
	rep.HealSeconds = time.Since(healStart).Seconds()
	c.p.line("healed in %.1fs; waiting for %d attacks in flight", rep.HealSeconds, gen.inflight.Load())
	gen.wait()
	c.p.line("final write: one attack per instance")
	rep.Damage.FinalWriteAcked, rep.Damage.FinalWriteFailed = finalWrite(gen)
	if rep.Damage.FinalWriteFailed > 0 {
		rep.Failures = append(rep.Failures, fmt.Sprintf("final write: %d of %d instances did not acknowledge one more attack",
			rep.Damage.FinalWriteFailed, len(gen.ids)))
	}
	c.settleEffects(ctx, gen)
}

// settleEffects waits (bounded) until no stored record holds an effect, then until the
// consumer has been delivered and has acknowledged the whole stream.
func (c *chaos) settleEffects(ctx context.Context, gen *loadGen) {
	e := &c.rep.Effects
	c.p.line("waiting for every outbox to drain (at most %v)", fxDrainFor)
	start := time.Now()
	left, err := waitOutboxes(ctx, c.b, gen.ids, c.p, fxDrainFor)
	e.DrainSeconds = time.Since(start).Seconds()
	if err != nil {
		c.rep.Failures = append(c.rep.Failures, fmt.Sprintf("effects: outboxes not drained after %.0fs (%d instances): %v", e.DrainSeconds, left, err))
		return
	}
	c.p.line("outboxes drained in %.1fs; waiting for the effects consumer to catch up (at most %v)", e.DrainSeconds, fxCatchUpFor)
	start = time.Now()
	err = c.fx.waitCaughtUp(ctx, c.p, fxCatchUpFor)
	e.CatchUpSeconds = time.Since(start).Seconds()
	if err != nil {
		c.rep.Failures = append(c.rep.Failures, "effects: "+err.Error())
	}
}

// checkRun fills the report with the run's figures, checks every instance's damage and the stored
// history, and judges the result.
func (c *chaos) checkRun(ctx context.Context, gen *loadGen) {
	rep := c.rep
	rep.Commands = gen.result()
	c.mu.Lock()
	rep.Lives = c.lives
	for _, l := range c.lives {
		rep.StaleRejected += l.StaleRejected
		rep.Effects.Emitted += l.FxEmitted
		rep.Effects.Published += l.FxPublished
		rep.Effects.Failed += l.FxFailed
	}
	c.mu.Unlock()
	c.p.line("checking every instance against the acknowledged attacks")
	checkDamage(ctx, c.b, gen, rep)
	c.p.line("checking the effects: stream and consumer against the stored states")
	checkEffects(ctx, c.b, gen, c.fx, rep)
	c.p.line("checking the stored history, message by message")
	checkHistory(ctx, c.b, rep)
	c.p.done()
	rep.judge()
}

// judge adds a failure for every check the figures fail and sets Pass (no failure, a pass).
func (rep *chaosReport) judge() {
	if rep.History.Incomplete != "" {
		rep.Failures = append(rep.Failures, "history incomplete: "+rep.History.Incomplete)
	}
	if rep.History.Error != "" {
		rep.Failures = append(rep.Failures, "history check: "+rep.History.Error)
	}
	if rep.History.Stale > 0 {
		rep.Failures = append(rep.Failures, fmt.Sprintf("%d stale writes accepted by the store", rep.History.Stale))
	}
	if rep.History.Backwards > 0 {
		rep.Failures = append(rep.Failures, fmt.Sprintf("%d ticks went backwards", rep.History.Backwards))
	}
	if rep.Damage.Lost > 0 {
		rep.Failures = append(rep.Failures, fmt.Sprintf("acknowledged attacks lost on %d instances (%d damage)", rep.Damage.Lost, rep.Damage.LostDamage))
	}
	if rep.Damage.Duplicates > 0 {
		rep.Failures = append(rep.Failures, fmt.Sprintf("attacks applied twice on %d instances (%d damage beyond acknowledged + unknown)", rep.Damage.Duplicates, rep.Damage.DuplicateDamage))
	}
	if rep.Damage.Unreadable > 0 {
		rep.Failures = append(rep.Failures, fmt.Sprintf("%d instance records could not be read", rep.Damage.Unreadable))
	}
	rep.Failures = append(rep.Failures, rep.Effects.failures()...)
	rep.Pass = len(rep.Failures) == 0
	if rep.Failures == nil {
		rep.Failures = []string{}
	}
}

// chaos is the nemesis and its bookkeeping. Only the nemesis goroutine starts, kills and
// restarts processes; the sampler only reads them.
type chaos struct {
	b     *benchCluster
	cfg   chaosConfig
	rep   *chaosReport
	p     *progress
	rng   *mrand.Rand
	picks []string
	t0    time.Time
	fx    *fxConsumer

	mu    sync.Mutex
	lives []*life
	cur   map[string]*life
	last  string
}

func (c *chaos) now() float64 { return time.Since(c.t0).Seconds() }

func (c *chaos) newLife(id string, p *proc.Proc) *life {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 1
	if old := c.cur[id]; old != nil {
		n = old.N + 1
	}
	l := &life{Node: id, N: n, Pid: p.Pid(), Started: c.now(), p: p}
	c.lives = append(c.lives, l)
	c.cur[id] = l
	return l
}

func (c *chaos) event(kind, node, detail string) {
	e := faultEvent{At: c.now(), Kind: kind, Node: node, Detail: detail}
	c.mu.Lock()
	c.rep.FaultLog = append(c.rep.FaultLog, e)
	if kind != "nemesis" && !strings.HasSuffix(kind, "-skipped") {
		c.rep.Faults[kind]++
	}
	c.last = fmt.Sprintf("%s %s %s", kind, node, detail)
	c.mu.Unlock()
	c.p.line("%7.1fs  fault: %-12s %-4s %s", e.At, kind, node, detail)
}

func (c *chaos) current() []*life {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*life, 0, len(c.cur))
	for _, id := range c.b.ids {
		out = append(out, c.cur[id])
	}
	return out
}

// running lists the current lives that are neither dead nor stopped.
func (c *chaos) running() []*life {
	var out []*life
	for _, l := range c.current() {
		if l.p.Alive() && !l.p.Stopped() {
			out = append(out, l)
		}
	}
	return out
}

func (c *chaos) leaseTimes() time.Duration {
	return time.Duration((1 + 2*c.rng.Float64()) * float64(c.cfg.Lease))
}

// scrape reads one life's counters (a stopped or dead process is skipped).
func (c *chaos) scrape(l *life) {
	if !l.p.Alive() || l.p.Stopped() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	m, err := l.p.Scrape(ctx)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	l.StaleRejected = m[`tickfence_state_writes_total{result="stale_owner"}`]
	l.FxEmitted = m["tickfence_effects_emitted_total"]
	l.FxPublished = m["tickfence_effects_published_total"]
	l.FxFailed = m["tickfence_effects_publish_failures_total"]
	l.instances = m["tickfence_instances"]
	l.Scrapes++
}

func (c *chaos) scrapeAll() {
	var wg sync.WaitGroup
	for _, l := range c.current() {
		wg.Add(1)
		go func() { defer wg.Done(); c.scrape(l) }()
	}
	wg.Wait()
}

// sample scrapes every process once a second and prints progress every five.
func (c *chaos) sample(ctx context.Context, gen *loadGen) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for i := 1; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.scrapeAll()
		if i%5 == 0 {
			c.mu.Lock()
			var stale float64
			for _, l := range c.lives {
				stale += l.StaleRejected
			}
			faults := 0
			for _, n := range c.rep.Faults {
				faults += n
			}
			c.mu.Unlock()
			c.p.line("%7.1fs/%.0fs  %s  faults %d  stale rejected %.0f", c.now(), c.cfg.Duration.Seconds(), gen.status(), faults, stale)
		}
	}
}

// endLife records how a life ended.
func (c *chaos) endLife(l *life, how string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l.End == "" {
		l.End, l.Ended = how, c.now()
	}
}

// restart starts a new process for a node ID (a new session); it joins on its own once the old
// lease is gone.
func (c *chaos) restart(id string) error {
	p, err := c.b.StartNode(id)
	if err != nil {
		return err
	}
	c.newLife(id, p)
	return nil
}

// reapUnexpected restarts nodes that exited without being killed: a finding, reported.
func (c *chaos) reapUnexpected() {
	for _, l := range c.current() {
		if l.p.Alive() {
			continue
		}
		how := fmt.Sprintf("exited unexpectedly: %v", l.p.ExitErr())
		c.endLife(l, how)
		c.mu.Lock()
		c.rep.Unexpected++
		c.mu.Unlock()
		c.event("unexpected-exit", l.Node, how+"; restarting it")
		if err := c.restart(l.Node); err != nil {
			c.event("restart-skipped", l.Node, err.Error())
		}
	}
}

func (c *chaos) pick(ls []*life) *life {
	if len(ls) == 0 {
		return nil
	}
	return ls[c.rng.IntN(len(ls))]
}

func (c *chaos) inject(ctx context.Context, kind string) {
	switch kind {
	case faultPause:
		l := c.pick(c.running())
		if l == nil {
			c.event(kind+"-skipped", "", "no running node")
			return
		}
		d := c.leaseTimes()
		if err := l.p.Signal(syscall.SIGSTOP); err != nil {
			c.event(kind+"-skipped", l.Node, err.Error())
			return
		}
		c.event(kind, l.Node, fmt.Sprintf("SIGSTOP for %v", d.Round(time.Millisecond)))
		_ = sleepCtx(ctx, d)
		_ = l.p.Signal(syscall.SIGCONT)
	case faultKill:
		l := c.pick(c.current())
		c.kill(l, "kill -9, restarted")
	case faultMove:
		c.move(ctx)
	case faultDrain:
		l := c.pick(c.running())
		if l == nil {
			c.event(kind+"-skipped", "", "no running node")
			return
		}
		d := c.leaseTimes()
		if _, err := c.b.Store.ControlCreate(ctx, store.DrainKey(l.Node), []byte(`{}`), 0); err != nil {
			c.event(kind+"-skipped", l.Node, err.Error())
			return
		}
		c.event(kind, l.Node, fmt.Sprintf("drained for %v", d.Round(time.Millisecond)))
		_ = sleepCtx(ctx, d)
		if err := c.b.Store.ControlDelete(context.Background(), store.DrainKey(l.Node), 0); err != nil {
			c.event("undrain-failed", l.Node, err.Error())
		}
	case faultHook:
		var owners []*life
		for _, l := range c.running() {
			c.mu.Lock()
			n := l.instances
			c.mu.Unlock()
			if n > 0 {
				owners = append(owners, l)
			}
		}
		l := c.pick(owners)
		if l == nil {
			c.event(kind+"-skipped", "", "no running node owns instances")
			return
		}
		mark := l.p.LineCount()
		if err := l.p.Signal(syscall.SIGUSR1); err != nil {
			c.event(kind+"-skipped", l.Node, err.Error())
			return
		}
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, line, err := l.p.WaitLog(wctx, mark, proc.Msg("fault hook: frozen before a write"))
		if err == nil {
			err = l.p.WaitStopped(wctx)
		}
		cancel()
		if err != nil {
			// Armed but not fired: it would freeze the node at some later moment, unsupervised.
			c.kill(l, "freeze hook armed but no write within 5s: kill -9 instead, restarted")
			return
		}
		d := c.leaseTimes()
		c.event(kind, l.Node, fmt.Sprintf("frozen before the write of %v (shard %v) for %v", line["instance"], line["shard"], d.Round(time.Millisecond)))
		_ = sleepCtx(ctx, d)
		_ = l.p.Signal(syscall.SIGCONT)
	}
}

// kill scrapes a life's counters, kills it and starts the node again.
func (c *chaos) kill(l *life, detail string) {
	if l == nil {
		return
	}
	c.scrape(l) // its counters as late as possible; they die with it
	l.p.Kill()
	c.endLife(l, "killed")
	c.event(faultKill, l.Node, detail)
	if err := c.restart(l.Node); err != nil {
		c.event("restart-skipped", l.Node, err.Error())
	}
}

// move writes move.<S> for a random owned shard to another live node, as tickctl move does.
func (c *chaos) move(ctx context.Context) {
	s, err := c.b.State(ctx)
	if err != nil {
		c.event(faultMove+"-skipped", "", err.Error())
		return
	}
	live := map[string]string{}
	var nodes []string
	for _, n := range s.Nodes {
		live[n.ID] = n.Record.Session
		nodes = append(nodes, n.ID)
	}
	var cands []int
	for sh, st := range s.Shards {
		if _, moving := s.Moves[uint32(sh)]; moving && s.Moves[uint32(sh)].State != store.MoveDone {
			continue
		}
		if sess, ok := live[st.Owner.Owner]; ok && sess == st.Owner.Session && st.Revision != 0 {
			cands = append(cands, sh)
		}
	}
	if len(cands) == 0 || len(nodes) < 2 {
		c.event(faultMove+"-skipped", "", "no owned shard or no other live node")
		return
	}
	sh := uint32(cands[c.rng.IntN(len(cands))])
	cur := s.Shards[sh].Owner
	var to []string
	for _, n := range nodes {
		if n != cur.Owner {
			to = append(to, n)
		}
	}
	target := to[c.rng.IntN(len(to))]
	rec, _ := json.Marshal(store.MoveRecord{From: cur.Owner, FromSession: cur.Session, To: target, State: store.MoveRequested, Reason: "chaos"})
	if err := createMove(ctx, c.b.Store, sh, rec); err != nil {
		c.event(faultMove+"-skipped", cur.Owner, fmt.Sprintf("shard %d: %v", sh, err))
		return
	}
	c.event(faultMove, cur.Owner, fmt.Sprintf("shard %d → %s", sh, target))
}

// createMove writes move.<S>, replacing a finished move not cleaned up yet (as tickctl does).
func createMove(ctx context.Context, st store.Control, sh uint32, rec []byte) error {
	_, err := st.ControlCreate(ctx, store.MoveKey(sh), rec, 0)
	if !errors.Is(err, store.ErrConflict) {
		return err
	}
	e, gerr := st.ControlGet(ctx, store.MoveKey(sh))
	var cur store.MoveRecord
	if gerr != nil || json.Unmarshal(e.Value, &cur) != nil || cur.State != store.MoveDone {
		return fmt.Errorf("shard %d is already moving", sh)
	}
	if err := st.ControlDelete(ctx, store.MoveKey(sh), e.Revision); err != nil {
		return err
	}
	_, err = st.ControlCreate(ctx, store.MoveKey(sh), rec, 0)
	return err
}

// heal resumes every process, lifts every drain, restarts dead nodes, and waits until every shard
// is owned by a live session with no move under way and every instance has ticked (a new record).
func (c *chaos) heal(ctx context.Context, instances []string) error {
	for _, l := range c.current() {
		if l.p.Alive() {
			_ = l.p.Signal(syscall.SIGCONT)
		}
	}
	for _, id := range c.b.ids {
		if err := c.b.Store.ControlDelete(ctx, store.DrainKey(id), 0); err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("undrain %s: %w", id, err)
		}
	}
	c.reapUnexpected()
	hctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for _, l := range c.current() {
		if err := proc.WaitJoined(hctx, l.p); err != nil {
			return err
		}
	}
	if _, err := c.b.WaitState(hctx, "every shard is owned by a live session of every node", func(s *coordinator.State) bool {
		return proc.AllOwnedLive(s) && len(s.Nodes) == len(c.b.ids)
	}); err != nil {
		return err
	}
	c.p.line("every shard owned by a live session; waiting until every instance ticks")
	before := map[string]uint64{}
	ids := map[string]uint32{}
	for _, id := range instances {
		sh := store.ShardOf(id, c.b.shards)
		r, err := c.b.Load(hctx, c.b.epoch, sh, id)
		if err != nil {
			return fmt.Errorf("load %s: %w", id, err)
		}
		before[id], ids[id] = r.Tick, sh
	}
	for len(ids) > 0 {
		for id, sh := range ids {
			if r, err := c.b.Load(hctx, c.b.epoch, sh, id); err == nil && r.Tick > before[id] {
				delete(ids, id)
			}
		}
		if len(ids) == 0 {
			break
		}
		if err := sleepCtx(hctx, 50*time.Millisecond); err != nil {
			return fmt.Errorf("%d instances not ticking: %w", len(ids), err)
		}
	}
	return nil
}

// finalRetryFor bounds how long the final write attacks a killable instance whose boss is dead.
const finalRetryFor = 30 * time.Second

// finalWrite sends one more attack to every instance; each must be acknowledged.
func finalWrite(g *loadGen) (acked, failed int) {
	var ok, bad atomic.Int64
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for i := range g.ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if finalAttack(g, i) {
				ok.Add(1)
			} else {
				bad.Add(1)
			}
		}()
	}
	wg.Wait()
	return int(ok.Load()), int(bad.Load())
}

// finalAttack sends the final attack to instance i. A killable instance's boss may be dead: the
// attack is then refused (rejected, nothing applied) and sent again with a new request ID until
// the next run takes it, for at most finalRetryFor.
func finalAttack(g *loadGen, i int) bool {
	deadline := time.Now().Add(finalRetryFor)
	for {
		switch out := g.attackOutcome(i); {
		case out == "ok":
			return true
		case out != "rejected" || i >= g.killable || time.Now().After(deadline):
			return false
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// checkDamage compares every instance's stored total_damage with the damage of its acknowledged
// attacks: below is a lost acknowledged write; above is a duplicate unless attacks with no answer
// (each at most maxAttackDamage) explain it.
// Kills change none of this: an attack's damage is min(roll, boss HP), the same in its answer and
// in total_damage, which a respawn does not reset; an attack on a dead boss is refused and
// applies nothing.
func checkDamage(ctx context.Context, b *benchCluster, g *loadGen, rep *chaosReport) {
	d := &rep.Damage
	d.Instances = len(g.ids)
	for i, id := range g.ids {
		acked, unknown := g.acked[i].Load(), g.unknowN[i].Load()
		d.AckedDamage += acked
		r, err := b.Load(ctx, b.epoch, store.ShardOf(id, b.shards), id)
		var st struct {
			Total int64 `msgpack:"total_damage"`
		}
		if err == nil {
			err = msgpack.Unmarshal(r.State, &st)
		}
		if err != nil {
			d.Unreadable++
			d.Examples = append(d.Examples, fmt.Sprintf("%s: %v", id, err))
			continue
		}
		d.StoredDamage += st.Total
		if unknown > 0 {
			d.WithUnknown++
		}
		switch {
		case st.Total < acked:
			d.Lost++
			d.LostDamage += acked - st.Total
			d.Examples = append(d.Examples, fmt.Sprintf("%s: stored %d < acknowledged %d (unknown attacks %d)", id, st.Total, acked, unknown))
		case st.Total > acked+unknown*maxAttackDamage:
			d.Duplicates++
			d.DuplicateDamage += st.Total - acked - unknown*maxAttackDamage
			d.Examples = append(d.Examples, fmt.Sprintf("%s: stored %d > acknowledged %d + %d unknown attacks × %d", id, st.Total, acked, unknown, maxAttackDamage))
		default:
			d.UnknownApplied += st.Total - acked
		}
	}
	if len(d.Examples) > 20 {
		d.Examples = d.Examples[:20]
	}
}

func checkHistory(ctx context.Context, b *benchCluster, rep *chaosReport) {
	h := &rep.History
	js, err := jetstream.New(b.NC)
	if err != nil {
		h.Error = err.Error()
		return
	}
	cl, err := b.Store.Cluster(ctx)
	if err != nil {
		h.Error = err.Error()
		return
	}
	for part := uint32(0); part < max(cl.Partitions, 1); part++ {
		bucket := store.DataBucket(cl.Epoch, part)
		h.Buckets = append(h.Buckets, bucket)
		hctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		r, err := history.Check(hctx, js, bucket)
		cancel()
		h.Messages += r.Messages
		h.Records += r.Records
		h.Stale += len(r.Stale)
		h.Backwards += len(r.Backwards)
		h.Examples = append(h.Examples, r.Stale...)
		h.Examples = append(h.Examples, r.Backwards...)
		if r.Incomplete != "" {
			h.Incomplete = bucket + ": " + r.Incomplete
		}
		if err != nil {
			h.Error = fmt.Sprintf("%s: %v", bucket, err)
			return
		}
	}
	if len(h.Examples) > 20 {
		h.Examples = h.Examples[:20]
	}
}

func printChaos(rep *chaosReport) {
	fmt.Println("faults injected:")
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	kinds := make([]string, 0, len(rep.Faults))
	total := 0
	for k, n := range rep.Faults {
		kinds = append(kinds, k)
		total += n
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fmt.Fprintf(tw, "  %s\t%d\n", k, rep.Faults[k])
	}
	fmt.Fprintf(tw, "  total\t%d\n", total)
	tw.Flush()
	skipped := 0
	for _, e := range rep.FaultLog {
		if strings.HasSuffix(e.Kind, "-skipped") {
			skipped++
		}
	}
	if skipped > 0 {
		fmt.Printf("  (%d picks skipped: nothing to apply them to)\n", skipped)
	}
	fmt.Println("\nprocess lives (a restart is a new life and a new session):")
	tw = tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  node\tlife\tstarted s\tended s\tend\tstale writes rejected\t")
	for _, l := range rep.Lives {
		end, ended := l.End, "-"
		if end == "" {
			end = "running"
		} else {
			ended = fmt.Sprintf("%.1f", l.Ended)
		}
		fmt.Fprintf(tw, "  %s\t%d\t%.1f\t%s\t%s\t%.0f\t\n", l.Node, l.N, l.Started, ended, end, l.StaleRejected)
	}
	tw.Flush()
	if rep.Unexpected > 0 {
		fmt.Printf("  %d node processes exited without being killed (see the lives above)\n", rep.Unexpected)
	}
	c := rep.Commands
	fmt.Printf("\nheal: %.1fs until every shard was owned by a live session and every instance ticked\n", rep.HealSeconds)
	fmt.Printf("operations: attacks sent %d, acknowledged %d, answered with an error %d", c.Sent, c.OK, c.Answered-c.OK)
	for k, v := range c.Errors {
		fmt.Printf(" (%s %d)", k, v)
	}
	fmt.Printf(", unknown (no answer within the give-up time) %d, retries %d, not sent %d\n", c.Unknown, c.Retried, c.Dropped)
	if rep.Config.Killable > 0 && c.Errors["rejected"] > 0 {
		fmt.Println("  (rejected: attacks on the dead boss of a killable instance before its next run; nothing applied)")
	}
	fmt.Printf("command round trip: p50 %s ms, p99 %s ms, p99.9 %s ms, max %s ms\n", ms(c.P50), ms(c.P99), ms(c.P999), ms(c.Max))
	d := rep.Damage
	fmt.Printf("final write: %d of %d instances acknowledged one more attack\n", d.FinalWriteAcked, d.Instances)
	fmt.Printf("\nstale writes rejected by the store (tickfence_state_writes_total{result=\"stale_owner\"}, summed over process lives): %.0f\n", rep.StaleRejected)
	h := rep.History
	complete := "complete"
	if h.Incomplete != "" {
		complete = "INCOMPLETE: " + h.Incomplete
	}
	fmt.Printf("stored history (%s): %d messages, %d instance records, %s\n", strings.Join(h.Buckets, ", "), h.Messages, h.Records, complete)
	if h.Error != "" {
		fmt.Printf("  history check error: %s\n", h.Error)
	}
	fmt.Printf("stale writes accepted: %d\n", h.Stale)
	fmt.Printf("ticks going backwards: %d\n", h.Backwards)
	fmt.Printf("acknowledged writes lost: %d instances (%d damage)\n", d.Lost, d.LostDamage)
	fmt.Printf("duplicates: %d instances (%d damage beyond acknowledged + unknown)\n", d.Duplicates, d.DuplicateDamage)
	fmt.Printf("instances with unknown attacks: %d; damage of unknown attacks found applied: %d (within bounds)\n", d.WithUnknown, d.UnknownApplied)
	fmt.Printf("damage: acknowledged %d, stored %d, over %d instances\n", d.AckedDamage, d.StoredDamage, d.Instances)
	for _, e := range append(h.Examples, d.Examples...) {
		fmt.Printf("  %s\n", e)
	}
	printEffects(rep.Effects, rep.Config.FxNak)
	if rep.Pass {
		fmt.Printf("\nresult: PASS (seed %d)\n", rep.Config.Seed)
	} else {
		fmt.Printf("\nresult: FAIL (seed %d)\n", rep.Config.Seed)
		for _, f := range rep.Failures {
			fmt.Printf("  %s\n", f)
		}
	}
}
