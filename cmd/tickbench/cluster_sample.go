package main

// The cluster scenario's sampling of every node's metrics, and the per-node results from them.

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tickfence/tickfence/internal/proc"
)

// sampler scrapes every node once a second (concurrently, with a short deadline: a stopped node
// never answers) and keeps the scrapes of the window; it samples the processes' CPU with them.
type sampler struct {
	b    *benchCluster
	t0   time.Time
	quit chan struct{}
	wg   sync.WaitGroup
	cpu  *cpuMeter

	mu      sync.Mutex
	scrapes map[string][]scrapeAt // by node ID (one process per node in this scenario)
	note    map[string]string
	last    string
}

type scrapeAt struct {
	at float64
	m  proc.Metrics
}

func newSampler(b *benchCluster) *sampler {
	return &sampler{b: b, quit: make(chan struct{}), scrapes: map[string][]scrapeAt{}, note: map[string]string{}, cpu: newCPUMeter(b)}
}

func (s *sampler) start(t0 time.Time) {
	s.t0 = t0
	s.cpu.sample()
	s.scrapeAll()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-s.quit:
				return
			case <-t.C:
				s.cpu.sample()
				s.scrapeAll()
			}
		}
	}()
}

func (s *sampler) stop() {
	close(s.quit)
	s.wg.Wait()
	s.cpu.sample()
	s.scrapeAll()
}

func (s *sampler) scrapeAll() {
	var wg sync.WaitGroup
	for _, id := range s.b.ids {
		n := s.b.Node(id)
		if n == nil || !n.Alive() || n.Stopped() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.final(n)
		}()
	}
	wg.Wait()
}

// final scrapes one node now and keeps the scrape.
func (s *sampler) final(n *proc.Proc) {
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	m, err := n.Scrape(ctx)
	if err != nil {
		return
	}
	at := time.Since(s.t0).Seconds()
	s.mu.Lock()
	s.scrapes[n.Name] = append(s.scrapes[n.Name], scrapeAt{at: at, m: m})
	s.mu.Unlock()
}

// serverKilled notes a server's kill for the status line.
func (s *sampler) serverKilled(name string, at float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = fmt.Sprintf("killed server %s at %.1fs", name, at)
}

func (s *sampler) faulted(node, kind string, at float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	verb := map[string]string{"kill": "killed", "pause": "paused"}[kind]
	s.note[node] = fmt.Sprintf("%s at %.1fs", verb, at)
	s.last = fmt.Sprintf("%s %s at %.1fs", verb, node, at)
}

func (s *sampler) recovered(at float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last += fmt.Sprintf(", recovered at %.1fs", at)
}

// status is the last second's ticks (% of the schedule) and fenced records of the cluster, and
// each node's p99 lateness.
func (s *sampler) status(scheduled float64) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ticks, recs float64
	measured := false
	for _, id := range s.b.ids {
		sc := s.scrapes[id]
		if n := s.b.Node(id); len(sc) < 2 || n == nil || !n.Alive() || n.Stopped() {
			continue
		}
		a, z := sc[len(sc)-2], sc[len(sc)-1]
		if dt := z.at - a.at; dt > 0 {
			ticks += (z.m["tickfence_ticks_total"] - a.m["tickfence_ticks_total"]) / dt
			recs += (z.m[okWrites] - a.m[okWrites]) / dt
			measured = true
		}
	}
	var parts []string
	if measured {
		parts = append(parts, fmt.Sprintf("ticks %.0f%% rec/s %.0f", 100*ticks/scheduled, recs))
	}
	for _, id := range s.b.ids {
		sc := s.scrapes[id]
		if n := s.b.Node(id); len(sc) < 2 || n == nil || !n.Alive() || n.Stopped() {
			continue
		}
		d := proc.Delta(sc[len(sc)-2].m.Histogram("tickfence_tick_lateness_seconds"), sc[len(sc)-1].m.Histogram("tickfence_tick_lateness_seconds"))
		if q := proc.Quantile(d, 0.99); !math.IsNaN(q) {
			parts = append(parts, fmt.Sprintf("%s p99 %.2fms", id, q*1e3))
		}
	}
	if s.last != "" {
		parts = append(parts, "["+s.last+"]")
	}
	return strings.Join(parts, " ")
}

const okWrites = `tickfence_state_writes_total{result="ok"}`

func secs(v float64) time.Duration {
	if math.IsNaN(v) {
		return 0
	}
	return time.Duration(v * 1e9)
}

// results is each node's figures over the window, from its first to its last scrape.
func (s *sampler) results() []nodeResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []nodeResult
	for _, id := range s.b.ids {
		r := nodeResult{ID: id, Note: s.note[id]}
		sc := s.scrapes[id]
		if len(sc) == 0 {
			r.Note += " (never scraped)"
			out = append(out, r)
			continue
		}
		a, z := sc[0], sc[len(sc)-1]
		h := proc.Delta(a.m.Histogram("tickfence_tick_lateness_seconds"), z.m.Histogram("tickfence_tick_lateness_seconds"))
		r.LateP50, r.LateP99 = secs(proc.Quantile(h, 0.5)), secs(proc.Quantile(h, 0.99))
		r.Over10ms = proc.Above(h, 0.01)
		r.Seconds = z.at - a.at
		r.Ticks = z.m["tickfence_ticks_total"] - a.m["tickfence_ticks_total"]
		if r.Seconds > 0 {
			r.TicksPerSec = r.Ticks / r.Seconds
		}
		r.Records = z.m[okWrites] - a.m[okWrites]
		r.Batches = z.m["tickfence_write_batch_records_count"] - a.m["tickfence_write_batch_records_count"]
		r.BatchRecords = z.m["tickfence_write_batch_records_sum"] - a.m["tickfence_write_batch_records_sum"]
		w := proc.Delta(a.m.Histogram("tickfence_state_write_seconds"), z.m.Histogram("tickfence_state_write_seconds"))
		r.WriteP50, r.WriteP99 = secs(proc.Quantile(w, 0.5)), secs(proc.Quantile(w, 0.99))
		r.Skipped = z.m["tickfence_ticks_skipped_total"] - a.m["tickfence_ticks_skipped_total"]
		r.SelfFenced = z.m["tickfence_self_fenced_total"] - a.m["tickfence_self_fenced_total"]
		r.Rotations = z.m["tickfence_token_rotations_total"] - a.m["tickfence_token_rotations_total"]
		r.Instances = int(z.m["tickfence_instances"])
		r.Shards = int(z.m["tickfence_shards_owned"])
		r.StaleRejected = z.m[`tickfence_state_writes_total{result="stale_owner"}`] - a.m[`tickfence_state_writes_total{result="stale_owner"}`]
		for k, v := range z.m {
			if strings.HasPrefix(k, "tickfence_handoffs_total") {
				r.Handoffs += v - a.m[k]
			}
		}
		out = append(out, r)
	}
	return out
}

// series is each node's lateness per second of the window.
func (s *sampler) series() map[string][]latPoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][]latPoint{}
	for id, sc := range s.scrapes {
		for i := 1; i < len(sc); i++ {
			d := proc.Delta(sc[i-1].m.Histogram("tickfence_tick_lateness_seconds"), sc[i].m.Histogram("tickfence_tick_lateness_seconds"))
			if proc.Count(d) == 0 {
				continue
			}
			out[id] = append(out[id], latPoint{At: sc[i].at, P50: secs(proc.Quantile(d, 0.5)), P99: secs(proc.Quantile(d, 0.99))})
		}
	}
	return out
}

// totals adds the nodes' figures up over the window, merging their lateness and write latency
// histograms (the same buckets on every node).
func (s *sampler) totals(nodes []nodeResult, cfg clusterConfig) clusterTotals {
	t := clusterTotals{Scheduled: cfg.scheduled()}
	var ticks float64
	for _, n := range nodes {
		if n.Seconds >= cfg.Duration.Seconds()-2 { // a node killed or frozen before the end served nothing then
			t.Instances += n.Instances
		}
		ticks += n.Ticks
		t.Skipped += n.Skipped
		t.Records += n.Records
		t.Batches += n.Batches
		t.StaleRejected += n.StaleRejected
		t.SelfFenced += n.SelfFenced
		t.Rotations += n.Rotations
		t.Handoffs += n.Handoffs
		t.Over10ms += n.Over10ms
	}
	var batchRecords float64
	for _, n := range nodes {
		batchRecords += n.BatchRecords
	}
	if t.Batches > 0 {
		t.RecordsPerBatch = batchRecords / t.Batches
	}
	if w := cfg.Duration.Seconds(); w > 0 {
		t.TicksPerSec, t.RecordsPerSec = ticks/w, t.Records/w
	}
	if t.Scheduled > 0 {
		t.TicksPct = 100 * t.TicksPerSec / t.Scheduled
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var late, write []proc.Bucket
	for _, id := range s.b.ids {
		sc := s.scrapes[id]
		if len(sc) == 0 {
			continue
		}
		a, z := sc[0], sc[len(sc)-1]
		late = addBuckets(late, proc.Delta(a.m.Histogram("tickfence_tick_lateness_seconds"), z.m.Histogram("tickfence_tick_lateness_seconds")))
		write = addBuckets(write, proc.Delta(a.m.Histogram("tickfence_state_write_seconds"), z.m.Histogram("tickfence_state_write_seconds")))
	}
	t.LateP50, t.LateP99 = secs(proc.Quantile(late, 0.5)), secs(proc.Quantile(late, 0.99))
	t.WriteP50, t.WriteP99 = secs(proc.Quantile(write, 0.5)), secs(proc.Quantile(write, 0.99))
	return t
}

// addBuckets adds the counts of two cumulative histograms bucket by bucket (by upper bound; a
// bound only one of them has keeps its count).
func addBuckets(a, b []proc.Bucket) []proc.Bucket {
	byLE := map[float64]float64{}
	for _, x := range a {
		byLE[x.LE] += x.Count
	}
	for _, x := range b {
		byLE[x.LE] += x.Count
	}
	out := make([]proc.Bucket, 0, len(byLE))
	for le, c := range byLE {
		out = append(out, proc.Bucket{LE: le, Count: c})
	}
	slices.SortFunc(out, func(x, y proc.Bucket) int { return cmp.Compare(x.LE, y.LE) })
	return out
}

// tickPoint is the cluster's ticks in one second of the window.
type tickPoint struct {
	At    float64 `json:"t_s"` // the second's start
	Ticks float64 `json:"ticks"`
}

// tickSeries is the cluster's ticks in each whole second of the window, from every node's
// counter: the ticks between two scrapes are spread evenly over the time between them.
func (s *sampler) tickSeries(window time.Duration) []tickPoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	counts := map[string][]counterAt{}
	for id, sc := range s.scrapes {
		for _, x := range sc {
			counts[id] = append(counts[id], counterAt{x.at, x.m["tickfence_ticks_total"]})
		}
	}
	return binCounters(counts, int(window.Seconds()))
}

type counterAt struct {
	at float64 // s since the window opened
	v  float64
}

// binCounters spreads the increase of each counter between consecutive samples evenly over the
// time between them and adds it up per second [k, k+1), for k in 0 … bins-1.
func binCounters(series map[string][]counterAt, bins int) []tickPoint {
	out := make([]tickPoint, max(bins, 0))
	for k := range out {
		out[k].At = float64(k)
	}
	for _, sc := range series {
		for i := 1; i < len(sc); i++ {
			t0, t1 := sc[i-1].at, sc[i].at
			if t1 <= t0 {
				continue
			}
			rate := (sc[i].v - sc[i-1].v) / (t1 - t0)
			for k := max(0, int(math.Floor(t0))); k < bins && float64(k) < t1; k++ {
				if o := math.Min(t1, float64(k+1)) - math.Max(t0, float64(k)); o > 0 {
					out[k].Ticks += rate * o
				}
			}
		}
	}
	return out
}

// tickDip is the lowest second of ticks from the second holding at on, in % of scheduled ticks/s,
// and how many of those seconds were under 90 %.
func tickDip(series []tickPoint, at, scheduled float64) (minPct float64, below90 int) {
	minPct = math.NaN()
	for _, p := range series {
		if p.At+1 <= at || scheduled <= 0 {
			continue
		}
		pct := 100 * p.Ticks / scheduled
		if math.IsNaN(minPct) || pct < minPct {
			minPct = pct
		}
		if pct < 90 {
			below90++
		}
	}
	if math.IsNaN(minPct) {
		minPct = 0
	}
	return minPct, below90
}
