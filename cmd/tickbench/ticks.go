package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/internal/hdr"
)

type tickCase struct {
	Instances int           `json:"instances"`
	Rate      float64       `json:"rate_hz"`
	Work      time.Duration `json:"work_ns"`
}

func (c tickCase) String() string {
	w := "trivial work"
	if c.Work > 0 {
		w = c.Work.String() + " work"
	}
	return fmt.Sprintf("%d instances × %g Hz × %s", c.Instances, c.Rate, w)
}

func (c tickCase) period() time.Duration { return time.Duration(float64(time.Second) / c.Rate) }

// tickResult is one design's figures for one case, over the measurement window.
type tickResult struct {
	Design        string        `json:"design"` // raw, engine, ticker
	Case          tickCase      `json:"case"`
	WindowSeconds float64       `json:"window_s"`
	TicksPerSec   float64       `json:"ticks_per_s"`
	CPUPercent    float64       `json:"cpu_percent"`        // of all GOMAXPROCS cores
	OthersPercent float64       `json:"others_cpu_percent"` // the machine's CPU used by other processes
	CPUPerTick    float64       `json:"cpu_us_per_tick"`
	Overhead      float64       `json:"overhead_cpu_us_per_tick"` // CPU per tick minus the raw loop's
	AllocsPerTick float64       `json:"allocs_per_tick"`
	GCs           uint64        `json:"gc_cycles"`
	GCPauseP99    time.Duration `json:"gc_pause_p99_ns"`
	LateP50       time.Duration `json:"lateness_p50_ns"`
	LateP99       time.Duration `json:"lateness_p99_ns"`
	LateP999      time.Duration `json:"lateness_p999_ns"`
	LateMax       time.Duration `json:"lateness_max_ns"`
	Expected      uint64        `json:"expected_ticks"` // scheduled in the window
	OnSchedule    uint64        `json:"ran_ticks"`      // of those, run
	Missed        uint64        `json:"missed_ticks"`
	MissedPct     float64       `json:"missed_percent"`
	Skipped       uint64        `json:"skipped_ticks"` // counted by the engine's overrun policy
	Series        []point       `json:"series,omitempty"`
}

// point is one bin of lateness over time (by scheduled time from the window's start).
type point struct {
	At  float64       `json:"t_s"`
	P99 time.Duration `json:"p99_ns"`
	Max time.Duration `json:"max_ns"`
}

type memResult struct {
	Instances        int     `json:"instances"`
	EngineBytes      float64 `json:"engine_bytes_per_idle_instance"`
	TickerBytes      float64 `json:"ticker_bytes_per_idle_instance"`
	EngineGoroutines int     `json:"engine_goroutines"`
}

type ticksReport struct {
	Machine   machine      `json:"machine"`
	WorkNsPer float64      `json:"work_ns_per_iteration"`
	Results   []tickResult `json:"results"`
	Memory    memResult    `json:"memory"`
}

func runTicks(args []string) error {
	fs := newFlagSet("ticks", "The tick engine against the raw loop (one goroutine ticking every instance) and one goroutine +\n"+
		"time.Ticker per instance, for each case of --instances, --tick-rate and --work (lists zipped): tick\n"+
		"lateness p50/p99/max, CPU per tick, missed ticks; then memory per idle instance.")
	instances := fs.String("instances", "10000,50000,40000", "instances per case (comma-separated; the lists are zipped, a single value applies to every case)")
	rates := fs.String("tick-rate", "20", "ticks per second of each instance (Hz, as tickd --tick-rate), per case")
	works := fs.String("work", "5us,0,5us", "game work per tick (CPU spin, calibrated), per case")
	duration := fs.Duration("duration", 10*time.Second, "measurement window per design and case (rounded up to whole periods)")
	warmup := fs.Duration("warmup", time.Second, "time each design runs before the window opens")
	designs := fs.String("designs", "raw,engine,ticker", "which designs to run")
	slot := fs.Duration("slot", 0, "engine phase bucket width (0: the engine default)")
	spin := fs.Duration("spin", 0, "engine spin before a deadline (0: the engine default)")
	workers := fs.Int("workers", 0, "engine workers (0: the engine default)")
	memN := fs.Int("mem-instances", 20000, "idle instances for the memory measurement (0 skips it)")
	jsonOut := fs.String("json", "", "write the figures as JSON to this file")
	plotOut := fs.String("plot", "", "write an HTML page with a plot of lateness over time to this file")
	if err := parseFlags(fs, args); err != nil {
		return err
	}

	cases, err := zipCases(*instances, *rates, *works)
	if err != nil {
		return err
	}
	rep := ticksReport{Machine: thisMachine(), WorkNsPer: calibrate()}
	fmt.Printf("tickbench ticks on %s\n", rep.Machine)
	fmt.Printf("game work: calibrated CPU spin, %.3f ns per iteration\n\n", rep.WorkNsPer)
	p := newProgress()
	want := map[string]bool{}
	for _, d := range parseList(*designs) {
		want[d] = true
	}
	for _, c := range cases {
		iters := int(float64(c.Work) / rep.WorkNsPer)
		var rows []tickResult
		for _, d := range []string{"raw", "engine", "ticker"} {
			if !want[d] {
				continue
			}
			r := runDesign(d, c, iters, *duration, *warmup, *slot, *spin, *workers, *plotOut != "", p)
			rows = append(rows, r)
		}
		fillOverhead(rows)
		printCase(c, rows)
		rep.Results = append(rep.Results, rows...)
	}
	if *memN > 0 {
		rep.Memory = measureMemory(*memN, p)
		fmt.Printf("memory per idle instance (%d instances, heap + stacks after GC, state excluded): engine %.0f B (%d goroutines in all), goroutine + time.Ticker %.0f B\n",
			rep.Memory.Instances, rep.Memory.EngineBytes, rep.Memory.EngineGoroutines, rep.Memory.TickerBytes)
	}
	if err := writeJSON(*jsonOut, rep); err != nil {
		return err
	}
	if *plotOut != "" {
		if err := writePlot(*plotOut, rep); err != nil {
			return err
		}
		fmt.Printf("plot: %s\n", *plotOut)
	}
	return nil
}

func zipCases(instances, rates, works string) ([]tickCase, error) {
	is, rs, ws := parseList(instances), parseList(rates), parseList(works)
	n := max(len(is), len(rs), len(ws))
	pick := func(l []string, i int) (string, error) {
		switch {
		case len(l) == 1:
			return l[0], nil
		case i < len(l):
			return l[i], nil
		}
		return "", fmt.Errorf("--instances, --tick-rate and --work must have one value or the same number of values")
	}
	var cases []tickCase
	for i := 0; i < n; i++ {
		var c tickCase
		s, err := pick(is, i)
		if err != nil {
			return nil, err
		}
		if _, err := fmt.Sscan(s, &c.Instances); err != nil || c.Instances <= 0 {
			return nil, fmt.Errorf("bad instance count %q", s)
		}
		if s, err = pick(rs, i); err != nil {
			return nil, err
		}
		if _, err := fmt.Sscan(s, &c.Rate); err != nil || c.Rate <= 0 || c.Rate > 1000 {
			return nil, fmt.Errorf("bad rate %q", s)
		}
		if s, err = pick(ws, i); err != nil {
			return nil, err
		}
		if s == "0" {
			c.Work = 0
		} else if c.Work, err = time.ParseDuration(s); err != nil {
			return nil, fmt.Errorf("bad work %q: %v", s, err)
		}
		cases = append(cases, c)
	}
	return cases, nil
}

// work is the game's CPU work: a dependent multiply-add chain the compiler cannot skip.
func work(acc uint64, iters int) uint64 {
	for i := 0; i < iters; i++ {
		acc = acc*6364136223846793005 + 1442695040888963407
	}
	return acc
}

var calibrationSink uint64

// calibrate returns the cost of one iteration of work, the best of a few runs.
func calibrate() float64 {
	best := 0.0
	for i := 0; i < 5; i++ {
		const n = 1 << 23
		t := time.Now()
		calibrationSink += work(uint64(i), n)
		ns := float64(time.Since(t)) / n
		if best == 0 || ns < best {
			best = ns
		}
	}
	return best
}

// window is the measurement window: only ticks scheduled in [t0, t1) are counted and their
// lateness recorded, so a tick that runs late still counts for the moment it was due.
type window struct {
	base   time.Time    // set before any instance runs
	t0, t1 atomic.Int64 // ns after base; set once setup is over
	bin    time.Duration
}

// stripe is one of several histograms that instances record into, so that two cores rarely
// share a counter. Instance i uses stripe i % len(stripes); the engine deals instances to its
// workers round-robin, so with an even stripe count no two workers share a stripe.
type stripe struct {
	hist *hdr.Histogram
	bins []*hdr.Histogram // lateness over time, for --plot
	_    [64]byte
}

// inst is a benchmark instance: work, then record actual minus scheduled start.
type inst struct {
	iters int
	acc   uint64
	ran   atomic.Uint64 // ticks run (read while running, for throughput)
	inWin uint64        // ticks scheduled in the window that ran; read after the design stopped
	win   *window
	st    *stripe
}

func (in *inst) Tick(scheduled time.Time) {
	now := time.Now()
	in.acc = work(in.acc, in.iters)
	in.ran.Add(1)
	w := in.win
	if at := int64(scheduled.Sub(w.base)); at >= w.t0.Load() && at < w.t1.Load() {
		in.inWin++
		late := now.Sub(scheduled)
		in.st.hist.Record(late)
		if in.st.bins != nil {
			in.st.bins[(at-w.t0.Load())/int64(w.bin)].Record(late)
		}
	}
}

// sample is the process's counters at one instant.
type sample struct {
	at     time.Time
	cpu    time.Duration
	busy   time.Duration // the whole machine's, from /proc/stat
	ran    uint64
	allocs uint64
	gcs    uint64
	pauses *metrics.Float64Histogram
}

func takeSample(insts []*inst) sample {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	s := sample{at: time.Now(), cpu: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), busy: machineBusy()}
	for _, in := range insts {
		s.ran += in.ran.Load()
	}
	ms := []metrics.Sample{{Name: "/gc/heap/allocs:objects"}, {Name: "/gc/cycles/total:gc-cycles"}, {Name: "/sched/pauses/total/gc:seconds"}}
	metrics.Read(ms)
	s.allocs = ms[0].Value.Uint64()
	s.gcs = ms[1].Value.Uint64()
	s.pauses = ms[2].Value.Float64Histogram()
	return s
}

// pauseQuantile is the q-quantile of the GC pauses between two samples (bucket upper bound).
func pauseQuantile(a, b sample, q float64) time.Duration {
	var n uint64
	diff := make([]uint64, len(b.pauses.Counts))
	for i := range diff {
		diff[i] = b.pauses.Counts[i] - a.pauses.Counts[i]
		n += diff[i]
	}
	if n == 0 {
		return 0
	}
	rank := uint64(float64(n)*q + 0.999999)
	var seen uint64
	for i, c := range diff {
		seen += c
		if seen >= rank {
			return time.Duration(b.pauses.Buckets[i+1] * 1e9)
		}
	}
	return 0
}

// design runs instances one way until stopped.
type design interface {
	stop()
	skipped() uint64
}

func runDesign(name string, c tickCase, iters int, dur, warmup, slot, spin time.Duration, workers int, plot bool, p *progress) tickResult {
	runtime.GC()
	period := c.period()
	periods := (dur + period - 1) / period
	dur = periods * period
	win := &window{bin: 100 * time.Millisecond}
	const nstripes = 16
	stripes := make([]*stripe, nstripes)
	nbins := int(dur/win.bin) + 1
	for i := range stripes {
		stripes[i] = &stripe{hist: hdr.New(7)}
		if plot && name != "raw" {
			stripes[i].bins = make([]*hdr.Histogram, nbins)
			for j := range stripes[i].bins {
				stripes[i].bins[j] = hdr.New(4)
			}
		}
	}
	insts := make([]*inst, c.Instances)
	for i := range insts {
		insts[i] = &inst{iters: iters, win: win, st: stripes[i%nstripes]}
	}
	// The window opens after setup and warm-up; nothing is recorded before it.
	win.base = time.Now()
	win.t0.Store(int64(1 << 62))
	win.t1.Store(int64(1 << 62))
	p.line("[%s] %s: starting", c, name)
	var d design
	switch name {
	case "raw":
		d = startRaw(insts)
	case "engine":
		d = startEngine(insts, c, slot, spin, workers)
	case "ticker":
		d = startTicker(insts, c)
	}
	// Setup is over; the window opens after the warm-up, long before any tick due in it runs.
	t0 := time.Now().Add(warmup)
	t1 := t0.Add(dur)
	win.t1.Store(int64(t1.Sub(win.base)))
	win.t0.Store(int64(t0.Sub(win.base)))
	time.Sleep(time.Until(t0))
	a := takeSample(insts)
	for now := time.Now(); now.Before(t1); now = time.Now() {
		time.Sleep(min(time.Second, t1.Sub(now)))
		b := takeSample(insts)
		h := hdr.New(7)
		for _, s := range stripes {
			h.Merge(s.hist)
		}
		p.line("[%s] %-6s %4.1fs/%.0fs  ticks/s %9.0f  lateness p99 %s ms", c, name,
			b.at.Sub(a.at).Seconds(), dur.Seconds(), float64(b.ran-a.ran)/b.at.Sub(a.at).Seconds(), ms(h.Quantile(0.99)))
	}
	b := takeSample(insts)
	// Let ticks due before t1 that are running late finish (the overrun policy bounds it).
	time.Sleep(3*period + 50*time.Millisecond)
	d.stop()
	p.done()

	r := tickResult{Design: name, Case: c, WindowSeconds: b.at.Sub(a.at).Seconds()}
	ticks := b.ran - a.ran
	r.TicksPerSec = float64(ticks) / r.WindowSeconds
	cpu := b.cpu - a.cpu
	r.CPUPercent = 100 * cpu.Seconds() / r.WindowSeconds / float64(runtime.GOMAXPROCS(0))
	r.OthersPercent = max(0, 100*(b.busy-a.busy-cpu).Seconds()/r.WindowSeconds/float64(runtime.NumCPU()))
	if ticks > 0 {
		r.CPUPerTick = float64(cpu) / 1e3 / float64(ticks)
		r.AllocsPerTick = float64(b.allocs-a.allocs) / float64(ticks)
	}
	r.GCs = b.gcs - a.gcs
	r.GCPauseP99 = pauseQuantile(a, b, 0.99)
	h := hdr.New(7)
	for _, s := range stripes {
		h.Merge(s.hist)
	}
	if name != "raw" {
		r.LateP50, r.LateP99, r.LateP999, r.LateMax = h.Quantile(0.5), h.Quantile(0.99), h.Quantile(0.999), h.Max()
		r.Expected = uint64(c.Instances) * uint64(periods)
		for _, in := range insts {
			r.OnSchedule += in.inWin
		}
		if r.OnSchedule < r.Expected {
			r.Missed = r.Expected - r.OnSchedule
		}
		r.MissedPct = 100 * float64(r.Missed) / float64(r.Expected)
		r.Skipped = d.skipped()
		if plot {
			for j := 0; j < nbins-1; j++ {
				bh := hdr.New(4)
				for _, s := range stripes {
					bh.Merge(s.bins[j])
				}
				r.Series = append(r.Series, point{At: (time.Duration(j) * win.bin).Seconds(), P99: bh.Quantile(0.99), Max: bh.Max()})
			}
		}
	}
	return r
}

// raw: the same ticks in a tight loop, one goroutine per core: the physical limit.
type rawDesign struct {
	quit atomic.Bool
	wg   sync.WaitGroup
}

func startRaw(insts []*inst) *rawDesign {
	d := &rawDesign{}
	n := runtime.GOMAXPROCS(0)
	for g := 0; g < n; g++ {
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			for !d.quit.Load() {
				for i := g; i < len(insts) && !d.quit.Load(); i += n {
					insts[i].Tick(time.Now())
				}
			}
		}()
	}
	return d
}

func (d *rawDesign) stop()           { d.quit.Store(true); d.wg.Wait() }
func (d *rawDesign) skipped() uint64 { return 0 }

// engine: tickfence's tick engine.
type engineDesign struct{ e *actor.Engine }

func startEngine(insts []*inst, c tickCase, slot, spin time.Duration, workers int) *engineDesign {
	e, err := actor.NewEngine(actor.EngineConfig{Rate: c.Rate, Slot: slot, Spin: spin, Workers: workers})
	if err != nil {
		panic(err)
	}
	for _, in := range insts {
		e.Add(in)
	}
	return &engineDesign{e: e}
}

func (d *engineDesign) stop()           { d.e.Stop() }
func (d *engineDesign) skipped() uint64 { return d.e.Skipped() }

// ticker: one goroutine and one time.Ticker per instance, phases spread over the period: what a
// team writes first. The value a Go ticker delivers is the time the tick was due, so lateness is
// measured from the schedule; ticks the ticker drops because its reader was late are missed.
type tickerDesign struct {
	quit chan struct{}
	wg   sync.WaitGroup
}

func startTicker(insts []*inst, c tickCase) *tickerDesign {
	d := &tickerDesign{quit: make(chan struct{})}
	period := c.period()
	base := time.Now()
	for i, in := range insts {
		d.wg.Add(1)
		phase := base.Add(time.Duration(i) * period / time.Duration(len(insts)))
		go func() {
			defer d.wg.Done()
			time.Sleep(time.Until(phase))
			t := time.NewTicker(period)
			defer t.Stop()
			for {
				select {
				case <-d.quit:
					return
				case due := <-t.C:
					in.Tick(due)
				}
			}
		}()
	}
	return d
}

func (d *tickerDesign) stop()           { close(d.quit); d.wg.Wait() }
func (d *tickerDesign) skipped() uint64 { return 0 }

func fillOverhead(rows []tickResult) {
	var raw *tickResult
	for i := range rows {
		if rows[i].Design == "raw" {
			raw = &rows[i]
		}
	}
	for i := range rows {
		if raw != nil && rows[i].Design != "raw" {
			rows[i].Overhead = rows[i].CPUPerTick - raw.CPUPerTick
		}
	}
}

func printCase(c tickCase, rows []tickResult) {
	demand := float64(c.Instances) * c.Rate
	fmt.Printf("%s (scheduled: %.0f ticks/s)\n", c, demand)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "design\tticks/s\tCPU %\tothers %\tCPU µs/tick\tover raw µs/tick\tallocs/tick\tGCs\tGC p99 ms\tlate p50 ms\tp99 ms\tp99.9 ms\tmax ms\tmissed\tmissed %\tskipped\t")
	for _, r := range rows {
		if r.Design == "raw" {
			fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.0f\t%.3f\t-\t%.4f\t%d\t%s\t-\t-\t-\t-\t-\t-\t-\t\n", r.Design, r.TicksPerSec, r.CPUPercent, r.OthersPercent, r.CPUPerTick,
				r.AllocsPerTick, r.GCs, ms(r.GCPauseP99))
			continue
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.0f\t%.3f\t%.3f\t%.4f\t%d\t%s\t%s\t%s\t%s\t%s\t%d\t%.4f\t%d\t\n", r.Design, r.TicksPerSec, r.CPUPercent, r.OthersPercent, r.CPUPerTick,
			r.Overhead, r.AllocsPerTick, r.GCs, ms(r.GCPauseP99), ms(r.LateP50), ms(r.LateP99), ms(r.LateP999), ms(r.LateMax), r.Missed, r.MissedPct, r.Skipped)
	}
	tw.Flush()
	by := map[string]tickResult{}
	for _, r := range rows {
		by[r.Design] = r
	}
	raw, hasRaw := by["raw"]
	eng, hasEng := by["engine"]
	tk, hasTk := by["ticker"]
	if hasRaw && hasEng {
		fmt.Printf("ratio engine/raw ticks/s: %.3f", eng.TicksPerSec/raw.TicksPerSec)
		if demand < raw.TicksPerSec {
			fmt.Printf(" (below saturation: the schedule asks %.0f%% of the raw limit)", 100*demand/raw.TicksPerSec)
		}
		fmt.Println()
	}
	if hasTk && hasEng {
		if hasRaw {
			fmt.Printf("ratio ticker/raw ticks/s: %.3f\n", tk.TicksPerSec/raw.TicksPerSec)
		}
		if eng.LateP99 > 0 {
			fmt.Printf("ratio ticker/engine lateness p99: %.1f× (ticker at %.0f%% CPU)\n", float64(tk.LateP99)/float64(eng.LateP99), tk.CPUPercent)
		}
	}
	fmt.Println()
}

type idle struct{}

func (*idle) Tick(time.Time) {}

// measureMemory is the heap and stack a design needs per idle instance, after GC.
func measureMemory(n int, p *progress) memResult {
	r := memResult{Instances: n}
	p.line("memory: engine with %d idle instances", n)
	inUse := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc + m.StackInuse
	}
	before := inUse()
	g0 := runtime.NumGoroutine()
	e, _ := actor.NewEngine(actor.EngineConfig{Rate: 20})
	var it idle
	hs := make([]*actor.Handle, n)
	for i := range hs {
		hs[i] = e.Add(&it)
	}
	time.Sleep(200 * time.Millisecond)
	after := inUse()
	r.EngineGoroutines = runtime.NumGoroutine() - g0
	// The handles slice is the caller's, not the engine's: take it out.
	r.EngineBytes = (float64(after) - float64(before) - float64(8*n)) / float64(n)
	e.Stop()
	runtime.KeepAlive(hs)
	hs = nil

	p.line("memory: goroutine + time.Ticker with %d idle instances", n)
	before = inUse()
	quit := make(chan struct{})
	var started, wg sync.WaitGroup
	for i := 0; i < n; i++ {
		started.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(50 * time.Millisecond)
			defer t.Stop()
			started.Done()
			for {
				select {
				case <-quit:
					return
				case due := <-t.C:
					it.Tick(due)
				}
			}
		}()
	}
	started.Wait()
	time.Sleep(200 * time.Millisecond)
	after = inUse()
	r.TickerBytes = (float64(after) - float64(before)) / float64(n)
	close(quit)
	wg.Wait()
	p.done()
	return r
}

// machineBusy is the CPU time all processes used so far (user, nice, system, irq, softirq, steal),
// from /proc/stat; 0 where there is none. A benchmark on a shared machine reports what others took.
func machineBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	var jiffies int64
	for _, i := range []int{1, 2, 3, 6, 7, 8} {
		v, _ := strconv.ParseInt(f[i], 10, 64)
		jiffies += v
	}
	return time.Duration(jiffies) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}
