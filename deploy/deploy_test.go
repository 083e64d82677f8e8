package deploy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/tickfence/tickfence"
	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/actor/dungeon"
	"github.com/tickfence/tickfence/deploy"
)

// recorder is a registry that remembers every collector registered on it, so the test can ask
// each for its descriptors: a metric vector with no label values yet (tickfence_commands_total
// before the first command) is described but not gathered.
type recorder struct {
	*prometheus.Registry
	mu         sync.Mutex
	collectors []prometheus.Collector
}

func (r *recorder) Register(c prometheus.Collector) error {
	r.mu.Lock()
	r.collectors = append(r.collectors, c)
	r.mu.Unlock()
	return r.Registry.Register(c)
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// exportedSeries starts a real node (embedded NATS JetStream, the coordinator, the command
// transport, frames and effects) on a recording registry that also holds the Go and process
// collectors cmd/tickd registers beside it, and returns every series name a query may select:
// a counter's or gauge's name, and a histogram's _bucket, _sum and _count (never its bare name,
// which selects nothing for a classic histogram).
func exportedSeries(t *testing.T) map[string]bool {
	t.Helper()
	rec := &recorder{Registry: prometheus.NewRegistry()}
	rec.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})) // as cmd/tickd does
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := tickfence.Start(ctx, tickfence.Options{Kinds: []actor.Kind{dungeon.Kind{}}, NodeID: "n1", DataDir: t.TempDir(),
		Shards: 4, Registerer: rec, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	types := map[string]dto.MetricType{}
	mfs, err := rec.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		types[mf.GetName()] = mf.GetType()
	}
	rec.mu.Lock()
	cs := append([]prometheus.Collector(nil), rec.collectors...)
	rec.mu.Unlock()
	described := map[string]bool{}
	for _, c := range cs {
		ch := make(chan *prometheus.Desc)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			if m := fqName.FindStringSubmatch(d.String()); m != nil {
				described[m[1]] = true
			}
		}
	}
	names := map[string]bool{}
	for name := range described {
		switch types[name] {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			names[name+"_bucket"], names[name+"_sum"], names[name+"_count"] = true, true, true
		case dto.MetricType_SUMMARY:
			names[name], names[name+"_sum"], names[name+"_count"] = true, true, true
		default: // counters, gauges, and vectors never observed (none of them a histogram today)
			names[name] = true
		}
	}
	for name := range types {
		if !described[name] {
			t.Fatalf("%s is gathered but no collector describes it", name)
		}
	}
	for _, want := range []string{"tickfence_ticks_total", "tickfence_tick_lateness_seconds_bucket", "tickfence_commands_total",
		"tickfence_shard_stops_total", "tickfence_coordinator_elections_total", "tickfence_shards_unowned",
		"tickfence_tick_period_seconds", "process_cpu_seconds_total"} {
		if !names[want] {
			t.Fatalf("the node's registry has no %s; its series: %v", want, sorted(names))
		}
	}
	return names
}

func sorted(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

var promql = parser.NewParser(parser.Options{})

// checkExpr parses expr as PromQL and reports every selector that names no exported series (or
// no metric at all).
func checkExpr(where, expr string, names map[string]bool) []error {
	e, err := promql.ParseExpr(expr)
	if err != nil {
		return []error{fmt.Errorf("%s: %q does not parse: %w", where, expr, err)}
	}
	var errs []error
	parser.Inspect(e, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == model.MetricNameLabel && m.Type.String() == "=" {
				name = m.Value
			}
		}
		switch {
		case name == "":
			errs = append(errs, fmt.Errorf("%s: selector %s names no metric", where, vs))
		case !names[name]:
			errs = append(errs, fmt.Errorf("%s: %s is not a series tickfence exports", where, name))
		}
		return nil
	})
	return errs
}

// Grafana's variables, as a query sees them once Grafana has interpolated them.
var grafanaVars = regexp.MustCompile(`\$__rate_interval|\$__interval|\$__range|\$\{[A-Za-z_]\w*(:\w+)?\}|\$[A-Za-z_]\w*`)

func interpolate(expr string) string {
	return grafanaVars.ReplaceAllStringFunc(expr, func(v string) string {
		switch v {
		case "$__rate_interval", "$__interval":
			return "1m"
		case "$__range":
			return "1h"
		}
		return "value" // a label value: the dashboard uses its variables only inside matchers
	})
}

var labelValues = regexp.MustCompile(`^label_values\((.+),\s*([A-Za-z_]\w*)\)$`)

// checkGrafanaSchema decodes the dashboard strictly with the Grafana Foundation SDK, whose types are
// generated from Grafana's own dashboard and panel schemas (with its panel and query plugins
// registered: timeseries, stat, heatmap, prometheus): an unknown field, a wrong type or a missing
// required field is an error; then the SDK's validation.
func checkGrafanaSchema(b []byte) []error {
	plugins.RegisterDefaultPlugins()
	var d dashboard.Dashboard
	// A nil cog.BuildErrors comes back as a non-nil error with an empty message.
	if err := d.UnmarshalJSONStrict(b); err != nil && err.Error() != "" {
		return []error{fmt.Errorf("grafana schema: %w", err)}
	}
	if err := d.Validate(); err != nil && err.Error() != "" {
		return []error{fmt.Errorf("grafana schema: %w", err)}
	}
	if d.Title == nil || len(d.Panels) == 0 {
		return []error{errors.New("grafana schema: no title or no panels decoded")}
	}
	return nil
}

// checkDashboard checks the dashboard JSON: Grafana's schema, its shape (a datasource variable every panel
// uses, unique panel IDs, the panels the operators asked for) and every query.
func checkDashboard(b []byte, names map[string]bool) []error {
	var d struct {
		UID           string `json:"uid"`
		Title         string `json:"title"`
		SchemaVersion int    `json:"schemaVersion"`
		Templating    struct {
			List []struct {
				Name       string          `json:"name"`
				Type       string          `json:"type"`
				Query      json.RawMessage `json:"query"`
				Definition string          `json:"definition"`
				Datasource *struct {
					UID string `json:"uid"`
				} `json:"datasource"`
			} `json:"list"`
		} `json:"templating"`
		Panels []panel `json:"panels"`
	}
	errs := checkGrafanaSchema(b)
	if err := json.Unmarshal(b, &d); err != nil {
		return append(errs, fmt.Errorf("dashboard: %w", err))
	}
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if d.UID == "" || d.Title == "" || d.SchemaVersion < 36 { // 36: Grafana 9.4, the schema of 10 and later
		fail("dashboard: uid %q, title %q, schemaVersion %d; want both set and a Grafana 10 schema", d.UID, d.Title, d.SchemaVersion)
	}
	hasDS := false
	for _, v := range d.Templating.List {
		switch v.Type {
		case "datasource":
			var q string
			_ = json.Unmarshal(v.Query, &q)
			hasDS = hasDS || v.Name == "datasource" && q == "prometheus"
		case "query":
			var q struct {
				Query string `json:"query"`
			}
			if json.Unmarshal(v.Query, &q) != nil {
				_ = json.Unmarshal(v.Query, &q.Query)
			}
			if v.Definition != q.Query {
				fail("variable %s: definition %q is not its query %q", v.Name, v.Definition, q.Query)
			}
			m := labelValues.FindStringSubmatch(q.Query)
			if m == nil {
				fail("variable %s: query %q is not label_values(selector, label)", v.Name, q.Query)
				continue
			}
			if v.Datasource == nil || v.Datasource.UID != "${datasource}" {
				fail("variable %s: its datasource is not ${datasource}", v.Name)
			}
			errs = append(errs, checkExpr("variable "+v.Name, interpolate(m[1]), names)...)
		}
	}
	if !hasDS {
		fail("dashboard: no datasource variable named datasource of type prometheus")
	}
	ids := map[int]bool{}
	titles := map[string]string{}
	queries := 0
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] {
				fail("panel %q: id %d used twice", p.Title, p.ID)
			}
			ids[p.ID] = true
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			titles[p.Title] = p.Type
			if p.Datasource.UID != "${datasource}" {
				fail("panel %q: datasource %q; want ${datasource}", p.Title, p.Datasource.UID)
			}
			if len(p.Targets) == 0 {
				fail("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				if tg.Expr == "" || tg.RefID == "" {
					fail("panel %q: a target without expr or refId", p.Title)
					continue
				}
				queries++
				errs = append(errs, checkExpr(fmt.Sprintf("panel %q", p.Title), interpolate(tg.Expr), names)...)
			}
		}
	}
	walk(d.Panels)
	for title, typ := range map[string]string{"Ticks/s": "timeseries", "Tick lateness": "heatmap", "State writes by result": "timeseries",
		"Stale-owner rejections": "timeseries", "Token rotations": "timeseries", "Failovers and hand-offs": "timeseries",
		"Hand-off pause": "timeseries", "Command latency": "timeseries", "Effects backlog": "timeseries"} {
		if titles[title] != typ {
			fail("dashboard: no %s panel %q", typ, title)
		}
	}
	if queries < 20 {
		fail("dashboard: only %d queries checked", queries)
	}
	return errs
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a row's
}

// checkAlerts validates the rule file as Prometheus loads it (rulefmt: YAML fields, PromQL,
// templates), then checks every expression's metrics and that each alert says what to do.
func checkAlerts(b []byte, names map[string]bool) []error {
	groups, errs := rulefmt.Parse(b, false, model.LegacyValidation, promql, slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		return errs
	}
	seen := map[string]bool{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			where := fmt.Sprintf("alert %s", r.Alert)
			if r.Alert == "" {
				where = "recording rule " + r.Record
			}
			seen[r.Alert] = true
			errs = append(errs, checkExpr(where, r.Expr, names)...)
			if r.Alert == "" {
				continue
			}
			if !slices.Contains([]string{"critical", "warning", "info"}, r.Labels["severity"]) {
				errs = append(errs, fmt.Errorf("%s: severity %q; want critical, warning or info", where, r.Labels["severity"]))
			}
			if len(r.Annotations["summary"]) < 20 || len(r.Annotations["description"]) < 80 {
				errs = append(errs, fmt.Errorf("%s: needs a summary and a description an on-call can act on", where))
			}
		}
	}
	for _, want := range []string{"TickfenceNodeSelfFenced", "TickfenceStaleOwnerRejections", "TickfenceTickLatenessOverBudget",
		"TickfenceShardUnowned", "TickfenceLeaderFlapping"} {
		if !seen[want] {
			errs = append(errs, fmt.Errorf("rules: no alert %s", want))
		}
	}
	return errs
}

// TestDashboardAndAlerts: every panel query, variable query and alert expression parses as PromQL
// and selects only series a real node exports; the rule file passes Prometheus's own rule-file
// validation. Broken copies show each check can fail.
func TestDashboardAndAlerts(t *testing.T) {
	names := exportedSeries(t)
	t.Logf("%d series names exported", len(names))
	t.Run("dashboard", func(t *testing.T) {
		for _, err := range checkDashboard(deploy.Dashboard, names) {
			t.Error(err)
		}
	})
	t.Run("alerts", func(t *testing.T) {
		for _, err := range checkAlerts(deploy.Alerts, names) {
			t.Error(err)
		}
	})
	broken := []struct {
		name, file, from, to, want string
	}{
		{"misspelled metric in a panel", "dashboard", "tickfence_token_rotations_total", "tickfence_token_rotation_total",
			"tickfence_token_rotation_total is not a series tickfence exports"},
		{"histogram's bare name in a panel", "dashboard", "tickfence_command_seconds_bucket", "tickfence_command_seconds",
			"tickfence_command_seconds is not a series"},
		{"PromQL syntax error in a panel", "dashboard", "histogram_quantile(0.99, sum by (instance, le)", "histogram_quantile(0.99, sum by (instance, le",
			"does not parse"},
		{"misspelled metric in a variable", "dashboard", "label_values(tickfence_ticks_total, job)", "label_values(tickfence_tick_total, job)",
			"variable job: tickfence_tick_total is not a series"},
		{"field of the wrong type (Grafana's schema)", "dashboard", `"schemaVersion": 39`, `"schemaVersion": "39"`,
			"schemaVersion: json: cannot unmarshal string"},
		{"misspelled panel field (Grafana's schema)", "dashboard", `"gridPos"`, `"gridPoz"`, "unexpected field 'gridPoz'"},
		{"panel without the datasource variable", "dashboard", `"uid": "${datasource}"`, `"uid": "prom-1"`, "want ${datasource}"},
		{"misspelled metric in an alert", "alerts", "tickfence_self_fenced_total", "tickfence_self_fence_total",
			"alert TickfenceNodeSelfFenced: tickfence_self_fence_total is not a series"},
		{"PromQL syntax error in an alert", "alerts", "> 4", "> > 4", "could not parse expression"},
		{"bad duration", "alerts", "for: 10m", "for: 10 minutes", "10 minutes"},
		{"unknown field", "alerts", "for: 1m", "fore: 1m", "field fore not found"},
		{"broken template", "alerts", "{{ $labels.instance }} self-fenced", "{{ $labels.instance } self-fenced", "annotation \"summary\""},
		{"alert without a description", "alerts", "description: >-\n            {{ $labels.instance }} stopped", "runbook: >-\n            {{ $labels.instance }} stopped",
			"needs a summary and a description"},
	}
	for _, b := range broken {
		t.Run("catches "+b.name, func(t *testing.T) {
			src, check := deploy.Dashboard, checkDashboard
			if b.file == "alerts" {
				src, check = deploy.Alerts, checkAlerts
			}
			if !strings.Contains(string(src), b.from) {
				t.Fatalf("the %s has no %q to break", b.file, b.from)
			}
			errs := check([]byte(strings.ReplaceAll(string(src), b.from, b.to)), names)
			var msgs []string
			for _, err := range errs {
				msgs = append(msgs, err.Error())
			}
			if !strings.Contains(strings.Join(msgs, "\n"), b.want) {
				t.Fatalf("the %s with %q replaced by %q: errors %q; want one with %q", b.file, b.from, b.to, msgs, b.want)
			}
		})
	}
}
