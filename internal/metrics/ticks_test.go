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

// A retired recorder (its engine stopped) keeps its counts in the node's metrics and is no
// longer walked: engines made and stopped on one registry do not pile up.
func TestRetiredTickRecordersKeepTheirCounts(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := For(reg)
	ticks := func() (float64, uint64, float64) {
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var n float64
		var h *dto.Histogram
		for _, f := range families {
			switch f.GetName() {
			case "tickfence_ticks_total":
				n = f.GetMetric()[0].GetCounter().GetValue()
			case "tickfence_tick_lateness_seconds":
				h = f.GetMetric()[0].GetHistogram()
			}
		}
		return n, h.GetSampleCount(), h.GetSampleSum()
	}
	for i := range 100 {
		r := m.TickRecorder()
		r.Observe(time.Millisecond, time.Microsecond)
		r.Observe(3*time.Millisecond, time.Microsecond)
		before, count, sum := ticks()
		r.Retire()
		r.Retire() // twice is once
		after, acount, asum := ticks()
		if before != float64(2*(i+1)) || after != before || acount != count || math.Abs(asum-sum) > 1e-9 {
			t.Fatalf("engine %d: ticks %v, count %d, sum %v before retiring; %v, %d, %v after", i, before, count, sum, after, acount, asum)
		}
	}
	m.tickMetrics.mu.Lock()
	n := len(m.tickMetrics.recorders)
	m.tickMetrics.mu.Unlock()
	if n != 0 {
		t.Errorf("%d recorders still walked after all retired", n)
	}
	if h := m.TakeLateness(); h.Count() != 0 {
		t.Errorf("the summary window holds %d values of retired recorders", h.Count())
	}
}
