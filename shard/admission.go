package shard

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// admission decides at the door whether the node can still commit a command in time (DESIGN 5,
// the busy code). It watches how long admitted commands wait for their answer (their sojourn:
// the next tick, then the write that holds the effect). When even the quickest answer of a whole
// interval took longer than the target, a queue is standing — the node commits more slowly
// than commands arrive — and new commands are refused at once with busy, which costs a decode
// and a reply, until an interval's quickest answer is back under the target (CoDel's signal,
// applied at the door rather than at the head of the queue). The same happens while the tick
// engine runs behind its schedule by more than half a period at the end of an interval: ticks
// come first, and commands wait outside (with busy) rather than inside. A bound on admitted, unanswered
// commands caps memory if answers stop altogether. Overload then degrades into quick refusals
// that clients retry with backoff, instead of queues that grow until every client times out.
type admission struct {
	target, interval time.Duration
	max              int64
	pendingGauge     prometheus.Gauge
	sheddingGauge    prometheus.Gauge
	log              *slog.Logger
	// lag reports how far behind its schedule the tick engine is; over lagLimit at the end of an
	// interval (the CPU cannot keep up with ticks and commands together) sheds as well.
	lag      func() time.Duration
	lagLimit time.Duration
	logged   time.Time // last report of a change (at most one per 5 s)

	pending  atomic.Int64 // admitted, not answered yet
	shedding atomic.Bool
	refused  atomic.Uint64

	mu    sync.Mutex
	start time.Time     // of the current interval
	ends  atomic.Int64  // when it ends (Unix ns): read without the lock on every command
	min   time.Duration // the quickest answer in it; -1: none yet
}

func newAdmission(target time.Duration, max int, pending, shedding prometheus.Gauge, log *slog.Logger) *admission {
	if target < 0 {
		return nil // off
	}
	a := &admission{target: target, interval: 100 * time.Millisecond, max: int64(max), min: -1,
		pendingGauge: pending, sheddingGauge: shedding, log: log}
	a.begin(time.Now())
	return a
}

// admit reports whether a command may enter; if so, done must be called when it is answered.
func (a *admission) admit(now time.Time) bool {
	if a == nil {
		return true
	}
	if a.refusing(now) {
		return false
	}
	if a.pending.Load() >= a.max {
		a.refused.Add(1)
		return false
	}
	a.pending.Add(1)
	a.pendingGauge.Inc()
	return true
}

// done: an admitted command was answered after waiting sojourn.
func (a *admission) done(sojourn time.Duration, now time.Time) {
	if a == nil {
		return
	}
	a.pending.Add(-1)
	a.pendingGauge.Dec()
	a.mu.Lock()
	if a.min < 0 || sojourn < a.min {
		a.min = sojourn
	}
	a.roll(now)
	a.mu.Unlock()
}

// roll ends the interval once it is over: shedding if the engine runs late or its quickest answer
// was over the target; not shedding otherwise (an interval without answers included). Under a.mu.
func (a *admission) roll(now time.Time) {
	if now.Sub(a.start) < a.interval {
		return
	}
	was := a.shedding.Load()
	overrun := a.lag != nil && a.lag() > a.lagLimit
	switch {
	case overrun:
		a.shedding.Store(true)
	case a.min >= 0:
		a.shedding.Store(a.min > a.target)
	default:
		// No answer in a whole interval: nothing waits, or what waits is stuck (a store that does
		// not answer, a command lost by a bug). Either way refusing proves nothing: admit again,
		// and let the bound on pending commands protect the node.
		a.shedding.Store(false)
	}
	if is := a.shedding.Load(); is != was && now.Sub(a.logged) > 5*time.Second {
		a.logged = now
		if is {
			a.log.Warn("admission: refusing new commands with busy; answers are slower than the target or ticks run late",
				"quickest_answer", a.min.Round(time.Millisecond), "target", a.target, "tick_overrun", overrun,
				"pending", a.pending.Load(), "refused_so_far", a.refused.Load())
		} else {
			a.log.Info("admission: admitting commands again", "pending", a.pending.Load(), "refused_so_far", a.refused.Load())
		}
	}
	a.begin(now)
	if a.shedding.Load() {
		a.sheddingGauge.Set(1)
	} else {
		a.sheddingGauge.Set(0)
	}
}

// begin starts an interval at now.
func (a *admission) begin(now time.Time) {
	a.start, a.min = now, -1
	a.ends.Store(now.Add(a.interval).UnixNano())
}

// refusing reports whether a command arriving now would be refused, ending the interval if it
// is over (a transport that refuses before decoding calls it instead of admit: the state must
// still move on without admitted commands).
func (a *admission) refusing(now time.Time) bool {
	if a == nil {
		return false
	}
	if now.UnixNano() >= a.ends.Load() {
		a.mu.Lock()
		a.roll(now)
		a.mu.Unlock()
	}
	if a.shedding.Load() {
		a.refused.Add(1)
		return true
	}
	return false
}
