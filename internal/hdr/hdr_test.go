package hdr

import (
	"math/rand/v2"
	"sort"
	"testing"
	"time"
)

func TestBucketsCoverValuesWithBoundedError(t *testing.T) {
	for _, p := range []uint{4, 7} {
		h := New(p)
		for _, v := range []uint64{0, 1, 15, 16, 17, 127, 128, 129, 1000, 1 << 20, 123456789, 1 << 40} {
			i := h.index(v)
			up := uint64(h.upper(i))
			if up < v {
				t.Fatalf("precision %d: value %d in bucket %d with upper bound %d", p, v, i, up)
			}
			if i > 0 && uint64(h.upper(i-1)) >= v {
				t.Fatalf("precision %d: value %d in bucket %d, but bucket %d reaches %d", p, v, i, i-1, h.upper(i-1))
			}
			if v > 0 && float64(up-v)/float64(v) > 2.0/float64(uint64(1)<<p) {
				t.Fatalf("precision %d: value %d reported as %d", p, v, up)
			}
		}
	}
}

func TestQuantilesMatchSortedValues(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 1))
	h := New(7)
	vs := make([]time.Duration, 100000)
	for i := range vs {
		vs[i] = time.Duration(r.ExpFloat64() * float64(time.Millisecond))
		h.Record(vs[i])
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i] < vs[j] })
	for _, q := range []float64{0.5, 0.99, 0.999, 1} {
		want := vs[int(q*float64(len(vs)))-1]
		got := h.Quantile(q)
		// A bucket of precision 7 spans at most 1/64 of its values: the reported upper bound is
		// within 2/2^7 (1.6 %) of the true value.
		if got < want || float64(got-want) > 2.0/128*float64(want) {
			t.Errorf("q%v: got %v, want %v (within 1.6%%)", q, got, want)
		}
	}
	if h.Max() != vs[len(vs)-1] || h.Count() != uint64(len(vs)) {
		t.Errorf("max %v count %d, want %v %d", h.Max(), h.Count(), vs[len(vs)-1], len(vs))
	}
	m := New(7)
	m.Merge(h)
	m.Merge(h)
	if m.Count() != 2*h.Count() || m.Quantile(0.99) != h.Quantile(0.99) {
		t.Errorf("merge of two copies: count %d p99 %v, want %d %v", m.Count(), m.Quantile(0.99), 2*h.Count(), h.Quantile(0.99))
	}
}

func TestRecordDoesNotAllocate(t *testing.T) {
	h := New(7)
	if a := testing.AllocsPerRun(1000, func() { h.Record(1234 * time.Microsecond) }); a != 0 {
		t.Fatalf("Record allocates %v times, want 0", a)
	}
}

func TestWindowTakesEachIntervalOnce(t *testing.T) {
	w := NewWindow(7)
	if h := w.Take(); h.Count() != 0 || h.Quantile(0.99) != 0 {
		t.Fatalf("empty interval: count %d p99 %v, want 0 0", h.Count(), h.Quantile(0.99))
	}
	for i := 1; i <= 100; i++ {
		w.Record(time.Duration(i) * time.Millisecond)
	}
	h := w.Take()
	if h.Count() != 100 || h.Max() != 100*time.Millisecond {
		t.Fatalf("count %d max %v, want 100 100ms", h.Count(), h.Max())
	}
	if p := h.Quantile(0.99); p < 99*time.Millisecond || p > 101*time.Millisecond {
		t.Fatalf("p99 %v, want about 99ms", p)
	}
	w.Record(time.Microsecond)
	if h := w.Take(); h.Count() != 1 || h.Max() != time.Microsecond {
		t.Fatalf("next interval: count %d max %v, want 1 1µs", h.Count(), h.Max())
	}
}

func TestWindowRecordDoesNotAllocate(t *testing.T) {
	w := NewWindow(7)
	if a := testing.AllocsPerRun(1000, func() { w.Record(1234 * time.Microsecond) }); a != 0 {
		t.Fatalf("Record allocates %v times, want 0", a)
	}
}
