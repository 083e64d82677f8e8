package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/internal/proc"
	"github.com/tickfence/tickfence/store/natskv"
)

// The frames scenario: what publishing frames costs a node. One node (a tickd process beside a
// `tickd server`) runs N demo dungeons with almost no commands, once without frames and once with
// every dungeon publishing a frame (~190 bytes) every tick, alternating, and reports for each run
// the tick lateness p99, ticks/s, the node's CPU per tick and the frames published and dropped —
// the frames' cost is the ratio of the two runs on the same machine.

type framesRun struct {
	Frames      bool          `json:"frames"`
	Instances   int           `json:"instances"`
	TicksPerS   float64       `json:"ticks_per_s"`
	Scheduled   float64       `json:"scheduled_ticks_per_s"`
	Skipped     float64       `json:"ticks_skipped"`
	LateP99     time.Duration `json:"tick_lateness_p99_ns"`
	LateP50     time.Duration `json:"tick_lateness_p50_ns"`
	NodeCPU     float64       `json:"node_cpu_cores"`
	ServerCPU   float64       `json:"server_cpu_cores"`
	CPUPerTick  time.Duration `json:"node_cpu_per_tick_ns"`
	FramesPerS  float64       `json:"frames_published_per_s"`
	DroppedPerS float64       `json:"frames_dropped_per_s"`
	WatchedPerS float64       `json:"frames_received_by_watcher_per_s,omitempty"`
}

type framesReport struct {
	Machine machine     `json:"machine"`
	Runs    []framesRun `json:"runs"`
}

func runFrames(args []string) error {
	fs := newFlagSet("frames", "One node beside a tickd server runs --instances demo dungeons with one nearly idle player each,\n"+
		"without frames and then with a frame from every dungeon every --frame-every ticks; each run reports\n"+
		"tick lateness p50/p99, ticks/s against the schedule, the node's CPU per tick, and frames\n"+
		"published/dropped per second.")
	instances := fs.Int("instances", 10000, "demo dungeons on the node")
	duration := fs.Duration("duration", 30*time.Second, "measurement window of each run (after the warm-up)")
	warmup := fs.Duration("warmup", 15*time.Second, "time after the dungeons are created before measuring")
	rounds := fs.Int("rounds", 1, "pairs of runs (without, with frames), alternated to spread the machine's noise")
	every := fs.Uint64("frame-every", 1, "ticks between two frames of a dungeon in the runs with frames")
	watch := fs.Bool("watch", false, "also subscribe tickfence.out.> from tickbench and count what arrives (costs CPU on this machine)")
	bin := fs.String("tickd", "", "use this tickd binary instead of building one")
	jsonOut := fs.String("json", "", "write the figures as JSON to this file")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *instances < 1 || *duration <= 0 || *rounds < 1 || *every < 1 {
		return fmt.Errorf("--instances, --duration, --rounds and --frame-every must be positive")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep := framesReport{Machine: thisMachine()}
	fmt.Printf("tickbench frames on %s\n", rep.Machine)
	fmt.Printf("1 node + tickd server, %d demo dungeons at 20 Hz, %d round(s) of %v (after %v warm-up), frames every %d tick(s)\n\n",
		*instances, *rounds, *duration, *warmup, *every)
	p := newProgress()
	if *bin == "" {
		dir, err := os.MkdirTemp("", "tickbench-frames")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		p.line("building tickd")
		if *bin, err = proc.Build(ctx, dir); err != nil {
			return err
		}
	}
	for r := 0; r < *rounds; r++ {
		for _, on := range []bool{false, true} {
			fe := uint64(0)
			if on {
				fe = *every
			}
			run, err := framesOnce(ctx, p, *bin, *instances, fe, *warmup, *duration, *watch)
			if err != nil {
				return err
			}
			rep.Runs = append(rep.Runs, run)
			p.line("frames %-5v: tick p99 %s ms, %.1f µs CPU/tick, %.0f frames/s", on, ms(run.LateP99), float64(run.CPUPerTick)/1e3, run.FramesPerS)
		}
	}
	p.done()
	printFrames(rep)
	return writeJSON(*jsonOut, rep)
}

// framesOnce starts a fresh server and node, waits for the dungeons and the warm-up, and measures.
func framesOnce(ctx context.Context, p *progress, bin string, n int, frameEvery uint64, warmup, window time.Duration, watch bool) (framesRun, error) {
	args := []string{"--demo", fmt.Sprint(n), "--demo-players", "1", "--demo-rate", "0.01",
		"--demo-frame-every", fmt.Sprint(frameEvery), "--checkpoint-every", "20"}
	b, err := startBenchCluster(ctx, p, bin, proc.ClusterConfig{Lease: 2 * time.Second, Shards: 256, NodeArgs: args}, []string{"n1"})
	if err != nil {
		return framesRun{}, err
	}
	defer b.close()
	node := b.Node("n1")
	p.line("waiting for %d demo dungeons (frames every %d ticks)", n, frameEvery)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	_, _, err = node.WaitLog(wctx, 0, proc.Msg("demo dungeons created or found"))
	cancel()
	if err != nil {
		return framesRun{}, fmt.Errorf("node never created its dungeons: %w", err)
	}
	var received atomic.Int64
	if watch {
		nc, err := natskv.Connect(b.URL, nats.Name("tickbench frames watcher"))
		if err != nil {
			return framesRun{}, err
		}
		defer nc.Close()
		sub, err := nc.Subscribe("tickfence.out.>", func(*nats.Msg) { received.Add(1) })
		if err != nil {
			return framesRun{}, err
		}
		_ = sub.SetPendingLimits(-1, -1)
	}
	if err := sleepCtx(ctx, warmup); err != nil {
		return framesRun{}, err
	}
	m0, err := node.Scrape(ctx)
	if err != nil {
		return framesRun{}, err
	}
	c0, s0, r0, t0 := procCPU(node.Pid()), procCPU(b.Server.Pid()), received.Load(), time.Now()
	for end := t0.Add(window); time.Now().Before(end); {
		if err := sleepCtx(ctx, min(5*time.Second, time.Until(end))); err != nil {
			return framesRun{}, err
		}
		p.line("measuring (frames every %d ticks): %s left", frameEvery, time.Until(end).Round(time.Second))
	}
	m1, err := node.Scrape(ctx)
	if err != nil {
		return framesRun{}, err
	}
	secs := time.Since(t0).Seconds()
	c1, s1, r1 := procCPU(node.Pid()), procCPU(b.Server.Pid()), received.Load()
	late := proc.Delta(m0.Histogram("tickfence_tick_lateness_seconds"), m1.Histogram("tickfence_tick_lateness_seconds"))
	d := func(name string) float64 { return m1[name] - m0[name] }
	run := framesRun{Frames: frameEvery > 0, Instances: n, TicksPerS: d("tickfence_ticks_total") / secs, Scheduled: float64(n) * 20,
		Skipped: d("tickfence_ticks_skipped_total"), LateP99: secondsDur(proc.Quantile(late, 0.99)), LateP50: secondsDur(proc.Quantile(late, 0.5)),
		NodeCPU: (c1 - c0) / secs, ServerCPU: (s1 - s0) / secs,
		FramesPerS: d("tickfence_frames_published_total") / secs, DroppedPerS: d("tickfence_frames_dropped_total") / secs}
	if ticks := d("tickfence_ticks_total"); ticks > 0 {
		run.CPUPerTick = time.Duration((c1 - c0) / ticks * 1e9)
	}
	if watch {
		run.WatchedPerS = float64(r1-r0) / secs
	}
	return run, nil
}

func secondsDur(s float64) time.Duration { return time.Duration(s * 1e9) }

func printFrames(rep framesReport) {
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "frames\tdungeons\tticks/s\tof schedule\tskipped\ttick p50 ms\ttick p99 ms\tnode CPU\tserver CPU\tCPU/tick µs\tframes/s\tdropped/s\twatched/s\t")
	for _, r := range rep.Runs {
		fmt.Fprintf(w, "%v\t%d\t%.0f\t%.1f%%\t%.0f\t%s\t%s\t%.2f\t%.2f\t%.2f\t%.0f\t%.0f\t%.0f\t\n", r.Frames, r.Instances, r.TicksPerS,
			100*r.TicksPerS/r.Scheduled, r.Skipped, ms(r.LateP50), ms(r.LateP99), r.NodeCPU, r.ServerCPU,
			float64(r.CPUPerTick)/1e3, r.FramesPerS, r.DroppedPerS, r.WatchedPerS)
	}
	w.Flush()
	var off, on []framesRun
	for _, r := range rep.Runs {
		if r.Frames {
			on = append(on, r)
		} else {
			off = append(off, r)
		}
	}
	if len(off) > 0 && len(on) > 0 {
		mean := func(rs []framesRun, f func(framesRun) float64) float64 {
			s := 0.0
			for _, r := range rs {
				s += f(r)
			}
			return s / float64(len(rs))
		}
		p99 := func(r framesRun) float64 { return float64(r.LateP99) }
		cpu := func(r framesRun) float64 { return float64(r.CPUPerTick) }
		fmt.Printf("\nwith frames / without (same run): tick p99 ×%.2f, node CPU per tick ×%.2f, server CPU ×%.2f\n",
			mean(on, p99)/mean(off, p99), mean(on, cpu)/mean(off, cpu),
			mean(on, func(r framesRun) float64 { return r.ServerCPU })/mean(off, func(r framesRun) float64 { return r.ServerCPU }))
	}
}
