package deploy_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	promqlengine "github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"

	"github.com/tickfence/tickfence/deploy"
)

// memStorage holds series in memory for the query engine: a storage.Queryable over a few series
// written in the notation of promtool's rule tests ("metric{l="v"} 0+10x10": one sample a minute).
type memStorage struct{ series []storage.Series }

func loadSeries(t *testing.T, text string) *memStorage {
	t.Helper()
	m := &memStorage{}
	for _, line := range strings.Split(text, "\n") {
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		lset, vals, err := promql.ParseSeriesDesc(line)
		if err != nil {
			t.Fatalf("series %q: %v", line, err)
		}
		var ss []chunks.Sample
		for i, v := range vals {
			if !v.Omitted {
				ss = append(ss, fSample{t: int64(i) * time.Minute.Milliseconds(), f: v.Value})
			}
		}
		m.series = append(m.series, storage.NewListSeries(lset, ss))
	}
	return m
}

func (m *memStorage) Querier(int64, int64) (storage.Querier, error) {
	return &storage.MockQuerier{SelectMockFunction: func(_ bool, _ *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
		var out []storage.Series
		for _, s := range m.series {
			ok := true
			for _, mt := range ms {
				ok = ok && mt.Matches(s.Labels().Get(mt.Name))
			}
			if ok {
				out = append(out, s)
			}
		}
		return &listSet{series: out, i: -1}
	}}, nil
}

type listSet struct {
	series []storage.Series
	i      int
}

func (l *listSet) Next() bool                        { l.i++; return l.i < len(l.series) }
func (l *listSet) At() storage.Series                { return l.series[l.i] }
func (l *listSet) Err() error                        { return nil }
func (l *listSet) Warnings() annotations.Annotations { return nil }

type fSample struct {
	t int64
	f float64
}

func (s fSample) T() int64                      { return s.t }
func (s fSample) ST() int64                     { return 0 }
func (s fSample) F() float64                    { return s.f }
func (s fSample) H() *histogram.Histogram       { return nil }
func (s fSample) FH() *histogram.FloatHistogram { return nil }
func (s fSample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
func (s fSample) Copy() chunks.Sample           { return s }

// TestAlertsFire evaluates each alert's expression with the Prometheus query engine on series
// loaded as a scrape of 1-minute samples would store them: it returns a series (the alert is
// pending, then firing once its for: has passed) on a sick cluster and none on a healthy one. An
// alert that could never fire, or that fires on a healthy cluster, fails here.
func TestAlertsFire(t *testing.T) {
	groups, errs := rulefmt.Parse(deploy.Alerts, false, model.LegacyValidation, promql, slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	exprs := map[string]string{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			exprs[r.Alert] = r.Expr
		}
	}
	cases := []struct {
		alert, sick, healthy string
	}{
		{"TickfenceNodeSelfFenced",
			`tickfence_self_fenced_total{instance="n1"} 0x7 1 1 1`,
			`tickfence_self_fenced_total{instance="n1"} 0x10`},
		{"TickfenceStaleOwnerRejections",
			`tickfence_state_writes_total{instance="n1",result="stale_owner"} 0x7 2 2 2
			 tickfence_state_writes_total{instance="n1",result="ok"} 0+100x10`,
			`tickfence_state_writes_total{instance="n1",result="stale_owner"} 0x10
			 tickfence_state_writes_total{instance="n1",result="ok"} 0+100x10`},
		{"TickfenceTickLatenessOverBudget", // most ticks start more than one 50 ms period late, or almost all on time
			`tickfence_tick_lateness_seconds_bucket{instance="n1",le="0.05"} 0+10x10
			 tickfence_tick_lateness_seconds_bucket{instance="n1",le="0.1"} 0+1000x10
			 tickfence_tick_lateness_seconds_bucket{instance="n1",le="+Inf"} 0+1000x10
			 tickfence_tick_period_seconds{instance="n1"} 0.05x10`,
			`tickfence_tick_lateness_seconds_bucket{instance="n1",le="0.05"} 0+1000x10
			 tickfence_tick_lateness_seconds_bucket{instance="n1",le="0.1"} 0+1000x10
			 tickfence_tick_lateness_seconds_bucket{instance="n1",le="+Inf"} 0+1000x10
			 tickfence_tick_period_seconds{instance="n1"} 0.05x10`},
		{"TickfenceShardUnowned", // the leader n1 has seen a shard unowned for 5 s with a 2 s lease, or for 1 s
			`tickfence_shard_unowned_max_seconds{instance="n1"} 5x10
			 tickfence_lease_ttl_seconds{instance="n1"} 2x10
			 tickfence_shard_unowned_max_seconds{instance="n2"} 0x10
			 tickfence_lease_ttl_seconds{instance="n2"} 2x10`,
			`tickfence_shard_unowned_max_seconds{instance="n1"} 1x10
			 tickfence_lease_ttl_seconds{instance="n1"} 2x10
			 tickfence_shard_unowned_max_seconds{instance="n2"} 0x10
			 tickfence_lease_ttl_seconds{instance="n2"} 2x10`},
		{"TickfenceNoCoordinator",
			`tickfence_coordinator_leader{instance="n1"} 0x10
			 tickfence_coordinator_leader{instance="n2"} 0x10`,
			`tickfence_coordinator_leader{instance="n1"} 1x10
			 tickfence_coordinator_leader{instance="n2"} 0x10`},
		{"TickfenceNoCoordinator", // no node scraped at all
			`tickfence_ticks_total{instance="n1"} 0x2`,
			`tickfence_coordinator_leader{instance="n1"} 1x10`},
		{"TickfenceLeaderFlapping", // elections every minute, or one at start
			`tickfence_coordinator_elections_total{instance="n1"} 0+1x10
			 tickfence_coordinator_elections_total{instance="n2"} 0+1x10`,
			`tickfence_coordinator_elections_total{instance="n1"} 1x10
			 tickfence_coordinator_elections_total{instance="n2"} 0x10`},
		{"TickfenceInstanceFailed", // one instance failed on n2 for minutes, or none anywhere
			`tickfence_instances_failed{instance="n1"} 0x10
			 tickfence_instances_failed{instance="n2"} 0x5 1x5`,
			`tickfence_instances_failed{instance="n1"} 0x10
			 tickfence_instances_failed{instance="n2"} 0x10`},
		{"TickfenceEffectsBacklog", // effects held and none published, or held while they flow
			`tickfence_effects_pending{instance="n1"} 5x10
			 tickfence_effects_published_total{instance="n1"} 7x10`,
			`tickfence_effects_pending{instance="n1"} 5x10
			 tickfence_effects_published_total{instance="n1"} 0+30x10`},
		{"TickfenceNATSSlowConsumer", // a client cut off in the last minutes, or one long ago
			`tickfence_nats_slow_consumers_total{instance="s1"} 0x8 1 1`,
			`tickfence_nats_slow_consumers_total{instance="s1"} 1x10`},
		{"TickfenceNATSClientBacklog", // 40 MiB held for one client, or 2 MiB
			`tickfence_nats_pending_bytes_max{instance="s1"} 41943040x10`,
			`tickfence_nats_pending_bytes_max{instance="s1"} 2097152x10`},
	}
	engine := promqlengine.NewEngine(promqlengine.EngineOpts{MaxSamples: 1e6, Timeout: time.Minute})
	defer engine.Close()
	at := time.Unix(0, 0).Add(10 * time.Minute)
	eval := func(t *testing.T, expr, series string) promqlengine.Vector {
		t.Helper()
		q, err := engine.NewInstantQuery(context.Background(), loadSeries(t, series), nil, expr, at)
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		defer q.Close()
		res := q.Exec(context.Background())
		v, err := res.Vector()
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		return v
	}
	seen := map[string]bool{}
	for _, c := range cases {
		expr, ok := exprs[c.alert]
		if !ok {
			t.Fatalf("no alert %s in the rules", c.alert)
		}
		seen[c.alert] = true
		t.Run(c.alert, func(t *testing.T) {
			if v := eval(t, expr, c.sick); len(v) == 0 {
				t.Errorf("sick cluster: %s returned nothing; the alert would not fire", expr)
			} else {
				t.Logf("sick: %v", v)
			}
			if v := eval(t, expr, c.healthy); len(v) != 0 {
				t.Errorf("healthy cluster: %s returned %v; the alert would fire", expr, v)
			}
		})
	}
	for name := range exprs {
		if !seen[name] {
			t.Errorf("alert %s has no case here", name)
		}
	}
}
