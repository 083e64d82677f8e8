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
	// Observe, if set, receives every tick's lateness (actual start minus scheduled start, so
	// coordinated omission is not hidden) and duration. It runs on the hot path: keep it cheap.
	Observe func(lateness, duration time.Duration)
}

// Engine ticks many instances at a fixed rate with a few goroutines.
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
	slot    int
	t       Ticker
	removed atomic.Bool
}

type worker struct {
	e     *Engine
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
	period := time.Duration(float64(time.Second) / cfg.Rate)
	if cfg.Slot <= 0 {
		cfg.Slot = time.Millisecond
	}
	if cfg.Slot > period {
		cfg.Slot = period
	}
	nslots := int(period / cfg.Slot)
	cfg.Slot = period / time.Duration(nslots)
	e := &Engine{cfg: cfg, period: period, nslots: nslots, start: time.Now(), stop: make(chan struct{})}
	for i := 0; i < cfg.Workers; i++ {
		w := &worker{e: e, slots: make([][]*Handle, nslots)}
		e.workers = append(e.workers, w)
		e.wg.Add(1)
		go w.run()
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
	h := &Handle{w: w, slot: w.next, t: t}
	w.next = (w.next + 1) % e.nslots
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
	for i, x := range s {
		if x == h {
			s[i] = s[len(s)-1]
			s[len(s)-1] = nil
			w.slots[h.slot] = s[:len(s)-1]
			w.count--
			return
		}
	}
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

func (w *worker) run() {
	defer w.e.wg.Done()
	e := w.e
	slot := e.cfg.Slot
	k := int64(time.Since(e.start)/slot) + 1
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var batch []*Handle
	maxLag := time.Duration(e.cfg.MaxCatchUp) * e.period
	for {
		due := e.start.Add(time.Duration(k) * slot)
		if d := time.Until(due); d > 0 {
			timer.Reset(d)
			select {
			case <-e.stop:
				return
			case <-timer.C:
			}
		} else {
			select {
			case <-e.stop:
				return
			default:
			}
		}
		if lag := time.Since(due); lag > maxLag {
			now := int64(time.Since(e.start) / slot)
			e.skipped.Add(w.countBetween(k, now))
			k = now
			due = e.start.Add(time.Duration(k) * slot)
		}
		w.mu.Lock()
		batch = append(batch[:0], w.slots[int(k%int64(e.nslots))]...)
		w.mu.Unlock()
		for i, h := range batch {
			batch[i] = nil
			if h.removed.Load() {
				continue
			}
			t0 := time.Now()
			h.t.Tick(due)
			if e.cfg.Observe != nil {
				e.cfg.Observe(t0.Sub(due), time.Since(t0))
			}
			e.ticks.Add(1)
		}
		k++
	}
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
