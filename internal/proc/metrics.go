package proc

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics is one scrape in the Prometheus text format: sample (name with its labels in the
// exposition's form, e.g. `tickfence_state_writes_total{result="ok"}`; a histogram as its
// name_bucket{le="..."}, name_sum and name_count samples) → value.
type Metrics map[string]float64

// ParseMetrics parses the Prometheus text exposition format with prometheus/common's parser. A
// text it cannot parse gives the samples read before the error.
func ParseMetrics(text string) Metrics {
	m := Metrics{}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, _ := p.TextToMetricFamilies(strings.NewReader(text))
	for name, f := range fams {
		for _, s := range f.GetMetric() {
			key := func(suffix string, extra ...string) string {
				var ls []string
				for _, l := range s.GetLabel() {
					ls = append(ls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
				}
				ls = append(ls, extra...)
				if len(ls) == 0 {
					return name + suffix
				}
				return name + suffix + "{" + strings.Join(ls, ",") + "}"
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				m[key("")] = s.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				m[key("")] = s.GetGauge().GetValue()
			case dto.MetricType_UNTYPED:
				m[key("")] = s.GetUntyped().GetValue()
			case dto.MetricType_HISTOGRAM:
				h := s.GetHistogram()
				for _, b := range h.GetBucket() {
					m[key("_bucket", fmt.Sprintf("le=%q", formatBound(b.GetUpperBound())))] = float64(b.GetCumulativeCount())
				}
				m[key("_bucket", `le="+Inf"`)] = float64(h.GetSampleCount())
				m[key("_sum")] = h.GetSampleSum()
				m[key("_count")] = float64(h.GetSampleCount())
			case dto.MetricType_SUMMARY:
				m[key("_sum")] = s.GetSummary().GetSampleSum()
				m[key("_count")] = float64(s.GetSummary().GetSampleCount())
			}
		}
	}
	return m
}

func formatBound(b float64) string {
	if math.IsInf(b, 1) {
		return "+Inf"
	}
	return strconv.FormatFloat(b, 'g', -1, 64)
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

// OverBoundUnder counts the observations over the largest bucket bound at or under x (all of
// them if there is none): at least those over x, exactly those where x is a bound. Above rounds
// the other way: over the smallest bound at or above x, at most those over x.
func OverBoundUnder(h []Bucket, x float64) float64 {
	under := 0.0
	for _, b := range h {
		if b.LE <= x {
			under = b.Count
		}
	}
	return Count(h) - under
}

// Int64 reads a whole number from a decoded value: a JSON log field (float64) or a field of a
// msgpack reply (any integer type).
func Int64(v any) (int64, bool) {
	switch x := v.(type) {
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case int:
		return int64(x), true
	case uint8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case uint64:
		return int64(x), true
	case float64:
		return int64(x), true
	}
	return 0, false
}
