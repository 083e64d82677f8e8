package actor_test

import (
	"runtime"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/internal/metrics"
)

// Review finding: engines made and stopped on one registry (a node restarted in-process with the
// registry) each leave their workers' TickRecorders — each with an hdr window of ~18 KB — in the
// registry's metrics for good: every scrape and every TakeLateness then walks them (and
// TakeLateness allocates a fresh window for each). Before 9934308 an engine added no state there.
func TestStoppedEnginesRetireTheirTickRecorders(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.For(reg)
	measure := func() uint64 {
		m.TakeLateness()
		var a, b runtime.MemStats
		runtime.ReadMemStats(&a)
		m.TakeLateness()
		runtime.ReadMemStats(&b)
		return b.TotalAlloc - a.TotalAlloc
	}
	e, err := actor.NewEngine(actor.EngineConfig{Rate: 10, Workers: 4, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	e.Stop()
	one := measure()
	for range 100 {
		e, err := actor.NewEngine(actor.EngineConfig{Rate: 10, Workers: 4, Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		e.Stop()
	}
	many := measure()
	t.Logf("TakeLateness allocates %d bytes after 1 stopped engine, %d after 101", one, many)
	if many > 4*one {
		t.Errorf("stopped engines' recorders are still walked: TakeLateness allocates %d bytes after 101 stopped engines, %d after 1", many, one)
	}
}
