package metrics

import (
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The per-worker recorders add up to what one Prometheus histogram of the same ticks shows:
// bucket by bucket (a value on a bound counts in that bound's bucket), count, sum and ticks.
func TestTickRecordersAddUpToOneHistogram(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := For(reg)
	want := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "want", Buckets: LatencyBuckets})
	recs := []*TickRecorder{m.TickRecorder(), m.TickRecorder(), m.TickRecorder()}
	var values []time.Duration
	for _, b := range LatencyBuckets {
		d := time.Duration(math.Round(b * 1e9))
		values = append(values, d, d-1, d+1)
	}
	values = append(values, 0, 2*time.Second, -time.Millisecond)
	for i, v := range values {
		recs[i%len(recs)].Observe(v, v/2)
		want.Observe(v.Seconds())
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*dto.Metric{}
	for _, f := range families {
		got[f.GetName()] = f.GetMetric()[0]
	}
	if n := got["tickfence_ticks_total"].GetCounter().GetValue(); n != float64(len(values)) {
		t.Errorf("tickfence_ticks_total = %v, want %d", n, len(values))
	}
	var w dto.Metric
	if err := want.Write(&w); err != nil {
		t.Fatal(err)
	}
	lat := got["tickfence_tick_lateness_seconds"].GetHistogram()
	wh := w.GetHistogram()
	if lat.GetSampleCount() != wh.GetSampleCount() || math.Abs(lat.GetSampleSum()-wh.GetSampleSum()) > 1e-9 {
		t.Errorf("lateness count %d sum %v, want %d %v", lat.GetSampleCount(), lat.GetSampleSum(), wh.GetSampleCount(), wh.GetSampleSum())
	}
	for i, b := range wh.GetBucket() {
		g := lat.GetBucket()[i]
		if g.GetUpperBound() != b.GetUpperBound() || g.GetCumulativeCount() != b.GetCumulativeCount() {
			t.Errorf("bucket le=%v: %d, want le=%v: %d", g.GetUpperBound(), g.GetCumulativeCount(), b.GetUpperBound(), b.GetCumulativeCount())
		}
	}
	if dur := got["tickfence_tick_duration_seconds"].GetHistogram(); dur.GetSampleCount() != uint64(len(values)) {
		t.Errorf("duration count %d, want %d", dur.GetSampleCount(), len(values))
	}
	// The summary's window holds every worker's ticks, once.
	h := m.TakeLateness()
	if h.Count() != uint64(len(values)) || h.Max() != 2*time.Second {
		t.Errorf("TakeLateness: %d values, max %v; want %d, 2s", h.Count(), h.Max(), len(values))
	}
	if h := m.TakeLateness(); h.Count() != 0 {
		t.Errorf("a second TakeLateness holds %d values, want 0", h.Count())
	}
}
