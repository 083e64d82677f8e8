package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Life are the metrics of instances' lifecycles: passivation and wake-ups.
type Life struct {
	// Passive: instances of this node's shards unloaded until a command or a watcher wakes them.
	Passive prometheus.GaugeFunc
	// Passivations counts instances unloaded; Wakes those loaded again, by what woke them
	// (command, watch); WakeSeconds how long from the wake-up's arrival until it was loaded and
	// ticking.
	Passivations prometheus.Counter
	Wakes        *prometheus.CounterVec
	WakeSeconds  prometheus.Histogram
	// EndedByLogic counts instances whose own Logic ended them (actor.Ender).
	EndedByLogic prometheus.Counter

	passiveNow atomic.Pointer[func() uint64]
}

// CountPassive makes f the source of tickfence_instances_passive (the shard host's count).
func (l *Life) CountPassive(f func() uint64) { l.passiveNow.Store(&f) }

func newLife(reg prometheus.Registerer) *Life {
	l := &Life{}
	l.Passive = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tickfence_instances_passive",
		Help: "Instances of this node's shards passivated (their kind's KindOptions.Passivate): unloaded, no tick, until a command or a watcher's interest wakes them."},
		func() float64 {
			if f := l.passiveNow.Load(); f != nil {
				return float64((*f)())
			}
			return 0
		})
	l.Passivations = prometheus.NewCounter(prometheus.CounterOpts{Name: "tickfence_passivations_total",
		Help: "Instances unloaded after their kind's passivation time without a command or a watcher."})
	l.Wakes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tickfence_wakes_total",
		Help: "Passivated instances loaded again, by what woke them: command or watch (a watcher's interest)."}, []string{"by"})
	for _, by := range []string{"command", "watch"} {
		l.Wakes.WithLabelValues(by)
	}
	l.WakeSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tickfence_wake_seconds",
		Help: "A passivated instance's wake-up: from the command or interest that woke it until it is loaded and scheduled.", Buckets: LatencyBuckets})
	l.EndedByLogic = prometheus.NewCounter(prometheus.CounterOpts{Name: "tickfence_instances_ended_by_logic_total",
		Help: "Instances whose own Logic ended them (actor.Ender), counted when the tombstone is handed to the store."})
	reg.MustRegister(l.Passive, l.Passivations, l.Wakes, l.WakeSeconds, l.EndedByLogic)
	return l
}
