package main

import (
	"context"
	"errors"
	"fmt"
	"html"
	"io"
	"math"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/trace"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/tickfence/tickfence/internal/flightrec"
	"github.com/tickfence/tickfence/internal/proc"
	"github.com/tickfence/tickfence/store"
)

// The overload scenario: one node (a tickd process beside a `tickd server`), N dungeons, and an
// open-loop load generator that sends each attack exactly once (no client retry: every answer is
// counted as it came). It first finds the node's capacity — the most commands/s acknowledged
// while answers stay quick — then runs steps from 10 % to 200 % of it and reports, per step, what
// a user sees (ok / busy / other / no answer in time, round trip) and what the node does (ticks/s
// against its schedule, tick lateness, write latency, record size and bytes per command).

type overloadConfig struct {
	Instances       int           `json:"instances"`
	Shards          int           `json:"shards"`
	TickRate        float64       `json:"tick_rate_hz"`
	CheckpointEvery int           `json:"checkpoint_every"`
	Step            time.Duration `json:"step_ns"`
	Percents        []float64     `json:"percents"`
	Capacity        float64       `json:"capacity_commands_per_s"`
	Calibrated      bool          `json:"calibrated"`
	Timeout         time.Duration `json:"answer_timeout_ns"`
	RequestIDs      bool          `json:"opaque_request_ids"`
	NodeArgs        []string      `json:"node_args,omitempty"`
}

type overloadStep struct {
	Percent  float64 `json:"percent"` // of the capacity; 0 in calibration
	Offered  float64 `json:"offered_per_s"`
	OK       float64 `json:"ok_per_s"`
	Busy     float64 `json:"busy_per_s"`
	Other    float64 `json:"other_errors_per_s"`
	TimedOut float64 `json:"timed_out_per_s"` // no answer within the timeout
	// TimedOutBySecond: the attacks timed out, by the second of the step they were sent in.
	TimedOutBySecond []int64 `json:"timed_out_by_second_sent,omitempty"`
	// AnsweredLate: of the timed out, those answered after the give-up (the rest never were), and
	// LateQueue the most answers waiting in the generator's reply queue behind one of them.
	AnsweredLate float64 `json:"timed_out_answered_late_per_s"`
	LateQueue    int64   `json:"generator_reply_queue_at_late_answer_max"`
	// LateP50, LateMax: the round trips of those answered late (counted until one more give-up
	// after the step's last attack): a near miss, or seconds.
	LateP50 time.Duration `json:"timed_out_answered_round_trip_p50_ns,omitempty"`
	LateMax time.Duration `json:"timed_out_answered_round_trip_max_ns,omitempty"`
	// Warnings: the node's and the server's log lines at WARN or above during the step, by process
	// and message (a disconnection, a slow consumer, a refused write: what the figures may owe to).
	Warnings    map[string]int `json:"warnings,omitempty"`
	NotSent     int64          `json:"not_sent"` // not sent: 64 attacks to that dungeon unanswered already (a session holds no more), or the publish failed
	NotSentRate float64        `json:"not_sent_per_s"`
	// InFlight: attacks sent and not yet answered or given up, the mean over the step's samples
	// (one per pass of the send loop, about one a millisecond) and the most. Over the attacks
	// settled per second (answered or given up) it is their mean time in flight (Little's law);
	// once the sessions' windows bind (not sent > 0) it is the clients' bound, and that time
	// follows from the answer rate.
	InFlight    float64       `json:"in_flight_mean"`
	InFlightMax int64         `json:"in_flight_max"`
	P50         time.Duration `json:"round_trip_p50_ns"`
	P99         time.Duration `json:"round_trip_p99_ns"`
	Max         time.Duration `json:"round_trip_max_ns"`
	BusyP99     time.Duration `json:"busy_round_trip_p99_ns"` // of the attacks answered busy: is refusing quick?
	// NodeP99: the node's own view of a command, from its arrival (its queue wait included) to its
	// answer (tickfence_command_seconds); round trips far over it waited outside the node.
	NodeP99 time.Duration `json:"node_command_p99_ns"`
	NodeP50 time.Duration `json:"node_command_p50_ns"`
	// NodeLate: commands per second the node itself answered later than the give-up after their
	// arrival, as tickfence_command_seconds tells: over its largest bucket bound at or under the
	// give-up (exact at the default 1 s; over 1 s for a longer give-up, the histogram's last
	// bound). Of the timed out, those the node answered too late; the rest waited outside it
	// (the server, the generator's own queues).
	NodeLate float64 `json:"node_answered_after_give_up_per_s"`
	// QueueP99: of that, the wait in the node's queue before it read the command.
	QueueP99 time.Duration `json:"node_queue_p99_ns"`
	// ReplyQueue: the most answers waiting in the generator's own reply queue in the step (answers
	// that wait there add to the round trip, not to the node's figure).
	ReplyQueue  int           `json:"generator_reply_queue_max"`
	TicksFrac   float64       `json:"ticks_vs_scheduled"`
	Skipped     float64       `json:"ticks_skipped"`
	LateP99     time.Duration `json:"tick_lateness_p99_ns"`
	WriteP50    time.Duration `json:"write_p50_ns"`
	WriteP99    time.Duration `json:"write_p99_ns"`
	RecordBytes float64       `json:"record_bytes"`
	BytesPerCmd float64       `json:"bytes_written_per_command"`
	CPU         float64       `json:"node_cpu_cores"`
	ServerCPU   float64       `json:"server_cpu_cores"` // the tickd server process (NATS)
	// ServerPendingMax: the most bytes the server held queued for one client (sampled every 100
	// ms); ServerScrapeMax its slowest answer to those samples; ServerSlowOut the longest stretch
	// in which it sent under a quarter of the step's mean rate. A server that paused delivering
	// shows in the last two; a client (the node, the generator) reading too slowly in the first.
	ServerPendingMax float64       `json:"server_pending_bytes_max,omitempty"`
	ServerScrapeMax  time.Duration `json:"server_metrics_answer_max_ns,omitempty"`
	ServerSlowOut    time.Duration `json:"server_slow_delivery_max_ns,omitempty"`
	LoadCPU          float64       `json:"generator_cpu_cores"` // tickbench itself: the load is made on the same machine
	Errors           string        `json:"errors,omitempty"`
}

type overloadReport struct {
	Machine     machine        `json:"machine"`
	Config      overloadConfig `json:"config"`
	Calibration []overloadStep `json:"calibration,omitempty"`
	Steps       []overloadStep `json:"steps"`
	Damage      damageResult   `json:"damage"`
}

func runOverload(args []string) error {
	fs := newFlagSet("overload", "Command load from 10 % to 200 % of one node's capacity. It starts a tickd server and one tickd\n"+
		"node, creates --instances dungeons, finds the capacity (unless --capacity is given), then runs each\n"+
		"step for --step and prints one row per step. Every attack is sent once (the client does not retry\n"+
		"busy), so the table counts what the node answered. At the end every instance's stored damage is\n"+
		"compared with the acknowledged attacks.")
	instances := fs.Int("instances", 1000, "dungeons created by tickbench (boss HP 1e9: bosses never die)")
	shards := fs.Int("shards", 64, "shards of the cluster")
	tickRate := fs.Float64("tick-rate", 20, "tick rate of the node (Hz)")
	checkpoint := fs.Int("checkpoint-every", 20, "the node's --checkpoint-every")
	step := fs.Duration("step", 15*time.Second, "length of each load step")
	percents := fs.String("steps", "10,25,50,75,100,125,150,200", "load steps, in percent of the capacity")
	capacity := fs.Float64("capacity", 0, "the node's capacity in commands/s (0: find it first: 5 s steps, each half again the last, until answers slow down,\n"+
		"then two more that bisect between the last rate kept up with and the first not)")
	timeout := fs.Duration("give-up", time.Second, "an attack with no answer after this long counts as timed out (it is never retried)")
	opaque := fs.Bool("request-ids", false, "send opaque request IDs (Tickfence-Request-Id) instead of client sessions (needed for a tickd from before sessions)")
	nodeArgs := fs.String("node-args", "", "extra tickd flags for the node, space-separated (e.g. \"--max-command-delay -1\" to see the node without admission control)")
	flightDir := fs.String("flight-trace", "", "keep Go's flight recorder on in the node, the server and tickbench, and write all three's last\n"+
		"seconds of execution trace to this directory once 100 attacks of a step time out (once per step): what each\n"+
		"process did while commands were late (go tool trace FILE); costs CPU")
	bin := fs.String("tickd", "", "use this tickd binary instead of building one")
	profile := fs.String("profile", "", "write a CPU profile of the node (go tool pprof) taken over the middle of the --profile-step step to this file (starts the node with --pprof)")
	profileStep := fs.Float64("profile-step", 200, "the step (percent) --profile profiles")
	jsonOut := fs.String("json", "", "write the figures as JSON to this file")
	plotOut := fs.String("plot", "", "write an HTML page plotting the steps to this file")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var pcts []float64
	for _, f := range strings.Split(*percents, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || v <= 0 {
			return fmt.Errorf("--steps: %q is not a positive percentage", f)
		}
		pcts = append(pcts, v)
	}
	if *instances < 1 || *step <= 0 || *tickRate <= 0 || *timeout <= 0 {
		return errors.New("--instances, --step, --tick-rate and --give-up must be positive")
	}
	cfg := overloadConfig{Instances: *instances, Shards: *shards, TickRate: *tickRate, CheckpointEvery: *checkpoint,
		Step: *step, Percents: pcts, Capacity: *capacity, Timeout: *timeout, RequestIDs: *opaque}
	cfg.NodeArgs = []string{"--tick-rate", fmt.Sprint(*tickRate), "--checkpoint-every", fmt.Sprint(*checkpoint)}
	cfg.NodeArgs = append(cfg.NodeArgs, strings.Fields(*nodeArgs)...)
	if *profile != "" {
		cfg.NodeArgs = append(cfg.NodeArgs, "--pprof")
	}
	var serverArgs []string
	if *bin == "" || serverHasMetrics(*bin) {
		serverArgs = []string{"--metrics", "127.0.0.1:0", "--log-json"} // watched during each step (its address from the JSON log)
	}
	var fr *trace.FlightRecorder
	if *flightDir != "" {
		if len(serverArgs) == 0 {
			return fmt.Errorf("--flight-trace: %s server has no --metrics (a tickd from before it)", *bin)
		}
		if err := os.MkdirAll(*flightDir, 0o755); err != nil {
			return fmt.Errorf("--flight-trace: %w", err)
		}
		cfg.NodeArgs = append(cfg.NodeArgs, "--flight-trace", *flightDir)
		serverArgs = append(serverArgs, "--flight-trace", *flightDir)
		var err error
		if fr, err = flightrec.Start(15 * time.Second); err != nil {
			return fmt.Errorf("--flight-trace: %w", err)
		}
		defer fr.Stop()
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep := overloadReport{Machine: thisMachine(), Config: cfg}
	fmt.Printf("tickbench overload on %s\n", rep.Machine)
	fmt.Printf("1 node + tickd server, %d dungeons on %d shards at %g Hz, checkpoint every %d ticks, steps of %v, answer timeout %v\n\n",
		cfg.Instances, cfg.Shards, cfg.TickRate, cfg.CheckpointEvery, cfg.Step, cfg.Timeout)
	p := newProgress()
	b, err := startBenchCluster(ctx, p, *bin, proc.ClusterConfig{Lease: 2 * time.Second, Shards: *shards, NodeArgs: cfg.NodeArgs, ServerArgs: serverArgs}, []string{"n1"})
	if err != nil {
		return err
	}
	defer b.close()
	gen, err := b.newLoad(1, 0, *timeout, false)
	if err != nil {
		return err
	}
	defer gen.nc.Close()
	if err := gen.setup(ctx, p, *instances); err != nil {
		return err
	}
	a, err := newAttacker(gen, uint32(b.shards), *timeout, *opaque)
	if err != nil {
		return err
	}
	defer a.close()
	o := &overload{b: b, g: gen, a: a, cfg: cfg, p: p, fr: fr, traceDir: *flightDir}
	if cfg.Capacity == 0 {
		rep.Calibration, cfg.Capacity = o.calibrate(ctx)
		rep.Config.Capacity, rep.Config.Calibrated = cfg.Capacity, true
		p.line("capacity: %.0f commands/s", cfg.Capacity)
	}
	for _, pct := range pcts {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var prof chan error
		if *profile != "" && pct == *profileStep {
			prof = make(chan error, 1)
			go func() { prof <- o.profile(ctx, *profile, *step) }()
		}
		s := o.step(ctx, cfg.Capacity*pct/100, *step)
		s.Percent = pct
		if prof != nil {
			if err := <-prof; err != nil {
				p.line("profile: %v", err)
			} else {
				p.line("profile of the node at %g%%: %s (go tool pprof -top %s)", pct, *profile, *profile)
			}
		}
		rep.Steps = append(rep.Steps, s)
		p.line("%3.0f%%: %s", pct, s.brief())
	}
	p.line("checking every instance's stored damage against the acknowledged attacks")
	var cr chaosReport
	checkDamage(ctx, b, gen, &cr)
	rep.Damage = cr.Damage
	p.done()
	printOverload(rep)
	if err := writeJSON(*jsonOut, rep); err != nil {
		return err
	}
	if *plotOut != "" {
		if err := writeOverloadPlot(*plotOut, rep); err != nil {
			return err
		}
		fmt.Printf("plot: %s\n", *plotOut)
	}
	if d := rep.Damage; d.Lost > 0 || d.Duplicates > 0 || d.Unreadable > 0 {
		return fmt.Errorf("damage check failed: %d instances lost acknowledged damage, %d have duplicates, %d unreadable", d.Lost, d.Duplicates, d.Unreadable)
	}
	return nil
}

type overload struct {
	b   *benchCluster
	g   *loadGen
	a   *attacker
	cfg overloadConfig
	p   *progress
	// fr: tickbench's own flight recorder (--flight-trace, nil: off), written to traceDir with the
	// node's and the server's when a step's attacks time out.
	fr       *trace.FlightRecorder
	traceDir string
}

// warningsSince counts the log lines at WARN or above of each process from its mark on, by
// process and message; lines that are not JSON (a panic, the runtime's own) count as "text".
func warningsSince(procs map[string]*proc.Proc, from map[string]int) map[string]int {
	var out map[string]int
	for name, p := range procs {
		for _, l := range p.Lines(from[name]) {
			level, _ := l["level"].(string)
			msg, _ := l["msg"].(string)
			if level == "" && len(l) == 1 { // not JSON: kept whole as msg
				level, msg = "TEXT", "text"
			}
			if level == "WARN" || level == "ERROR" || level == "TEXT" {
				if out == nil {
					out = map[string]int{}
				}
				out[name+": "+msg]++
			}
		}
	}
	return out
}

func (s overloadStep) brief() string {
	var late string
	if len(s.TimedOutBySecond) > 0 {
		late = fmt.Sprintf("  timed out by second sent %v (answered late %.0f/s, round trip p50 %s ms, max %s ms; reply queue behind them up to %d)",
			s.TimedOutBySecond, s.AnsweredLate, ms(s.LateP50), ms(s.LateMax), s.LateQueue)
		late += fmt.Sprintf("  server: queued for one client up to %.1f MB, slowest metrics answer %s ms, slow delivery up to %s ms",
			s.ServerPendingMax/1e6, ms(s.ServerScrapeMax), ms(s.ServerSlowOut))
	}
	if len(s.Warnings) > 0 {
		late += fmt.Sprintf("  warnings %v", s.Warnings)
	}
	return fmt.Sprintf("offered %6.0f/s  ok %6.0f/s  busy %6.0f/s  timed out %5.0f/s  rtt p99 %6s ms (node %s ms)  ticks %5.1f%%  tick p99 %6s ms  write p99 %6s ms  record %5.0f B%s",
		s.Offered, s.OK, s.Busy, s.TimedOut, ms(s.P99), ms(s.NodeP99), 100*s.TicksFrac, ms(s.LateP99), ms(s.WriteP99), s.RecordBytes, late)
}

// calibrate ramps the load by half each 5 s step until the node stops keeping up: under 98 % of
// the offered load acknowledged, a round trip p99 over 250 ms, or under 99 % of the scheduled
// ticks run. Then two more steps bisect (geometrically) between the last rate kept up with and the
// first not, so the capacity found is within about 10 % of the knee, not anywhere up to a third
// below it (where a 1.5× ramp's rungs happen to fall decided the 200 % step's load). The capacity
// is the most commands/s acknowledged in a step that kept up.
func (o *overload) calibrate(ctx context.Context) ([]overloadStep, float64) {
	var steps []overloadStep
	best := 0.0
	try := func(rate float64) (bool, bool) {
		s := o.step(ctx, rate, 5*time.Second)
		steps = append(steps, s)
		o.p.line("calibrating: %s", s.brief())
		if s.Other > 0.5*s.Offered {
			o.p.line("calibration stopped: most attacks were refused (%s)", s.Errors)
			return false, true
		}
		kept := s.OK >= 0.98*s.Offered && s.P99 < 250*time.Millisecond && s.TicksFrac >= 0.99 && s.NotSent == 0
		if kept {
			best = max(best, s.OK)
		}
		return kept, false
	}
	searchCapacity(ctx, try, func(good, bad, mid float64) {
		o.p.line("calibrating: between %.0f/s (kept up) and %.0f/s (did not): %.0f/s", good, bad, mid)
	})
	if best == 0 {
		best = 500
	}
	return steps, best
}

// searchCapacity ramps rate from 500/s by half each try until one does not keep up, then bisects
// (geometrically) twice between the last kept and the first not; it returns the highest rate kept
// up with (0: none). stop from try ends it at once.
func searchCapacity(ctx context.Context, try func(rate float64) (kept, stop bool), bisecting func(good, bad, mid float64)) float64 {
	good, bad := 0.0, 0.0
	for rate := 500.0; ctx.Err() == nil && rate < 1e6; rate *= 1.5 {
		kept, stop := try(rate)
		if stop {
			return good
		}
		if !kept {
			bad = rate
			break
		}
		good = rate
	}
	for range 2 {
		if good == 0 || bad == 0 || ctx.Err() != nil {
			break
		}
		mid := math.Sqrt(good * bad)
		bisecting(good, bad, mid)
		kept, stop := try(mid)
		if stop {
			break
		}
		if kept {
			good = mid
		} else {
			bad = mid
		}
	}
	return good
}

// step offers rate attacks/s for d and measures.
func (o *overload) step(ctx context.Context, rate float64, d time.Duration) overloadStep {
	n := o.b.Node("n1")
	// A step starts on a node that admits everything again: what the previous one left (a
	// reduced admitted share) is not this one's.
	for settle := time.Now(); time.Since(settle) < 5*time.Second && ctx.Err() == nil; time.Sleep(100 * time.Millisecond) {
		if m, err := scrapeNode(n); err != nil || m["tickfence_admission_shedding"] == 0 {
			break
		}
	}
	before, _ := scrapeNode(n)
	cpu0, srv0, gen0 := procCPU(n.Pid()), procCPU(o.b.Server.Pid()), procCPU(os.Getpid())
	t0 := time.Now()
	var notSent int64
	a := o.a
	a.counts() // what the previous step left is not this one's
	a.clearReplyQueue()
	a.begin(t0)
	nodeLines, srvLines := n.LineCount(), o.b.Server.LineCount()
	if o.fr != nil {
		stop := make(chan struct{})
		defer close(stop)
		go o.traceOnTimeouts(n, stop)
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	watched := watchServer(wctx, o.b.Server)
	sctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	tick := time.NewTicker(time.Millisecond)
	issued := 0
	var flightSum, flightN, flightMax int64
	for sctx.Err() == nil {
		<-tick.C
		f := a.inflight()
		flightSum, flightN, flightMax = flightSum+f, flightN+1, max(flightMax, f)
		due := int(time.Since(t0).Seconds() * rate)
		for ; issued < due; issued++ {
			// The only bound on what is in flight: a session's 64 unanswered attacks per dungeon
			// (the timeout settles the rest).
			if err := a.send(int(o.g.seq.Add(1) % uint64(len(o.g.ids)))); err != nil {
				notSent++
			}
		}
	}
	tick.Stop()
	wcancel() // the server is watched while the load is offered, not while it drains
	srvWatch := <-watched
	a.drain() // every attack of the step answered or given up
	ok, busy, other, timedOut, rtt, busyRTT, errs := a.counts()
	replyQueue := a.replyQueue()
	lateBySec := a.timedOutBySecond()
	warnings := warningsSince(map[string]*proc.Proc{"node": n, "server": o.b.Server}, map[string]int{"node": nodeLines, "server": srvLines})
	secs := time.Since(t0).Seconds()
	after, _ := scrapeNode(n)
	cpu1, srv1, gen1 := procCPU(n.Pid()), procCPU(o.b.Server.Pid()), procCPU(os.Getpid())
	if timedOut > 0 {
		// Answers to the last ones given up, if they come; after every rate above is taken (no
		// load is offered meanwhile).
		time.Sleep(o.cfg.Timeout)
	}
	lateRTT := a.lateRTT.Take()
	s := overloadStep{Offered: rate, OK: float64(ok) / secs, Busy: float64(busy) / secs,
		Other: float64(other) / secs, TimedOut: float64(timedOut) / secs, NotSent: notSent, NotSentRate: float64(notSent) / secs,
		P50: rtt.Quantile(0.5), P99: rtt.Quantile(0.99), Max: rtt.Max(), BusyP99: busyRTT.Quantile(0.99), ReplyQueue: replyQueue,
		TimedOutBySecond: lateBySec, AnsweredLate: float64(a.answeredLate.Load()) / secs, LateQueue: a.lateQueue.Load(),
		LateP50: lateRTT.Quantile(0.5), LateMax: lateRTT.Max(),
		Warnings: warnings, InFlightMax: flightMax}
	if flightN > 0 {
		s.InFlight = float64(flightSum) / float64(flightN)
	}
	if srvWatch != nil {
		s.ServerPendingMax, s.ServerScrapeMax, s.ServerSlowOut = srvWatch.PendingMax, srvWatch.ScrapeMax, srvWatch.SlowOutMax
	}
	if cpu0 >= 0 && cpu1 >= 0 {
		s.CPU = (cpu1 - cpu0) / secs
	}
	if srv0 >= 0 && srv1 >= 0 {
		s.ServerCPU = (srv1 - srv0) / secs
	}
	if gen0 >= 0 && gen1 >= 0 {
		s.LoadCPU = (gen1 - gen0) / secs
	}
	if before != nil && after != nil {
		ticks := after["tickfence_ticks_total"] - before["tickfence_ticks_total"]
		s.TicksFrac = ticks / (secs * o.cfg.TickRate * float64(o.cfg.Instances))
		s.Skipped = after["tickfence_ticks_skipped_total"] - before["tickfence_ticks_skipped_total"]
		h := proc.Delta(before.Histogram("tickfence_tick_lateness_seconds"), after.Histogram("tickfence_tick_lateness_seconds"))
		s.LateP99 = secs2(proc.Quantile(h, 0.99))
		w := proc.Delta(before.Histogram("tickfence_state_write_seconds"), after.Histogram("tickfence_state_write_seconds"))
		s.WriteP50, s.WriteP99 = secs2(proc.Quantile(w, 0.5)), secs2(proc.Quantile(w, 0.99))
		c := proc.Delta(before.Histogram("tickfence_command_seconds"), after.Histogram("tickfence_command_seconds"))
		s.NodeP50, s.NodeP99 = secs2(proc.Quantile(c, 0.5)), secs2(proc.Quantile(c, 0.99))
		s.NodeLate = proc.OverBoundUnder(c, o.cfg.Timeout.Seconds()) / secs
		q := proc.Delta(before.Histogram("tickfence_command_queue_seconds"), after.Histogram("tickfence_command_queue_seconds"))
		s.QueueP99 = secs2(proc.Quantile(q, 0.99))
		writes := after[`tickfence_state_writes_total{result="ok"}`] - before[`tickfence_state_writes_total{result="ok"}`]
		s.RecordBytes = o.recordBytes(ctx)
		if ok > 0 {
			s.BytesPerCmd = writes * s.RecordBytes / float64(ok)
		}
	}
	if len(errs) > 0 {
		s.Errors = fmt.Sprint(errs)
	}
	return s
}

// traceOnTimeouts writes tickbench's flight trace and asks the node and the server (started with
// --flight-trace) for theirs once 100 attacks of the step have timed out, once per step: the
// seconds before hold what delayed them.
func (o *overload) traceOnTimeouts(n *proc.Proc, stop <-chan struct{}) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		k := o.a.timedOut.Load()
		if k < 100 {
			continue
		}
		path := filepath.Join(o.traceDir, "tickbench-"+time.Now().UTC().Format("20060102T150405.000Z")+".trace")
		if _, err := flightrec.Write(o.fr, path); err != nil {
			o.p.line("flight trace of tickbench: %v", err)
		} else {
			o.p.line("flight trace of tickbench after %d timeouts in this step: %s", k, path)
		}
		for _, pr := range []*proc.Proc{n, o.b.Server} {
			u := strings.TrimSuffix(pr.MetricsURL(), "/metrics") + "/debug/flight-trace"
			resp, err := http.Post(u, "text/plain", nil)
			if err != nil {
				o.p.line("flight trace of %s: %v", pr.Name, err)
				continue
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			o.p.line("flight trace of %s after %d timeouts in this step: %s (HTTP %d)", pr.Name, k, strings.TrimSpace(string(body)), resp.StatusCode)
		}
		return
	}
}

// profile takes a CPU profile of the node over the middle half of a step of length d.
func (o *overload) profile(ctx context.Context, path string, d time.Duration) error {
	u := strings.TrimSuffix(o.b.Node("n1").MetricsURL(), "/metrics")
	if u == "" {
		return errors.New("the node has not logged its metrics address")
	}
	secs := max(int(d.Seconds()/2), 1)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d / 4):
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", u, secs), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", req.URL, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func secs2(v float64) time.Duration {
	if math.IsNaN(v) {
		return 0
	}
	return time.Duration(v * 1e9)
}

func scrapeNode(n *proc.Proc) (proc.Metrics, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return n.Scrape(ctx)
}

// procCPU is the user+system CPU seconds of a process so far (-1 if unknown).
func procCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return -1
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // clock ticks (USER_HZ = 100 on Linux)
}

// recordBytes is the mean encoded size of 20 of the instances' records.
func (o *overload) recordBytes(ctx context.Context) float64 {
	total, n := 0, 0
	for i := 0; i < len(o.g.ids) && n < 20; i += max(1, len(o.g.ids)/20) {
		id := o.g.ids[i]
		rec, err := o.b.Load(ctx, o.b.epoch, store.ShardOf(id, o.b.shards), id)
		if err != nil {
			continue
		}
		if b, err := store.EncodeRecord(rec); err == nil {
			total += len(b)
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return float64(total) / float64(n)
}

func printOverload(rep overloadReport) {
	c := rep.Config
	fmt.Printf("\ncapacity %.0f commands/s (%s)\n\n", c.Capacity, map[bool]string{true: "found by the ramp above", false: "given"}[c.Calibrated])
	// The peak: the most acknowledged per second in any step (past the capacity found by the
	// ramp, whose bound on round trips it may exceed).
	peak := max(c.Capacity, 1)
	for _, s := range rep.Steps {
		peak = max(peak, s.OK)
	}
	fmt.Printf("peak %.0f ok/s (the most acknowledged in a step, or the capacity if higher); not sent: the dungeon had %d attacks unanswered\n", peak, store.MaxClientInFlight)
	fmt.Printf("in flight: attacks sent and neither answered nor given up yet (mean over the step), at most %d in all; divided by\n"+
		"those settled per second (ok + busy + other + timed out) it is their mean time in flight (Little's law). Once the sessions'\n"+
		"windows fill (not sent > 0), in flight is the clients' bound and that time follows from the answer rate, whatever the node does\n\n", store.MaxClientInFlight*c.Instances)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "load\toffered/s\tok/s\tok vs peak\tbusy/s\ttimed out/s\tnot sent/s\tin flight\tother/s\trtt p50 ms\trtt p99 ms\tbusy p99 ms\tnode p99 ms\tnode late/s\tnode queue p99 ms\treply queue\tticks vs sched\tskipped\ttick p99 ms\twrite p50 ms\twrite p99 ms\trecord B\tB/cmd\tCPU node / server / load\t")
	for _, s := range rep.Steps {
		fmt.Fprintf(w, "%.0f%%\t%.0f\t%.0f\t%.1f%%\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%s\t%s\t%s\t%s\t%.0f\t%s\t%d\t%.1f%%\t%.0f\t%s\t%s\t%s\t%.0f\t%.0f\t%.2f / %.2f / %.2f\t\n",
			s.Percent, s.Offered, s.OK, 100*s.OK/peak, s.Busy, s.TimedOut, s.NotSentRate, s.InFlight, s.Other, ms(s.P50), ms(s.P99), ms(s.BusyP99), ms(s.NodeP99), s.NodeLate, ms(s.QueueP99), s.ReplyQueue, 100*s.TicksFrac, s.Skipped,
			ms(s.LateP99), ms(s.WriteP50), ms(s.WriteP99), s.RecordBytes, s.BytesPerCmd, s.CPU, s.ServerCPU, s.LoadCPU)
	}
	w.Flush()
	d := rep.Damage
	fmt.Printf("\ndamage check over %d instances: acknowledged %d, stored %d; lost %d, duplicates %d, unreadable %d (attacks with no answer that were applied: %d damage)\n",
		d.Instances, d.AckedDamage, d.StoredDamage, d.Lost, d.Duplicates, d.Unreadable, d.UnknownApplied)
	for _, e := range d.Examples {
		fmt.Println("  " + e)
	}
}

// writeOverloadPlot writes a self-contained HTML page: per step, commands/s by outcome against
// the offered load, and the round trip and tick lateness p99 on a log scale.
func writeOverloadPlot(path string, rep overloadReport) error {
	var b strings.Builder
	b.WriteString("<!doctype html><meta charset=utf-8><title>tickbench overload</title>" +
		"<style>body{font:14px sans-serif;margin:2em}svg{background:#fafafa;border:1px solid #ddd}</style>")
	fmt.Fprintf(&b, "<h1>tickbench overload</h1><p>%s; capacity %.0f commands/s; %d dungeons at %g Hz</p>",
		html.EscapeString(rep.Machine.String()), rep.Config.Capacity, rep.Config.Instances, rep.Config.TickRate)
	const w, h, left, bottom = 900.0, 320.0, 70.0, 30.0
	steps := rep.Steps
	if len(steps) == 0 {
		return os.WriteFile(path, []byte(b.String()), 0o644)
	}
	pmax := 0.0
	for _, s := range steps {
		pmax = math.Max(pmax, s.Percent)
	}
	x := func(p float64) float64 { return left + (w-left-20)*p/pmax }
	// Throughput.
	top := 0.0
	for _, s := range steps {
		top = math.Max(top, s.Offered)
	}
	y := func(v float64) float64 { return (h - bottom) - (h-bottom-10)*v/top }
	b.WriteString("<h2>commands/s by outcome vs offered load</h2>")
	fmt.Fprintf(&b, "<svg width=%v height=%v>", w, h)
	for _, s := range steps {
		fmt.Fprintf(&b, "<text x=%.1f y=%v font-size=11 text-anchor=middle>%.0f%%</text>", x(s.Percent), h-10, s.Percent)
	}
	for _, v := range []float64{0, top / 2, top} {
		fmt.Fprintf(&b, "<line x1=%v x2=%v y1=%.1f y2=%.1f stroke=#ddd /><text x=4 y=%.1f font-size=11>%.0f/s</text>", left, w-20, y(v), y(v), y(v)+4, v)
	}
	series := []struct {
		name, color string
		v           func(overloadStep) float64
	}{
		{"offered", "#999", func(s overloadStep) float64 { return s.Offered }},
		{"ok", "#2ca02c", func(s overloadStep) float64 { return s.OK }},
		{"busy", "#ff7f0e", func(s overloadStep) float64 { return s.Busy }},
		{"timed out", "#d62728", func(s overloadStep) float64 { return s.TimedOut }},
	}
	for i, q := range series {
		var pts []string
		for _, s := range steps {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(s.Percent), y(q.v(s))))
		}
		fmt.Fprintf(&b, "<polyline fill=none stroke=%s stroke-width=2 points=%q />", q.color, strings.Join(pts, " "))
		fmt.Fprintf(&b, "<text x=%v y=%d font-size=12 fill=%s>%s</text>", left+10, 16+14*i, q.color, q.name)
	}
	b.WriteString("</svg>")
	// Latencies, log scale.
	lo, hi := -1.0, 3.0 // 0.1 ms … 1000 ms
	ly := func(d time.Duration) float64 {
		l := math.Log10(math.Max(float64(d)/1e6, 0.1))
		return (h - bottom) - (h-bottom-10)*(l-lo)/(hi-lo)
	}
	b.WriteString("<h2>p99: command round trip, tick lateness, write (log scale)</h2>")
	fmt.Fprintf(&b, "<svg width=%v height=%v>", w, h)
	for e := lo; e <= hi; e++ {
		d := time.Duration(math.Pow(10, e) * 1e6)
		fmt.Fprintf(&b, "<line x1=%v x2=%v y1=%.1f y2=%.1f stroke=#ddd /><text x=4 y=%.1f font-size=11>%g ms</text>", left, w-20, ly(d), ly(d), ly(d)+4, math.Pow(10, e))
	}
	for _, s := range steps {
		fmt.Fprintf(&b, "<text x=%.1f y=%v font-size=11 text-anchor=middle>%.0f%%</text>", x(s.Percent), h-10, s.Percent)
	}
	lat := []struct {
		name, color string
		v           func(overloadStep) time.Duration
	}{
		{"round trip p99", "#1f77b4", func(s overloadStep) time.Duration { return s.P99 }},
		{"tick lateness p99", "#9467bd", func(s overloadStep) time.Duration { return s.LateP99 }},
		{"write p99", "#8c564b", func(s overloadStep) time.Duration { return s.WriteP99 }},
	}
	for i, q := range lat {
		var pts []string
		for _, s := range steps {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(s.Percent), ly(q.v(s))))
		}
		fmt.Fprintf(&b, "<polyline fill=none stroke=%s stroke-width=2 points=%q />", q.color, strings.Join(pts, " "))
		fmt.Fprintf(&b, "<text x=%v y=%d font-size=12 fill=%s>%s</text>", left+10, 16+14*i, q.color, q.name)
	}
	b.WriteString("</svg>")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
