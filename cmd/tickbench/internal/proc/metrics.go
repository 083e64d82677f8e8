package proc

import (
	"math"
	"sort"
	"strconv"
	"strings"
)

// Metrics is one scrape in the Prometheus text format: sample (name with its labels exactly as
// exposed, e.g. `tickfence_state_writes_total{result="ok"}`) → value.
type Metrics map[string]float64

// ParseMetrics parses the Prometheus text exposition format (comments skipped).
func ParseMetrics(text string) Metrics {
	m := Metrics{}
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		// The value follows the last space outside the labels; label values never hold '}'
		// in tickfence's metrics, so split after the closing brace if there is one.
		rest := line
		name := ""
		if i := strings.IndexByte(line, '}'); i >= 0 {
			name, rest = line[:i+1], strings.TrimSpace(line[i+1:])
		} else if i := strings.IndexByte(line, ' '); i >= 0 {
			name, rest = line[:i], strings.TrimSpace(line[i+1:])
		} else {
			continue
		}
		if f := strings.Fields(rest); len(f) > 0 { // a timestamp may follow the value
			if v, err := strconv.ParseFloat(f[0], 64); err == nil {
				m[name] = v
			}
		}
	}
	return m
}

// Bucket is one cumulative histogram bucket: Count observations at most LE.
type Bucket struct {
	LE    float64
	Count float64
}

// Histogram returns the cumulative buckets of a histogram without other labels, sorted by bound
// (the last one is +Inf).
func (m Metrics) Histogram(name string) []Bucket {
	prefix := name + `_bucket{le="`
	var out []Bucket
	for k, v := range m {
		le, ok := strings.CutPrefix(k, prefix)
		if !ok {
			continue
		}
		le = strings.TrimSuffix(le, `"}`)
		b, err := strconv.ParseFloat(le, 64) // "+Inf" parses as +Inf
		if err != nil {
			continue
		}
		out = append(out, Bucket{LE: b, Count: v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].LE < out[j].LE })
	return out
}

// Delta is the histogram of the observations between two scrapes of the same process (before may
// be nil: since the start).
func Delta(before, after []Bucket) []Bucket {
	out := make([]Bucket, len(after))
	for i, b := range after {
		out[i] = b
		for _, a := range before {
			if a.LE == b.LE {
				out[i].Count = b.Count - a.Count
			}
		}
	}
	return out
}

// Count is the number of observations in cumulative buckets.
func Count(h []Bucket) float64 {
	if len(h) == 0 {
		return 0
	}
	return h[len(h)-1].Count
}

// Quantile estimates the q-quantile of cumulative buckets as Prometheus's histogram_quantile
// does: linear interpolation inside the bucket holding the rank (the first bucket's lower bound
// is 0); a rank in the +Inf bucket returns the largest finite bound. NaN if there are no
// observations.
func Quantile(h []Bucket, q float64) float64 {
	n := Count(h)
	if n <= 0 {
		return math.NaN()
	}
	rank := q * n
	lower, below := 0.0, 0.0
	for _, b := range h {
		if b.Count >= rank {
			if math.IsInf(b.LE, 1) {
				return lower
			}
			if b.Count == below {
				return b.LE
			}
			return lower + (b.LE-lower)*(rank-below)/(b.Count-below)
		}
		lower, below = b.LE, b.Count
	}
	return lower
}

// Above is the number of observations above bound (a bucket boundary).
func Above(h []Bucket, bound float64) float64 {
	for _, b := range h {
		if b.LE >= bound {
			return Count(h) - b.Count
		}
	}
	return 0
}
