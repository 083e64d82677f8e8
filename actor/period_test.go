package actor_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/internal/metrics"
)

// TestEngineExportsTickPeriod: tickfence_tick_period_seconds is 1 / tick rate, the budget the
// "lateness p99 over the tick budget" alert (deploy/prometheus) compares tick lateness with.
func TestEngineExportsTickPeriod(t *testing.T) {
	reg := prometheus.NewRegistry()
	e, err := actor.NewEngine(actor.EngineConfig{Rate: 20, Workers: 1, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Stop()
	if got := testutil.ToFloat64(metrics.For(reg).TickPeriod); got != 0.05 {
		t.Fatalf("tickfence_tick_period_seconds = %v at 20 Hz; want 0.05", got)
	}
}
