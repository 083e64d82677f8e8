package main

// The cluster scenario's sampling of every node's metrics, and the per-node results from them.

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/tickfence/tickfence/internal/proc"
)

// sampler scrapes every node once a second (concurrently, with a short deadline: a stopped node
// never answers) and keeps the scrapes of the window.
type sampler struct {
	b    *benchCluster
	t0   time.Time
	quit chan struct{}
	wg   sync.WaitGroup

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
	return &sampler{b: b, quit: make(chan struct{}), scrapes: map[string][]scrapeAt{}, note: map[string]string{}}
}

func (s *sampler) start(t0 time.Time) {
	s.t0 = t0
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
				s.scrapeAll()
			}
		}
	}()
}

func (s *sampler) stop() {
	close(s.quit)
	s.wg.Wait()
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
	s.last += fmt.Sprintf(", its instances ticking elsewhere at %.1fs", at)
}

// status is the last second's p99 lateness of each node.
func (s *sampler) status() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var parts []string
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
