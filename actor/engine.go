package actor

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Ticker is what the engine ticks: one instance's actor.
type Ticker interface {
	// Tick runs one tick that was due at scheduled.
	Tick(scheduled time.Time)
}

// EngineConfig configures an Engine. Zero fields take defaults.
type EngineConfig struct {
	// Rate is ticks per second per instance (10–60 for games). Required.
	Rate float64
	// Workers is the number of ticking goroutines (default GOMAXPROCS).
	Workers int
	// Slot is the width of a phase bucket: instances are spread over period/Slot buckets so their
	// ticks do not all fall due at once (default 1ms).
	Slot time.Duration
	// MaxCatchUp is how many periods a worker may fall behind and still run every tick late;
	// beyond it, it skips to the present and counts the skipped ticks (default 2).
	MaxCatchUp int
	// Spin is how close to a bucket's deadline a worker stops trusting its timer (which wakes
	// with ~1 ms granularity on Linux) and yields in a loop until the deadline instead. 0 never
	// spins (lowest CPU); a value above Slot makes workers that are idle between buckets busy-wait.
	Spin time.Duration
	// Observe, if set, receives every tick's lateness (actual start minus scheduled start, so
	// coordinated omission is not hidden) and duration. It runs on the hot path: keep it cheap.
	// Workers call it concurrently.
	Observe func(lateness, duration time.Duration)
	// ObserveWorker, if set, is called once per worker at start and returns that worker's
	// observer (nil for none); each returned function is only ever called from its worker, so it
	// can record into unsynchronised per-worker state. It runs in addition to Observe.
	ObserveWorker func(worker int) func(lateness, duration time.Duration)
	// Start is the time of bucket 0 (default: now). Ticks are due at Start + k*Slot.
	Start time.Time
	// Manual starts no goroutines: the caller drives the engine with Advance (tests, benchmarks).
	Manual bool
}

// Engine ticks many instances at a fixed rate with a few goroutines: one worker per core, each
// owning a share of the instances spread over phase buckets of one period, so that the cost per
// instance is a slice entry, not a goroutine and a timer.
//
// Overrun policy: a worker runs its phase buckets in order. If ticks take longer than their
// period, the following buckets run late, back to back, without sleeping (catch-up). If a worker is
// more than MaxCatchUp periods behind, it jumps to the present bucket; every tick it jumped over is
// counted as skipped, and the instances resume on schedule. An instance never ticks twice for the
// same period and never ticks concurrently with itself.
type Engine struct {
	cfg     EngineConfig
	period  time.Duration
	nslots  int
	start   time.Time
	workers []*worker
	rr      atomic.Uint64

	ticks   atomic.Uint64
	skipped atomic.Uint64

	stop chan struct{}
	wg   sync.WaitGroup
}

// Handle is an instance scheduled on an engine.
type Handle struct {
	w       *worker
	slot    int32
	idx     int32 // position in w.slots[slot], under w.mu
	t       Ticker
	removed atomic.Bool
}

type worker struct {
	e       *Engine
	id      int
	observe func(lateness, duration time.Duration)
	k       int64 // next bucket to run; owned by the worker goroutine (or Advance's caller)
	batch   []*Handle

	mu    sync.Mutex
	slots [][]*Handle
	count int
	next  int // slot for the next instance added: spreads phases evenly
}

// NewEngine validates the config and starts the workers. Stop them with Stop.
func NewEngine(cfg EngineConfig) (*Engine, error) {
	if cfg.Rate <= 0 || cfg.Rate > 1000 {
		return nil, fmt.Errorf("tick rate must be in (0, 1000] Hz, got %v", cfg.Rate)
	}
	if cfg.Workers <= 0 {
		cfg.Workers = runtime.GOMAXPROCS(0)
	}
	if cfg.MaxCatchUp <= 0 {
		cfg.MaxCatchUp = 2
	}
	if cfg.Spin < 0 {
		cfg.Spin = 0
	}
	period := time.Duration(float64(time.Second) / cfg.Rate)
	if cfg.Slot <= 0 {
		cfg.Slot = time.Millisecond
	}
	if cfg.Slot > period {
		cfg.Slot = period
	}
	nslots := int(period / cfg.Slot)
	cfg.Slot = period / time.Duration(nslots)
	period = cfg.Slot * time.Duration(nslots) // a whole number of buckets, so phases never drift
	if cfg.Start.IsZero() {
		cfg.Start = time.Now()
	}
	e := &Engine{cfg: cfg, period: period, nslots: nslots, start: cfg.Start, stop: make(chan struct{})}
	k0 := int64(time.Since(e.start)/cfg.Slot) + 1
	if cfg.Manual {
		k0 = 1
	}
	for i := 0; i < cfg.Workers; i++ {
		w := &worker{e: e, id: i, slots: make([][]*Handle, nslots), k: k0}
		if cfg.ObserveWorker != nil {
			w.observe = cfg.ObserveWorker(i)
		}
		e.workers = append(e.workers, w)
	}
	if !cfg.Manual {
		for _, w := range e.workers {
			e.wg.Add(1)
			go w.run()
		}
	}
	return e, nil
}

// Period is the time between two ticks of one instance.
func (e *Engine) Period() time.Duration { return e.period }

// Ticks is the number of ticks run so far.
func (e *Engine) Ticks() uint64 { return e.ticks.Load() }

// Skipped is the number of ticks skipped by the overrun policy so far.
func (e *Engine) Skipped() uint64 { return e.skipped.Load() }

// Add schedules t; it first ticks within one period.
func (e *Engine) Add(t Ticker) *Handle {
	w := e.workers[e.rr.Add(1)%uint64(len(e.workers))]
	w.mu.Lock()
	defer w.mu.Unlock()
	h := &Handle{w: w, slot: int32(w.next), t: t}
	w.next = (w.next + 1) % e.nslots
	h.idx = int32(len(w.slots[h.slot]))
	w.slots[h.slot] = append(w.slots[h.slot], h)
	w.count++
	return h
}

// Remove unschedules an instance. It may still be in a tick that already started, but it will not
// start another one. Remove may be called from inside Tick.
func (e *Engine) Remove(h *Handle) {
	if h == nil || h.removed.Swap(true) {
		return
	}
	w := h.w
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.slots[h.slot]
	last := s[len(s)-1]
	s[h.idx] = last
	last.idx = h.idx
	s[len(s)-1] = nil
	w.slots[h.slot] = s[:len(s)-1]
	w.count--
}

// Stop stops every worker after its current tick and waits for them.
func (e *Engine) Stop() {
	select {
	case <-e.stop:
	default:
		close(e.stop)
	}
	e.wg.Wait()
}

// Advance runs, on the calling goroutine, every tick of a Manual engine due at or before now,
// applying the overrun policy as the workers would. It returns the number of ticks run.
func (e *Engine) Advance(now time.Time) int {
	if !e.cfg.Manual {
		panic("actor: Advance on an engine that runs its own workers")
	}
	n := 0
	for _, w := range e.workers {
		for {
			due := e.start.Add(time.Duration(w.k) * e.cfg.Slot)
			if due.After(now) {
				break
			}
			n += w.runBucket(now, due)
		}
	}
	return n
}

func (w *worker) run() {
	defer w.e.wg.Done()
	e := w.e
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		due := e.start.Add(time.Duration(w.k) * e.cfg.Slot)
		now := time.Now()
		if d := due.Sub(now); d > e.cfg.Spin {
			// The timer wakes up to ~1 ms late; with Spin set, aim it that much early and yield
			// the rest of the way.
			timer.Reset(d - e.cfg.Spin)
			select {
			case <-e.stop:
				return
			case <-timer.C:
			}
			now = time.Now()
		}
		for now.Before(due) {
			select {
			case <-e.stop:
				return
			default:
			}
			runtime.Gosched()
			now = time.Now()
		}
		select {
		case <-e.stop:
			return
		default:
		}
		w.runBucket(now, due)
	}
}

// runBucket runs bucket w.k (due at due; now is the current time) and moves w.k on, or, if the
// worker is more than MaxCatchUp periods behind, skips to the present bucket and counts the ticks
// it jumped over.
func (w *worker) runBucket(now, due time.Time) int {
	e := w.e
	slot := e.cfg.Slot
	if lag := now.Sub(due); lag > time.Duration(e.cfg.MaxCatchUp)*e.period {
		present := int64(now.Sub(e.start) / slot)
		e.skipped.Add(w.countBetween(w.k, present))
		w.k = present
		due = e.start.Add(time.Duration(present) * slot)
	}
	w.mu.Lock()
	w.batch = append(w.batch[:0], w.slots[int(w.k%int64(e.nslots))]...)
	w.mu.Unlock()
	w.k++
	observe, observeW := e.cfg.Observe, w.observe
	ran := 0
	t0 := time.Now()
	for i, h := range w.batch {
		w.batch[i] = nil
		if h.removed.Load() {
			continue
		}
		h.t.Tick(due)
		t1 := time.Now() // the end of one tick is the start of the next: one clock read per tick
		if observe != nil {
			observe(t0.Sub(due), t1.Sub(t0))
		}
		if observeW != nil {
			observeW(t0.Sub(due), t1.Sub(t0))
		}
		t0 = t1
		ran++
	}
	e.ticks.Add(uint64(ran))
	return ran
}

// countBetween counts the ticks due in buckets [from, to).
func (w *worker) countBetween(from, to int64) uint64 {
	if to <= from {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	n := to - from
	total := uint64(n/int64(w.e.nslots)) * uint64(w.count)
	for j := from; j < from+n%int64(w.e.nslots); j++ {
		total += uint64(len(w.slots[int(j%int64(w.e.nslots))]))
	}
	return total
}
