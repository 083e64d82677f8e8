// Package hdr is a high-dynamic-range latency histogram: log-linear buckets with a bounded
// relative error, recorded with one atomic add and no allocation, so that many goroutines can
// record into it (or into stripes of it) on a hot path and quantiles stay honest up to the max.
package hdr

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// Histogram counts durations (nanoseconds) in buckets whose width is at most 1/2^(precision-1)
// of their value. The zero value is not usable; make one with New.
type Histogram struct {
	bits   uint // sub-bucket bits: 2^bits linear buckets below 2^bits ns, 2^(bits-1) per doubling above
	counts []atomic.Uint64
	total  atomic.Uint64
	sum    atomic.Uint64
	max    atomic.Int64
}

// New makes a histogram with 2^precision sub-buckets (7: under 1 % error, 2.3k buckets; 4: under
// 13 %, 300 buckets), covering 0 to about 2^40 ns (18 minutes); larger values land in the top
// bucket (the max stays exact).
func New(precision uint) *Histogram {
	h := &Histogram{bits: precision}
	h.counts = make([]atomic.Uint64, h.index(1<<40)+1)
	return h
}

func (h *Histogram) index(v uint64) int {
	sub := uint64(1) << h.bits
	if v < sub {
		return int(v)
	}
	e := uint(bits.Len64(v)) - h.bits // >= 1
	m := v >> e                       // in [sub/2, sub)
	return int(sub + uint64(e-1)*(sub/2) + (m - sub/2))
}

// upper is the largest value that lands in bucket i.
func (h *Histogram) upper(i int) int64 {
	sub := 1 << h.bits
	if i < sub {
		return int64(i)
	}
	e := uint((i-sub)/(sub/2)) + 1
	m := uint64((i-sub)%(sub/2) + sub/2)
	return int64((m+1)<<e) - 1
}

// Record counts one duration; negative ones count as 0.
func (h *Histogram) Record(d time.Duration) {
	v := uint64(max(d, 0))
	i := h.index(v)
	if i >= len(h.counts) {
		i = len(h.counts) - 1
	}
	h.counts[i].Add(1)
	h.total.Add(1)
	h.sum.Add(v)
	for {
		m := h.max.Load()
		if int64(v) <= m || h.max.CompareAndSwap(m, int64(v)) {
			break
		}
	}
}

// Merge adds o's counts (same precision) to h.
func (h *Histogram) Merge(o *Histogram) {
	for i := range o.counts {
		if c := o.counts[i].Load(); c != 0 {
			h.counts[i].Add(c)
		}
	}
	h.total.Add(o.total.Load())
	h.sum.Add(o.sum.Load())
	if m := o.max.Load(); m > h.max.Load() {
		h.max.Store(m)
	}
}

// Reset forgets everything (not atomic with concurrent Records).
func (h *Histogram) Reset() {
	for i := range h.counts {
		h.counts[i].Store(0)
	}
	h.total.Store(0)
	h.sum.Store(0)
	h.max.Store(0)
}

// Count is the number of values recorded.
func (h *Histogram) Count() uint64 { return h.total.Load() }

// Max is the largest value recorded (exact).
func (h *Histogram) Max() time.Duration { return time.Duration(h.max.Load()) }

// Mean is the average value recorded.
func (h *Histogram) Mean() time.Duration {
	n := h.total.Load()
	if n == 0 {
		return 0
	}
	return time.Duration(h.sum.Load() / n)
}

// Quantile is the q-quantile (0 < q <= 1): the upper bound of the bucket holding the
// ceil(q*count)-th value, capped at the max.
func (h *Histogram) Quantile(q float64) time.Duration {
	n := h.total.Load()
	if n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(n)))
	if rank == 0 {
		rank = 1
	}
	var seen uint64
	for i := range h.counts {
		seen += h.counts[i].Load()
		if seen >= rank {
			return min(time.Duration(h.upper(i)), h.Max())
		}
	}
	return h.Max()
}

// Window is a Histogram read and restarted once per interval (a summary line, a lease renewal):
// Record from any goroutine, lock-free; Take returns what was recorded since the previous Take
// and starts a fresh histogram. A Record racing a Take lands in one interval or the next.
type Window struct {
	precision uint
	cur       atomic.Pointer[Histogram]
}

// NewWindow makes a window of histograms of the given precision (see New).
func NewWindow(precision uint) *Window {
	w := &Window{precision: precision}
	w.cur.Store(New(precision))
	return w
}

// Record counts one duration in the current interval.
func (w *Window) Record(d time.Duration) { w.cur.Load().Record(d) }

// Take returns the values recorded since the previous Take (or since NewWindow) and starts a new
// interval.
func (w *Window) Take() *Histogram { return w.cur.Swap(New(w.precision)) }
