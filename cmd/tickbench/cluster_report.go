package main

// The cluster scenario's report: the table and the plot.

import (
	"fmt"
	"html"
	"math"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

func printCluster(rep clusterReport) {
	fmt.Println("tick lateness per node over the window (Prometheus histogram deltas, interpolated in its buckets):")
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "node\tinstances\tshards\tticks/s\tlate p50 ms\tp99 ms\tticks >10ms\tstale rejected\thand-offs\tscraped s\t\t")
	for _, n := range rep.Nodes {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%s\t%s\t%.0f\t%.0f\t%.0f\t%.1f\t%s\t\n", n.ID, n.Instances, n.Shards, n.TicksPerSec,
			ms(n.LateP50), ms(n.LateP99), n.Over10ms, n.StaleRejected, n.Handoffs, n.Seconds, n.Note)
	}
	tw.Flush()
	c := rep.Commands
	fmt.Printf("\ncommands (attacks, warm-up included): sent %d, answered %d (ok %d", c.Sent, c.Answered, c.OK)
	codes := make([]string, 0, len(c.Errors))
	for k := range c.Errors {
		codes = append(codes, k)
	}
	sort.Strings(codes)
	for _, k := range codes {
		fmt.Printf(", %s %d", k, c.Errors[k])
	}
	fmt.Printf("), unknown %d, retries %d (%d requests published), not sent %d\n", c.Unknown, c.Retried, c.Attempts, c.Dropped)
	fmt.Printf("command round trip (request → answer after commit, retries included): p50 %s ms, p99 %s ms, p99.9 %s ms, max %s ms\n",
		ms(c.P50), ms(c.P99), ms(c.P999), ms(c.Max))
	if f := rep.Fault; f != nil {
		what := "kill -9"
		if f.Kind == "pause" {
			what = fmt.Sprintf("SIGSTOP for %v of", f.Pause)
		}
		fmt.Printf("\nfault: %s %s at %.1fs (%d instances on %d shards)\n", what, f.Node, f.At, f.Instances, f.Shards)
		switch {
		case f.Error != "":
			fmt.Printf("fault failed: %s\n", f.Error)
		case f.Complete:
			fmt.Printf("failover: %s ms until every one of its instances had a record under another token with a higher tick\n", ms(f.Failover))
			fmt.Printf("command round trip max during the failover: %s ms (%d commands under way)\n", ms(f.RttMaxDuring), f.CommandsDuring)
		default:
			fmt.Printf("failover INCOMPLETE: %d of %d instances not ticking elsewhere after %v\n", f.Pending, f.Instances, f.Failover.Round(time.Millisecond))
		}
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
