package actor

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tickfence/tickfence/internal/metrics"
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
	// Workers is the number of ticking goroutines (default DefaultWorkers()).
	Workers int
	// Slot is the width of a phase bucket: instances are spread over period/Slot buckets so their
	// ticks do not all fall due at once (default 500µs: Go timers wake up to about 1 ms late, and
	// half-millisecond buckets keep the p99 lateness under 2 ms).
	Slot time.Duration
	// MaxCatchUp is how many periods a worker may fall behind and still run every tick late;
	// beyond it, it skips to the present and counts the skipped ticks (default: the periods in
	// DefaultCatchUp, at least 2: 5 at 20 Hz). It is also how many ticks an instance may owe
	// while one of its ticks runs long (see Engine).
	MaxCatchUp int
	// TimerWorkers is how many of the workers wait for the next bucket on a timer (default and
	// negative: all of them; at most Workers). The others wait to be called in: a worker that
	// takes ticks and leaves some in the bucket calls in one of them, so a bucket larger than a
	// chunk, or a worker paused in a chunk, still spreads over the cores, while a bucket a few
	// workers can tick does not wake every worker. Fewer timer workers cut an idle engine's CPU
	// (100 demo dungeons, GOMAXPROCS 4: 0.31–0.37 cores with 64 on timers, 0.19–0.22 with 16). The
	// default keeps them all on timers: the whole-engine stalls seen with 16 of 64 at 5 000 demo
	// dungeons were also seen with all 64 (a worker preempted while holding the lock the engine
	// then had), and 16 has not been measured again since.
	TimerWorkers int
	// Spin is how close to a bucket's deadline a worker stops trusting its timer (which wakes
	// with ~1 ms granularity on Linux) and yields in a loop until the deadline instead. 0 never
	// spins (lowest CPU); a value above Slot makes workers that are idle between buckets busy-wait.
	Spin time.Duration
	// Observe, if set, receives every tick's lateness (actual start minus scheduled start, so
	// coordinated omission is not hidden) and duration. It runs on the hot path: keep it cheap.
	// Workers call it concurrently.
	Observe func(lateness, duration time.Duration)
	// Registerer, if set, receives the tick metrics (tickfence_ticks_total, _ticks_skipped_total,
	// _tick_lateness_seconds, _tick_duration_seconds), shared with the node and coordinator
	// configured with the same registerer. nil: none.
	Registerer prometheus.Registerer
	// ObserveWorker, if set, is called once per worker at start and returns that worker's
	// observer (nil for none); each returned function is only ever called from its worker, so it
	// can record into unsynchronised per-worker state. It runs in addition to Observe.
	ObserveWorker func(worker int) func(lateness, duration time.Duration)
	// Start is the time of bucket 0 (default: now). Ticks are due at Start + k*Slot.
	Start time.Time
	// Manual starts no goroutines: the caller drives the engine with Advance (tests, benchmarks).
	Manual bool

	// claimed, if set, is called by a worker with the ticks it has just taken, before it queues
	// them (tests: a worker paused there, as the runtime may pause any goroutine anywhere).
	claimed func(hs []*Handle)
	// woke, if set, is called each time a timer worker's timer fires (tests: an engine without
	// instances sets none).
	woke func()
}

// DefaultCatchUp is how far behind its schedule an engine may fall and still run every tick,
// late, when EngineConfig.MaxCatchUp is not set (at least 2 periods). A quarter second rides
// out what stalls a process on a busy machine — a garbage collection's mark phase beside a
// saturated CPU, the OS descheduling its threads — without dropping ticks: the game sees a
// late tick, then the owed ones back to back, as a fixed-step game loop catches up (Unity's
// default maximum timestep is a third of a second). Two periods (100 ms at 20 Hz), the
// earlier default, made a node at twice its command capacity skip ticks of every instance at
// once (tickbench overload; README, Performance).
const DefaultCatchUp = 250 * time.Millisecond

// maxCatchUp bounds any catch-up: an hour is "never skip" (and period × MaxCatchUp stays far from
// overflowing a Duration).
const maxCatchUp = time.Hour

// CatchUpPeriods converts a catch-up time to EngineConfig.MaxCatchUp at rate ticks per second:
// the periods it spans, rounded up, at least 2 (the engine's least default); 0 for d ≤ 0 (the
// default). Beyond an hour it is an hour.
func CatchUpPeriods(d time.Duration, rate float64) int {
	if d <= 0 || !(rate > 0) {
		return 0
	}
	d = min(d, maxCatchUp)
	return max(2, int(math.Ceil(d.Seconds()*rate-1e-9)))
}

// Engine ticks many instances at a fixed rate with a few goroutines (DefaultWorkers), all
// sharing one schedule of phase buckets spread over the period, so that the cost per instance is a
// slice entry, not a goroutine and a timer. Workers take the ticks of the bucket that is due in
// small chunks, so the work spreads over the cores, and a worker the OS pauses does not hold up
// the instances the others can tick.
//
// Overrun policy: buckets run in order. If ticks take longer than their period, the following
// buckets run late, back to back, without sleeping (catch-up). If the engine is more than
// MaxCatchUp periods behind, it jumps to the present bucket; every tick it jumped over is counted
// as skipped, and the instances resume on schedule. An instance never ticks twice for the same
// period, never ticks concurrently with itself, and ticks in the order of its periods. A worker
// queues an instance's tick when it takes it from a bucket. When the next tick falls due while
// that one is still queued in the worker's chunk (the worker is paused in an earlier tick of the
// chunk, by the OS or the Go runtime, or that tick is slow), the worker taking the new one takes
// both, in order; when it falls due while the previous tick runs, it is owed to the worker running
// it, which runs it, late, right after. An instance owes at most MaxCatchUp ticks; beyond that its
// oldest owed tick is skipped and counted.
//
// Several rates: EngineConfig.Rate is the engine's own (Add, AddInPhase); Schedule(rate) gives
// another rate a schedule of its own phase buckets, ticked by the same workers, which take first
// the ticks due longest on any schedule (MaxCatchUp is the same time on each). A schedule without
// instances opens no bucket; an engine without any sets no timer until an instance is added.
type Engine struct {
	cfg    EngineConfig
	period time.Duration // the base schedule's (EngineConfig.Rate)
	start  time.Time
	// slotTarget is the bucket width asked for (EngineConfig.Slot before it was fitted to the
	// base period): every other rate's buckets are fitted to its own period from it.
	slotTarget time.Duration
	workers    []*worker

	// mu serialises Add, AddInPhase, Remove and Schedule. Workers take no lock to hand out ticks: a
	// goroutine the runtime pauses while holding one (preempted for a GC stack scan, then left in
	// the global run queue behind every runnable goroutine for tens of milliseconds) would stall
	// every worker with it.
	mu     sync.Mutex
	base   *Schedule                   // EngineConfig.Rate's
	scheds atomic.Pointer[[]*Schedule] // every rate's, base first; replaced (never changed) by Schedule
	rates  map[float64]*Schedule       // under mu
	count  atomic.Int64                // instances not removed, on every schedule
	// idle is closed (and replaced) when an instance is added to an engine that had none: its
	// workers then sleep without a timer (an engine of passivated or no instances costs no CPU),
	// and wake on it.
	idle atomic.Pointer[chan struct{}]

	ticks   atomic.Uint64
	skipped atomic.Uint64

	called chan struct{} // a worker that is not a timer worker waits on it to be called in

	stop chan struct{}
	wg   sync.WaitGroup
}

// Schedule is one tick rate of an engine: its instances are spread over the phase buckets of
// its period, as the engine's own rate's are (Engine.Schedule). Every schedule of an engine is
// ticked by the same workers.
//
// A phase bucket's slice only grows in place (an opened bucket reads no further than its own
// length) and removed instances stay in it until half of it is removed, when it is replaced by
// a compacted copy: Add and Remove cost O(1) amortized.
type Schedule struct {
	e          *Engine
	rate       float64
	period     time.Duration
	slot       time.Duration
	nslots     int
	maxCatchUp int
	slots      []atomic.Pointer[[]*Handle] // phase buckets; slots[k % nslots] is due at start + k*slot
	live       []atomic.Int64              // instances in each not removed
	dead       []int                       // removed ones still in each slice, under e.mu
	count      atomic.Int64                // instances not removed
	next       int                         // slot for the next instance added: spreads phases evenly (under e.mu)
	cur        atomic.Pointer[bucket]
}

// Handle is an instance scheduled on an engine.
type Handle struct {
	s       *Schedule
	slot    int32
	t       Ticker
	removed atomic.Bool
	// removedDue is the due time (Unix ns) of the bucket open when it was removed: a tick due
	// then or earlier, taken but not queued yet, is counted skipped; a later one is not due.
	removedDue atomic.Int64

	mu    sync.Mutex  // never held across a tick
	state uint8       // idle, queued (in a worker's chunk) or running
	gen   uint32      // counts queueings: a chunk's entry is void once another worker took the ticks
	dues  []time.Time // ticks queued or owed and not started, oldest first
	last  time.Time   // the latest tick queued or owed: an older one comes from a worker paused while taking it
}

const (
	idle uint8 = iota
	queued
	running
)

// bucket is an opened phase bucket: its ticks, due at one time, handed out by advancing pos.
type bucket struct {
	k   int64
	due time.Time
	hs  []*Handle // the slot as it was when the bucket opened (nothing within its length changes: slots grow past it or are replaced)
	pos atomic.Int64
}

// entry is a chunk's tick: the handle, as queued (gen) by the worker holding the chunk.
type entry struct {
	h   *Handle
	gen uint32
}

type worker struct {
	e       *Engine
	id      int
	observe func(lateness, duration time.Duration)
	rec     *metrics.TickRecorder // this worker's tick metrics, if the engine has a registerer
	chunk   []entry
}

// DefaultWorkers is the engine's default worker count: 16 per GOMAXPROCS, at least 16 and at
// most 64 (one per P past 64 Ps). More workers than cores hold the schedule better on a node
// that also runs a command path and perhaps an embedded server: a due worker's timer fires only
// when the P holding it reaches the scheduler, and then it waits behind what runs there; with
// many workers, their timers sit on every P, so the first P free fires one and that worker takes
// the bucket. On 2 cores at 5 000 demo dungeons (17.5 k commands/s, embedded server) the tick p99
// of 5 s windows had medians of 6.2–6.8 ms with 2 workers, 2.6–3.9 ms with 16 to 64. A timer
// worker costs a wake-up per bucket (see EngineConfig.TimerWorkers).
func DefaultWorkers() int {
	p := runtime.GOMAXPROCS(0)
	return min(max(16*p, 16), max(64, p)) // never fewer than one per P
}

// NewEngine validates the config and starts the workers. Stop them with Stop.
func NewEngine(cfg EngineConfig) (*Engine, error) {
	if cfg.Rate <= 0 || cfg.Rate > 1000 {
		return nil, fmt.Errorf("tick rate must be in (0, 1000] Hz, got %v", cfg.Rate)
	}
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers()
	}
	if cfg.TimerWorkers <= 0 || cfg.TimerWorkers > cfg.Workers {
		cfg.TimerWorkers = cfg.Workers
	}
	if cfg.MaxCatchUp <= 0 {
		cfg.MaxCatchUp = CatchUpPeriods(DefaultCatchUp, cfg.Rate)
	}
	cfg.MaxCatchUp = min(cfg.MaxCatchUp, CatchUpPeriods(maxCatchUp, cfg.Rate))
	if cfg.Spin < 0 {
		cfg.Spin = 0
	}
	var m *metrics.Node
	if cfg.Registerer != nil {
		m = metrics.For(cfg.Registerer)
	}
	period := time.Duration(float64(time.Second) / cfg.Rate)
	if cfg.Slot <= 0 {
		cfg.Slot = 500 * time.Microsecond
	}
	target := cfg.Slot // other rates' buckets are as close to it as their periods allow
	if cfg.Slot > period {
		cfg.Slot = period
	}
	nslots := int(period / cfg.Slot)
	cfg.Slot = period / time.Duration(nslots)
	period = cfg.Slot * time.Duration(nslots) // a whole number of buckets, so phases never drift
	if m != nil {
		m.TickPeriod.Set(period.Seconds())
	}
	if cfg.Start.IsZero() {
		cfg.Start = time.Now()
	}
	e := &Engine{cfg: cfg, period: period, start: cfg.Start, slotTarget: target, rates: map[float64]*Schedule{}, called: make(chan struct{}), stop: make(chan struct{})}
	idle := make(chan struct{})
	e.idle.Store(&idle)
	e.base = e.newSchedule(cfg.Rate, cfg.MaxCatchUp)
	e.rates[cfg.Rate] = e.base
	e.scheds.Store(&[]*Schedule{e.base})
	if m != nil {
		m.CountSkipped(e.Skipped)
	}
	for i := 0; i < cfg.Workers; i++ {
		w := &worker{e: e, id: i}
		if m != nil {
			w.rec = m.TickRecorder()
		}
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

// newSchedule makes the schedule of a rate (maxCatchUp: in its periods; 0, the engine's catch-up
// time in them). Its buckets are as close to the engine's slot as a whole number of them in a
// period allows, so its phases never drift; bucket k is due at the engine's start + k × its slot.
// Its first bucket is the one open now, handed out.
func (e *Engine) newSchedule(rate float64, catchUp int) *Schedule {
	period := time.Duration(float64(time.Second) / rate)
	slot := min(e.slotTarget, period)
	if rate == e.cfg.Rate {
		slot, period = e.cfg.Slot, e.period
	}
	nslots := max(int(period/slot), 1)
	slot = period / time.Duration(nslots)
	period = slot * time.Duration(nslots)
	if catchUp <= 0 {
		// The base's catch-up, as a time, in this rate's periods.
		catchUp = CatchUpPeriods(time.Duration(e.cfg.MaxCatchUp)*e.period, rate)
	}
	catchUp = min(catchUp, CatchUpPeriods(maxCatchUp, rate))
	s := &Schedule{e: e, rate: rate, period: period, slot: slot, nslots: nslots, maxCatchUp: catchUp,
		slots: make([]atomic.Pointer[[]*Handle], nslots), live: make([]atomic.Int64, nslots), dead: make([]int, nslots)}
	for i := range s.slots {
		s.slots[i].Store(new([]*Handle))
	}
	s.cur.Store(s.presentBucket(time.Now()))
	return s
}

// presentBucket is an empty bucket, handed out, whose successor is the first due after now (for
// a Manual engine, the bucket of Start): a schedule that starts, or that had no instance, takes
// up its ticks from the present and counts none of the past as skipped.
func (s *Schedule) presentBucket(now time.Time) *bucket {
	e := s.e
	k := int64(now.Sub(e.start) / s.slot)
	if e.cfg.Manual {
		k = 0
	} else if now.Before(e.start) {
		k = -1
	}
	return &bucket{k: k, due: e.start.Add(time.Duration(k) * s.slot)}
}

// Schedule returns the engine's schedule of a rate (ticks per second, in (0, 1000]), making it
// the first time: instances added to it tick at that rate, on the engine's workers, beside
// those of every other rate. The engine's own rate (EngineConfig.Rate) is the schedule Add
// uses. An engine has at most MaxSchedules of them.
func (e *Engine) Schedule(rate float64) (*Schedule, error) {
	if rate <= 0 || rate > 1000 {
		return nil, fmt.Errorf("tick rate must be in (0, 1000] Hz, got %v", rate)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if s, ok := e.rates[rate]; ok {
		return s, nil
	}
	if len(e.rates) >= MaxSchedules {
		return nil, fmt.Errorf("tick rate %v Hz: the engine runs %d rates already (at most %d)", rate, len(e.rates), MaxSchedules)
	}
	s := e.newSchedule(rate, 0)
	e.rates[rate] = s
	scheds := append(append([]*Schedule(nil), *e.scheds.Load()...), s)
	e.scheds.Store(&scheds)
	return s, nil
}

// Base is the schedule of the engine's own rate (EngineConfig.Rate): the one Add uses.
func (e *Engine) Base() *Schedule { return e.base }

// MaxSchedules bounds the tick rates one engine runs (a few kinds with rates of their own).
const MaxSchedules = 16

// Rate is the schedule's ticks per second.
func (s *Schedule) Rate() float64 { return s.rate }

// Period is the time between two ticks of one instance of the schedule: a whole number of its
// buckets (1/rate to the nanosecond below).
func (s *Schedule) Period() time.Duration { return s.period }

// Add schedules t at this rate; it first ticks within one period. Instances are spread evenly
// over the period's phase buckets.
func (s *Schedule) Add(t Ticker) *Handle {
	e := s.e
	e.mu.Lock()
	defer e.mu.Unlock()
	slot := s.next
	s.next = (s.next + 1) % s.nslots
	return s.addLocked(t, slot)
}

// AddInPhase schedules t at this rate in the phase bucket of key: tickers added with the same
// key tick together, in one bucket of each period (a shard whose records leave in one batch per
// tick). A bucket already holding well over its share of the tickers passes t on to the next
// ones, so a key with many tickers spreads over a few adjacent buckets instead of making one late.
func (s *Schedule) AddInPhase(t Ticker, key uint64) *Handle {
	e := s.e
	e.mu.Lock()
	defer e.mu.Unlock()
	return s.addFrom(t, int(key%uint64(s.nslots)))
}

// AddSoon schedules t at this rate in the phase bucket that opens next, so that it first ticks
// within a bucket or two instead of within a period (an instance woken by a command waiting for
// it). Like AddInPhase, a bucket already holding well over its share passes t on to the next ones.
func (s *Schedule) AddSoon(t Ticker) *Handle {
	e := s.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if s.count.Load() == 0 && !e.cfg.Manual {
		s.cur.Store(s.presentBucket(time.Now())) // as addLocked would: the present, not a stale bucket
	}
	// Not the next bucket: a worker may be opening it now, with the slot as it was.
	return s.addFrom(t, int((s.cur.Load().k+2)%int64(s.nslots)))
}

// addFrom adds t in slot, or the first after it not holding well over its share. Under e.mu.
func (s *Schedule) addFrom(t Ticker, slot int) *Handle {
	limit := 2*s.count.Load()/int64(s.nslots) + phaseSlack
	for i := 0; i < s.nslots && s.live[slot].Load() >= limit; i++ {
		slot = (slot + 1) % s.nslots
	}
	return s.addLocked(t, slot)
}

// Lag is how far behind its schedule the engine is now: how late the bucket being handed out
// (or, if it is handed out, the next one) is, on the schedule furthest behind that has
// instances; 0 when it is on time. An overrun shows here before it shows as skipped ticks.
func (e *Engine) Lag() time.Duration {
	now := time.Now()
	var lag time.Duration
	for _, s := range *e.scheds.Load() {
		if s.count.Load() == 0 {
			continue
		}
		b := s.cur.Load()
		due := b.due
		if b.pos.Load() >= int64(len(b.hs)) {
			due = due.Add(s.slot)
		}
		lag = max(lag, now.Sub(due))
	}
	return lag
}

// Manual reports an engine driven by Advance (its schedule is not the wall clock's).
func (e *Engine) Manual() bool { return e.cfg.Manual }

// Period is the time between two ticks of one instance at the engine's own rate.
func (e *Engine) Period() time.Duration { return e.period }

// Ticks is the number of ticks run so far.
func (e *Engine) Ticks() uint64 { return e.ticks.Load() }

// Skipped is the number of ticks skipped by the overrun policy so far.
func (e *Engine) Skipped() uint64 { return e.skipped.Load() }

// Add schedules t at the engine's own rate; it first ticks within one period. Instances are
// spread evenly over the period's phase buckets.
func (e *Engine) Add(t Ticker) *Handle { return e.base.Add(t) }

// AddInPhase is Schedule.AddInPhase at the engine's own rate.
func (e *Engine) AddInPhase(t Ticker, key uint64) *Handle { return e.base.AddInPhase(t, key) }

// duesRoom is how many ticks an instance has room to queue and owe without queue allocating
// under its lock. An instance that owes more (a stall of over 7 periods, within MaxCatchUp)
// grows the room under the lock, and gets the small one back once it has caught up.
const duesRoom = 8

// phaseSlack is how many tickers any bucket takes under AddInPhase, beyond twice the average.
const phaseSlack = 16

func (s *Schedule) addLocked(t Ticker, slot int) *Handle {
	e := s.e
	h := &Handle{s: s, slot: int32(slot), t: t, dues: make([]time.Time, 0, min(s.maxCatchUp+1, duesRoom))}
	if s.count.Load() == 0 && !e.cfg.Manual {
		// Its buckets were passed over while it had no instance: it takes up from the present.
		s.cur.Store(s.presentBucket(time.Now()))
	}
	sl := append(*s.slots[slot].Load(), h) // in place if there is room: past every opened bucket's length
	s.slots[slot].Store(&sl)
	s.live[slot].Add(1)
	s.count.Add(1)
	if e.count.Add(1) == 1 && !e.cfg.Manual {
		// Its workers may sleep without a timer: wake them all.
		idle := make(chan struct{})
		close(*e.idle.Swap(&idle))
	}
	return h
}

// Remove unschedules an instance. It may still be in a tick that already started, but it will not
// start another one. Remove may be called from inside Tick.
func (e *Engine) Remove(h *Handle) {
	if h == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if h.removed.Load() {
		return
	}
	s := h.s
	h.removedDue.Store(s.cur.Load().due.UnixNano())
	h.removed.Store(true)
	s.live[h.slot].Add(-1)
	s.count.Add(-1)
	e.count.Add(-1)
	old := *s.slots[h.slot].Load()
	if s.dead[h.slot]++; s.dead[h.slot]*2 < len(old) {
		return
	}
	// Half of it is removed: a compacted copy (opened buckets keep reading the old one).
	sl := make([]*Handle, 0, int(s.live[h.slot].Load()))
	for _, x := range old {
		if !x.removed.Load() {
			sl = append(sl, x)
		}
	}
	s.slots[h.slot].Store(&sl)
	s.dead[h.slot] = 0
}

// Stop stops every worker after its current tick and waits for them.
func (e *Engine) Stop() {
	first := false
	select {
	case <-e.stop:
	default:
		close(e.stop)
		first = true
	}
	e.wg.Wait()
	if first {
		for _, w := range e.workers {
			if w.rec != nil {
				w.rec.Retire() // its counts stay in the node's metrics; it is no longer walked
			}
		}
	}
}

// Advance runs, on the calling goroutine, every tick of a Manual engine due at or before now,
// applying the overrun policy as the workers would. It returns the number of ticks run.
func (e *Engine) Advance(now time.Time) int {
	if !e.cfg.Manual {
		panic("actor: Advance on an engine that runs its own workers")
	}
	w := e.workers[0]
	n := 0
	for {
		_, _, ok := w.take(now)
		if !ok {
			return n
		}
		n += w.runChunk()
	}
}

func (w *worker) run() {
	defer w.e.wg.Done()
	e := w.e
	if w.id >= e.cfg.TimerWorkers {
		w.runCalled()
		return
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case <-e.stop:
			return
		default:
		}
		idle := *e.idle.Load() // before take: an instance added after it closes this one
		now := time.Now()
		due, more, ok := w.take(now)
		if ok {
			if more {
				e.callIn()
			}
			w.runChunk()
			continue
		}
		if due.IsZero() {
			// No instance on any schedule: no timer until one is added.
			select {
			case <-e.stop:
				return
			case <-idle:
			}
			continue
		}
		// Nothing to hand out until the next bucket is due.
		if d := due.Sub(now); d > e.cfg.Spin {
			// The timer wakes up to ~1 ms late; with Spin set, aim it that much early and yield
			// the rest of the way.
			timer.Reset(d - e.cfg.Spin)
			select {
			case <-e.stop:
				return
			case <-timer.C:
				if e.cfg.woke != nil {
					e.cfg.woke()
				}
			}
		} else {
			runtime.Gosched()
		}
	}
}

// runCalled is the loop of a worker without a timer: it waits to be called in, then takes and
// runs ticks until the due buckets are handed out.
//
// It also wakes on a timer of its own, so that due ticks still run when every timer worker is held
// in a tick: the j-th such worker after every 2^(j+1) buckets (at most a period), so the first
// comes within a millisecond at 20 Hz and all of them together wake a few times per bucket, not
// once each.
func (w *worker) runCalled() {
	e := w.e
	every := fallbackEvery(e.cfg.Slot, e.period, w.id-e.cfg.TimerWorkers)
	fallback := time.NewTimer(every)
	defer fallback.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-e.called:
		case <-fallback.C:
		}
		for {
			select {
			case <-e.stop: // an engine always behind never runs out of due ticks
				return
			default:
			}
			_, more, ok := w.take(time.Now())
			if !ok {
				break
			}
			if more {
				e.callIn()
			}
			w.runChunk()
		}
		fallback.Reset(every)
	}
}

// fallbackEvery is the interval of the j-th called-in worker's own timer: 2^(j+1) slots, at most
// a period (doubled in a loop: a shift of a long slot would overflow).
func fallbackEvery(slot, period time.Duration, j int) time.Duration {
	every := slot
	for i := j; i >= 0 && every < period; i-- {
		every *= 2
	}
	return min(every, period)
}

// callIn wakes one worker waiting to be called in, if one is waiting.
func (e *Engine) callIn() {
	select {
	case e.called <- struct{}{}:
	default:
	}
}

// take hands the worker its next chunk of ticks, all due at the returned time, from the schedule
// whose ticks have been due longest; more says whether ticks due are left to hand out after it.
// With nothing to run it returns ok false and the time the next bucket is due (zero: no schedule
// has an instance). Schedules without instances are passed over: their buckets are not opened.
func (w *worker) take(now time.Time) (due time.Time, more, ok bool) {
	scheds := *w.e.scheds.Load()
	if len(scheds) == 1 { // the engine's own rate only
		if scheds[0].count.Load() == 0 {
			return time.Time{}, false, false
		}
		return w.takeFrom(scheds[0], now)
	}
	for {
		var first *Schedule
		var firstDue, next time.Time
		others := false // another schedule has ticks due too
		for _, s := range scheds {
			if s.count.Load() == 0 {
				continue
			}
			d := s.pendingDue()
			if d.After(now) {
				if next.IsZero() || d.Before(next) {
					next = d
				}
				continue
			}
			if first == nil || d.Before(firstDue) {
				others = others || first != nil
				first, firstDue = s, d
			} else {
				others = true
			}
		}
		if first == nil {
			return next, false, false
		}
		if due, more, ok := w.takeFrom(first, now); ok {
			return due, more || others, true
		}
		// Another worker took what was due there meanwhile: look again.
	}
}

// pendingDue is when the schedule's next ticks to hand out are due: its open bucket's if it is
// not handed out, else the next bucket's.
func (s *Schedule) pendingDue() time.Time {
	b := s.cur.Load()
	if b.pos.Load() < int64(len(b.hs)) {
		return b.due
	}
	return b.due.Add(s.slot)
}

// takeFrom hands the worker its next chunk of ticks of one schedule, all due at the returned
// time, opening the next bucket if the current one is handed out and the next is due by now; more
// says whether ticks due are left to hand out after it. With nothing to run it returns ok false
// and the time the next bucket is due. Workers claim chunks and open buckets with
// compare-and-swap, holding no lock: a worker paused in take holds up only the ticks it claimed
// (and, paused inside queue, the one instance whose lock it holds).
func (w *worker) takeFrom(s *Schedule, now time.Time) (due time.Time, more, ok bool) {
	e := w.e
	for {
		b := s.cur.Load()
		pos, total := b.pos.Load(), int64(len(b.hs))
		if pos < total {
			// Chunks small enough that every worker gets a share of the bucket, large enough that
			// the claims rarely collide.
			rest := total - pos
			n := min(max(rest/int64(4*len(e.workers)), 8), rest, 256)
			if !b.pos.CompareAndSwap(pos, pos+n) {
				continue
			}
			hs := b.hs[pos : pos+n]
			if e.cfg.claimed != nil {
				e.cfg.claimed(hs)
			}
			w.chunk = w.chunk[:0]
			for _, h := range hs {
				if gen, ok := e.queue(h, b.due); ok {
					w.chunk = append(w.chunk, entry{h, gen})
				}
			}
			// More is left if this bucket is not handed out, or if the next one is due already.
			return b.due, pos+n < total || !b.due.Add(s.slot).After(now), true
		}
		nextDue := b.due.Add(s.slot)
		if nextDue.After(now) {
			return nextDue, false, false
		}
		k := b.k + 1
		var jumped uint64
		if now.Sub(nextDue) > time.Duration(s.maxCatchUp)*s.period {
			present := int64(now.Sub(e.start) / s.slot)
			jumped = s.countBetween(k, present)
			k = present
		}
		nb := &bucket{k: k, due: e.start.Add(time.Duration(k) * s.slot), hs: *s.slots[int(k%int64(s.nslots))].Load()}
		if s.cur.CompareAndSwap(b, nb) {
			e.skipped.Add(jumped) // counted by the one worker that opened it
		}
	}
}

// queue adds h's tick due at due to the chunk being taken (ok), with any tick of h still queued in
// another worker's chunk (whose entry gen voids), or, if h's previous tick is running, owes it to
// the worker running it. Past MaxCatchUp ticks waiting behind the one running or queued, the
// oldest is dropped and counted. A tick older than one already queued (its worker was paused
// between taking and queueing it for a period or more) is dropped and counted too: an instance's
// ticks run in order.
func (e *Engine) queue(h *Handle, due time.Time) (gen uint32, ok bool) {
	if h.removed.Load() {
		if due.UnixNano() <= h.removedDue.Load() {
			e.skipped.Add(1) // due before it was removed, and never run
		}
		return 0, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !due.After(h.last) {
		e.skipped.Add(1)
		return 0, false
	}
	h.last = due
	limit := h.s.maxCatchUp
	if h.state != running {
		limit++ // the one queued, and those owed behind it
	}
	if len(h.dues) >= limit {
		h.dues = h.dues[:copy(h.dues, h.dues[1:])]
		e.skipped.Add(1)
	}
	h.dues = append(h.dues, due)
	if h.state == running {
		return 0, false
	}
	h.state = queued
	h.gen++
	return h.gen, true
}

// runChunk runs the ticks of the chunk taken: each entry's queued ticks, and those owed to it
// while they run, in order.
func (w *worker) runChunk() int {
	e := w.e
	observe, observeW, rec := e.cfg.Observe, w.observe, w.rec
	timed := observe != nil || observeW != nil || rec != nil
	ran := 0
	var t0 time.Time
	if timed {
		t0 = time.Now()
	}
	for i, en := range w.chunk {
		w.chunk[i] = entry{}
		h := en.h
		h.mu.Lock()
		if h.state != queued || h.gen != en.gen {
			h.mu.Unlock() // taken over by a worker that took a later tick of h
			continue
		}
		h.state = running
		for {
			if h.removed.Load() {
				e.skipped.Add(uint64(len(h.dues))) // due before it was removed, and never run
				h.state, h.dues = idle, h.dues[:0]
				h.mu.Unlock()
				break
			}
			if len(h.dues) == 0 {
				h.state = idle
				if cap(h.dues) > duesRoom { // caught up after a long stall: give the room back
					h.dues = make([]time.Time, 0, duesRoom)
				}
				h.mu.Unlock()
				break
			}
			d := h.dues[0]
			h.dues = h.dues[:copy(h.dues, h.dues[1:])]
			h.mu.Unlock()
			h.t.Tick(d)
			e.ticks.Add(1) // per tick: a chunk whose instance overruns its period may never end
			ran++
			if timed {
				t1 := time.Now() // the end of one tick is the start of the next: one clock read per tick
				if rec != nil {
					rec.Observe(t0.Sub(d), t1.Sub(t0))
				}
				if observe != nil {
					observe(t0.Sub(d), t1.Sub(t0))
				}
				if observeW != nil {
					observeW(t0.Sub(d), t1.Sub(t0))
				}
				t0 = t1
			}
			h.mu.Lock()
		}
	}
	return ran
}

// countBetween counts the ticks due in buckets [from, to) of the schedule.
func (s *Schedule) countBetween(from, to int64) uint64 {
	if to <= from {
		return 0
	}
	n := to - from
	total := uint64(n/int64(s.nslots)) * uint64(s.count.Load())
	for j := from; j < from+n%int64(s.nslots); j++ {
		total += uint64(s.live[int(j%int64(s.nslots))].Load())
	}
	return total
}
