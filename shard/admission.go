package shard

import (
	"fmt"
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
// than commands arrive (CoDel's signal, applied at the door rather than at the head of the
// queue). The same holds while the tick engine runs behind its schedule by more than half a
// period at the end of an interval: ticks come first. Then it admits a smaller share of new
// commands and refuses the rest at once with busy, which costs a decode and a reply. A standing
// queue within 5/4 of the target cuts the share by a tenth per interval (compounding while it
// stands); one further over, or ticks running late, by a third. Each interval without either
// signal gives back 2 % of the arrivals (an idle interval, with nothing answered and nothing
// waiting, all of it), so overload settles near the node's capacity instead of swinging between
// admitting everything and nothing (AIMD, as TCP finds a link's rate). The mean of that sawtooth
// is what the node acknowledges past its capacity: the gentle cut near the target keeps it high,
// the deep one drains a sudden overload before its answers outlast clients' timeouts
// (TestSuddenOverloadIsCutBeforeClientsTimeOut), and a small give-back keeps the share from
// overshooting (a tenth per interval let ticks fall to 96–98 % of schedule at 200 %; README,
// Performance, has the measurements). Refused commands are
// spread evenly over the arrivals, not in bursts. A bound on admitted, unanswered commands caps
// memory if answers stop altogether. Overload then degrades into quick refusals that clients
// retry with backoff, instead of queues that grow until every client times out.
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
	wasFull  bool      // the share at the last report was whole

	pending atomic.Int64 // admitted, not answered yet
	refused atomic.Uint64
	// share of arrivals admitted, in 1/shareOne (shareOne: all); credit accumulates it per
	// arrival and admits one whenever it crosses a multiple of shareOne.
	share  atomic.Int64
	credit atomic.Int64

	mu    sync.Mutex
	start time.Time     // of the current interval
	ends  atomic.Int64  // when it ends (Unix ns): read without the lock on every command
	min   time.Duration // the quickest answer in it; -1: none yet
}

const (
	shareOne  = 1 << 16
	shareMin  = shareOne / 50 // 2 %: commands keep probing the node's capacity
	shareStep = shareOne / 50 // given back per interval without overload (2 %)
)

func newAdmission(target time.Duration, max int, pending, shedding prometheus.Gauge, log *slog.Logger) *admission {
	if target < 0 {
		return nil // off
	}
	a := &admission{target: target, interval: 100 * time.Millisecond, max: int64(max), min: -1,
		pendingGauge: pending, sheddingGauge: shedding, log: log, wasFull: true}
	a.share.Store(shareOne)
	a.begin(time.Now())
	return a
}

// admit reports whether a command may enter; if so, done must be called when it is answered.
// screened: refusing was asked for it already (by the transport) and let it in.
func (a *admission) admit(now time.Time, screened bool) bool {
	if a == nil {
		return true
	}
	if !screened && a.refusing(now) {
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

// roll ends the interval once it is over: a smaller share if the engine runs late or its
// quickest answer was over the target; a larger one otherwise (an interval without answers
// included: what waits is stuck, and refusing proves nothing then; the bound on pending
// commands protects the node), all of it if nothing waits. Under a.mu.
func (a *admission) roll(now time.Time) {
	if now.Sub(a.start) < a.interval {
		return
	}
	overrun := a.lag != nil && a.lag() > a.lagLimit
	share := a.share.Load()
	switch {
	case overrun || a.min > a.target*5/4:
		share = max(shareMin, share*2/3) // ticks come first; a queue far over the target must drain
	case a.min > a.target:
		share = max(shareMin, share*9/10)
	case a.min < 0 && a.pending.Load() == 0:
		share = shareOne // idle: nothing to protect
	default:
		share = min(shareOne, share+shareStep)
	}
	a.share.Store(share)
	full := share >= shareOne
	if full != a.wasFull && now.Sub(a.logged) > 5*time.Second {
		a.logged, a.wasFull = now, full
		if !full {
			a.log.Warn("admission: refusing a share of new commands with busy; answers are slower than the target or ticks run late",
				"admitted_share", fmt.Sprintf("%.2f", float64(share)/shareOne), "quickest_answer", a.min.Round(time.Millisecond),
				"target", a.target, "tick_overrun", overrun, "pending", a.pending.Load(), "refused_so_far", a.refused.Load())
		} else {
			a.log.Info("admission: admitting every command again", "pending", a.pending.Load(), "refused_so_far", a.refused.Load())
		}
	}
	a.begin(now)
	if full {
		a.sheddingGauge.Set(0)
	} else {
		a.sheddingGauge.Set(1)
	}
}

// begin starts an interval at now.
func (a *admission) begin(now time.Time) {
	a.start, a.min = now, -1
	a.ends.Store(now.Add(a.interval).UnixNano())
}

// refusing reports whether a command arriving now is refused (the share decides, arrivals spread
// evenly), ending the interval if it is over (a transport that refuses before decoding calls it
// instead of admit: the state must still move on without admitted commands).
func (a *admission) refusing(now time.Time) bool {
	if a == nil {
		return false
	}
	if now.UnixNano() >= a.ends.Load() {
		a.mu.Lock()
		a.roll(now)
		a.mu.Unlock()
	}
	share := a.share.Load()
	if share >= shareOne {
		return false
	}
	c := a.credit.Add(share)
	if c/shareOne != (c-share)/shareOne {
		return false // this arrival crosses a whole share: admitted
	}
	a.refused.Add(1)
	return true
}
