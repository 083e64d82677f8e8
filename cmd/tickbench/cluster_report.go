package main

// The cluster scenario's report: the table and the plot.

import (
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// printCluster prints the report as tables and lines.
func printCluster(w io.Writer, rep clusterReport) {
	cpu := map[string]float64{}
	for _, p := range rep.CPU.Procs {
		cpu[p.Name] = p.CPU
	}
	fmt.Fprintln(w, "per node over the window (Prometheus deltas; lateness interpolated in its histogram's buckets):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "node\tinstances\tshards\tticks/s\tlate p50 ms\tp99 ms\tticks >10ms\trecords/s\trec/batch\twrite p99 ms\tstale rejected\tself-fenced\trotations\thand-offs\tCPU %\tscraped s\t\t")
	for _, n := range rep.Nodes {
		recs, perBatch := 0.0, "-"
		if n.Seconds > 0 {
			recs = n.Records / n.Seconds
		}
		if n.Batches > 0 {
			perBatch = fmt.Sprintf("%.1f", n.BatchRecords/n.Batches)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%s\t%s\t%.0f\t%.0f\t%s\t%s\t%.0f\t%.0f\t%.0f\t%.0f\t%s\t%.1f\t%s\t\n", n.ID, n.Instances, n.Shards, n.TicksPerSec,
			ms(n.LateP50), ms(n.LateP99), n.Over10ms, recs, perBatch, ms(n.WriteP99), n.StaleRejected, n.SelfFenced, n.Rotations, n.Handoffs,
			pct(cpu[n.ID], rep.CPU.Seconds), n.Seconds, n.Note)
	}
	tw.Flush()
	t := rep.Totals
	fmt.Fprintf(w, "\ncluster: %d instances served; %.0f ticks/s of %.0f scheduled (%.2f %%), %.0f skipped; tick lateness p50 %s ms, p99 %s ms\n",
		t.Instances, t.TicksPerSec, t.Scheduled, t.TicksPct, t.Skipped, ms(t.LateP50), ms(t.LateP99))
	batches := "single writes (no batches)"
	if t.Batches > 0 {
		batches = fmt.Sprintf("%.2f records per batch (%.0f batches)", t.RecordsPerBatch, t.Batches)
	}
	fmt.Fprintf(w, "fenced records: %.0f/s (%.0f written ok), %s; write (sent → acknowledged) p50 %s ms, p99 %s ms\n",
		t.RecordsPerSec, t.Records, batches, ms(t.WriteP50), ms(t.WriteP99))
	if t.StaleRejected > 0 || t.SelfFenced > 0 || t.Rotations > 0 || t.Handoffs > 0 {
		fmt.Fprintf(w, "stale writes rejected %.0f, self-fenced %.0f, token rotations %.0f, hand-offs %.0f\n", t.StaleRejected, t.SelfFenced, t.Rotations, t.Handoffs)
	}
	c := rep.CPU
	fmt.Fprintln(w, c.line())
	if t.Records > 0 {
		fmt.Fprintf(w, "CPU per 1 000 fenced records: servers %.0f CPU-ms, nodes %.0f CPU-ms\n", c.ServerMsPerK, c.NodeMsPerK)
	}
	if len(rep.Streams) > 0 {
		var parts []string
		for _, st := range rep.Streams {
			parts = append(parts, fmt.Sprintf("p%d %s", st.Partition, st.Leader))
		}
		fmt.Fprintf(w, "data partitions' leaders as the window opened: %s; the load client on %s\n", strings.Join(parts, ", "), rep.LoadOn)
	}
	cm := rep.Commands
	fmt.Fprintf(w, "\ncommands (attacks, warm-up included): sent %d, answered %d (ok %d", cm.Sent, cm.Answered, cm.OK)
	codes := make([]string, 0, len(cm.Errors))
	for k := range cm.Errors {
		codes = append(codes, k)
	}
	sort.Strings(codes)
	for _, k := range codes {
		fmt.Fprintf(w, ", %s %d", k, cm.Errors[k])
	}
	fmt.Fprintf(w, "), unknown %d, retries %d (%d requests published), not sent %d\n", cm.Unknown, cm.Retried, cm.Attempts, cm.Dropped)
	fmt.Fprintf(w, "command round trip (request → answer after commit, retries included): p50 %s ms, p99 %s ms, p99.9 %s ms, max %s ms\n",
		ms(cm.P50), ms(cm.P99), ms(cm.P999), ms(cm.Max))
	if f := rep.Fault; f != nil {
		printFault(w, f)
	}
}

func pct(cpuSeconds, window float64) string {
	if window <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", 100*cpuSeconds/window)
}

// printFault prints what the fault cost.
func printFault(w io.Writer, f *faultResult) {
	switch f.Kind {
	case "kill-leader":
		fmt.Fprintf(w, "\nfault: kill -9 of server %s at %.1fs, leader of %s", f.Server, f.At, strings.Join(f.Led, ", "))
		if len(f.Partitions) > 0 {
			fmt.Fprintf(w, " (data partitions %v: %d instances on %d shards)", f.Partitions, f.Instances, f.Shards)
		} else {
			fmt.Fprintf(w, " (no data partition: all %d instances counted)", f.Instances)
		}
		if f.LoadOnIt {
			fmt.Fprint(w, "; the load client was connected to it")
		}
		fmt.Fprintln(w)
	case "pause":
		fmt.Fprintf(w, "\nfault: SIGSTOP for %v of %s at %.1fs (%d instances on %d shards)\n", f.Pause, f.Node, f.At, f.Instances, f.Shards)
	default:
		fmt.Fprintf(w, "\nfault: kill -9 %s at %.1fs (%d instances on %d shards)\n", f.Node, f.At, f.Instances, f.Shards)
	}
	if f.Error != "" {
		fmt.Fprintf(w, "fault failed: %s\n", f.Error)
		return
	}
	if f.Kind == "kill-leader" {
		if f.NewLeader != "" {
			fmt.Fprintf(w, "new leader of %s: %s after %s ms\n", f.Stream, f.NewLeader, ms(f.Elected))
		} else {
			fmt.Fprintf(w, "%s had NO new leader after %v\n", f.Stream, f.Failover.Round(time.Millisecond))
		}
	}
	switch {
	case f.Complete && f.Kind == "kill-leader":
		fmt.Fprintf(w, "writes resumed: %s ms until every one of %d sampled instances of those partitions had a record stored with a higher tick\n", ms(f.Failover), f.Sampled)
	case f.Complete:
		fmt.Fprintf(w, "failover: %s ms until every one of its instances had a record under another token with a higher tick\n", ms(f.Failover))
	default:
		n := f.Instances
		if f.Kind == "kill-leader" {
			n = f.Sampled
		}
		fmt.Fprintf(w, "failover INCOMPLETE: %d of %d instances with no newer record after %v\n", f.Pending, n, f.Failover.Round(time.Millisecond))
	}
	fmt.Fprintf(w, "acknowledged commands paused (longest stretch without one, from the fault on): %s ms for the affected instances, %s ms for all\n",
		ms(f.AckPause), ms(f.AckPauseAll))
	fmt.Fprintf(w, "ticks from the fault's second on: lowest second %.0f %% of the schedule, %d s under 90 %%\n", f.TickMinPct, f.TickSecsBelow90)
	if f.Complete {
		fmt.Fprintf(w, "command round trip max during the failover: %s ms (%d commands under way)\n", ms(f.RttMaxDuring), f.CommandsDuring)
	}
}

// writeClusterPlot writes a self-contained HTML page: per node the p99 tick lateness of each
// second, and the p99 and max command round trip of the commands sent in each second, on a log
// scale, with the fault and the end of the failover marked.
func writeClusterPlot(path string, rep clusterReport) error {
	var b strings.Builder
	b.WriteString("<!doctype html><meta charset=utf-8><title>tickbench cluster</title>" +
		"<style>body{font:14px sans-serif;margin:2em}svg{background:#fafafa;border:1px solid #ddd}</style>")
	c := rep.Config
	fmt.Fprintf(&b, "<h1>tickbench cluster: lateness and round trip over time</h1><p>%s</p><p>%d nodes, %d instances, %d shards, lease %v, %g attacks/s</p>",
		html.EscapeString(rep.Machine.String()), c.Nodes, c.Instances, c.Shards, c.Lease, c.Rate)
	const w, h, left, bottom = 900.0, 360.0, 60.0, 30.0
	tmax := c.Duration.Seconds()
	lo, hi := math.Log10(0.01), math.Log10(10) // ms
	for _, pts := range rep.Lateness {
		for _, p := range pts {
			if v := float64(p.P99) / 1e6; v > 0 {
				hi = math.Max(hi, math.Ceil(math.Log10(v)))
			}
		}
	}
	for _, p := range rep.RoundTr {
		if v := float64(p.Max) / 1e6; v > 0 {
			hi = math.Max(hi, math.Ceil(math.Log10(v)))
		}
	}
	x := func(t float64) float64 { return left + (w-left-10)*math.Max(0, math.Min(t, tmax))/tmax }
	y := func(v time.Duration) float64 {
		l := math.Log10(math.Max(float64(v)/1e6, 0.01))
		return (h - bottom) - (h-bottom-10)*(l-lo)/(hi-lo)
	}
	fmt.Fprintf(&b, "<svg width=%v height=%v>", w, h)
	for e := lo; e <= hi; e++ {
		v := time.Duration(math.Pow(10, e) * 1e6)
		fmt.Fprintf(&b, "<line x1=%v x2=%v y1=%.1f y2=%.1f stroke=#ddd /><text x=4 y=%.1f font-size=11>%g ms</text>",
			left, w-10, y(v), y(v), y(v)+4, math.Pow(10, e))
	}
	fmt.Fprintf(&b, "<text x=%v y=%v font-size=11>time in the window (s) 0 … %.0f</text>", left, h-8, tmax)
	if f := rep.Fault; f != nil && f.Error == "" {
		fmt.Fprintf(&b, "<line x1=%.1f x2=%.1f y1=10 y2=%v stroke=#d62728 stroke-width=2 /><text x=%.1f y=22 font-size=11 fill=#d62728>%s %s</text>",
			x(f.At), x(f.At), h-bottom, x(f.At)+4, f.Kind, html.EscapeString(f.Node))
		if f.Complete {
			end := f.At + f.Failover.Seconds()
			fmt.Fprintf(&b, "<line x1=%.1f x2=%.1f y1=10 y2=%v stroke=#2ca02c stroke-dasharray=4 /><text x=%.1f y=36 font-size=11 fill=#2ca02c>failover done (%s ms)</text>",
				x(end), x(end), h-bottom, x(end)+4, ms(f.Failover))
		}
	}
	colors := []string{"#1f77b4", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"}
	legend := 0
	line := func(col, dash, name string, pts []string) {
		fmt.Fprintf(&b, "<polyline fill=none stroke=%s stroke-width=1.5 stroke-dasharray=%q points=%q />", col, dash, strings.Join(pts, " "))
		fmt.Fprintf(&b, "<text x=%v y=%d font-size=12 fill=%s>%s</text>", w-230, 16+14*legend, col, html.EscapeString(name))
		legend++
	}
	ids := make([]string, 0, len(rep.Lateness))
	for id := range rep.Lateness {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for i, id := range ids {
		var pts []string
		for _, p := range rep.Lateness[id] {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(p.At), y(p.P99)))
		}
		line(colors[i%len(colors)], "", id+" tick lateness p99 (per s)", pts)
	}
	var p99, mx []string
	for _, p := range rep.RoundTr {
		p99 = append(p99, fmt.Sprintf("%.1f,%.1f", x(p.At), y(p.P99)))
		mx = append(mx, fmt.Sprintf("%.1f,%.1f", x(p.At), y(p.Max)))
	}
	line("#333", "", "command round trip p99 (by send second)", p99)
	line("#999", "3,3", "command round trip max", mx)
	b.WriteString("</svg>")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
