package proc

import (
	"bytes"
	"math"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// A real registry's exposition parses into the samples the scenarios read.
func TestParseMetricsOfARegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tickfence_state_writes_total", Help: "h"}, []string{"result"})
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "tickfence_instances", Help: "h"})
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tickfence_tick_lateness_seconds", Help: "h", Buckets: []float64{0.001, 0.002, 0.005}})
	reg.MustRegister(c, g, h)
	c.WithLabelValues("ok").Add(7)
	c.WithLabelValues("stale_owner").Add(2)
	g.Set(100)
	for _, v := range []float64{0.0005, 0.0015, 0.0015, 0.003, 0.5} {
		h.Observe(v)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	for _, f := range fams {
		if _, err := expfmt.MetricFamilyToText(&buf, f); err != nil {
			t.Fatal(err)
		}
	}
	m := ParseMetrics(buf.String())
	for k, want := range map[string]float64{
		`tickfence_state_writes_total{result="ok"}`:          7,
		`tickfence_state_writes_total{result="stale_owner"}`: 2,
		`tickfence_instances`:                                100,
		`tickfence_tick_lateness_seconds_count`:              5,
	} {
		if m[k] != want {
			t.Errorf("%s = %v, want %v (parsed: %v)", k, m[k], want, m)
		}
	}
	b := m.Histogram("tickfence_tick_lateness_seconds")
	if len(b) != 4 || b[0].LE != 0.001 || b[0].Count != 1 || b[2].Count != 4 || !math.IsInf(b[3].LE, 1) || b[3].Count != 5 {
		t.Fatalf("histogram buckets %+v", b)
	}
	if q := Quantile(b, 0.5); q <= 0.001 || q > 0.002 {
		t.Fatalf("median %v, want in (1 ms, 2 ms]", q)
	}
	// A scrape cut off mid-line keeps what came before.
	if got := ParseMetrics("tickfence_instances 3\ntickfence_ticks_total{x="); got["tickfence_instances"] != 3 {
		t.Fatalf("samples before a parse error: %v", got)
	}
}
