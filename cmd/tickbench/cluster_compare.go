package main

// tickbench cluster compare: the JSON reports of earlier cluster runs side by side, one row each,
// and every run's ratios to the first.

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
)

func runClusterCompare(args []string) error {
	fs := newFlagSet("cluster compare", "")
	markdown := fs.Bool("markdown", false, "print the table as Markdown")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: tickbench cluster compare [--markdown] REPORT.json REPORT.json...\n\n"+
			"One row per run (reports written by tickbench cluster --json), then each run's ratios to the first.\n\nflags:")
		fs.PrintDefaults()
	}
	var files []string
	for len(args) > 0 { // flags and files in any order
		n := len(args)
		for i, a := range args { // the flags before the next file (its one flag takes no value)
			if !strings.HasPrefix(a, "-") {
				n = i
				break
			}
		}
		if err := parseFlags(fs, args[:n]); err != nil {
			return err
		}
		if n == len(args) {
			break
		}
		files = append(files, args[n])
		args = args[n+1:]
	}
	if len(files) == 0 {
		return usageError{"tickbench cluster compare: no report given (see tickbench cluster compare --help)"}
	}
	var reps []clusterReport
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var r clusterReport
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		reps = append(reps, r)
	}
	printCompare(os.Stdout, files, reps, *markdown)
	return nil
}

// runLabel names a run by its shape: servers, replicas, partitions, write strategy, checkpoint
// interval, shards and instances.
func runLabel(c clusterConfig) string {
	l := fmt.Sprintf("%dsrv R%d P%d %s ce%d %dsh %di", c.Servers, c.Replicas, c.Partitions, c.WriteStrategy, c.CheckpointEvery, c.Shards, c.Instances)
	if c.Fault != "" {
		l += " " + c.Fault
	}
	return l
}

var compareColumns = []string{"run", "file", "ticks %", "rec/s", "rec/batch", "rtt p50 ms", "rtt p99 ms", "tick p99 ms",
	"write p99 ms", "servers CPU %", "nodes CPU %", "servers ms/1k rec", "nodes ms/1k rec", "others CPU %", "steal %",
	"failover ms", "ack pause ms", "new leader ms"}

// compareRow is a run's cells, in compareColumns' order.
func compareRow(file string, r clusterReport) []string {
	t, c := r.Totals, r.CPU
	perCore := func(cpu float64) string { return pct(cpu, c.Seconds) }
	perBatch := "-"
	if t.Batches > 0 {
		perBatch = fmt.Sprintf("%.2f", t.RecordsPerBatch)
	}
	failover, pause, leader := "-", "-", "-"
	if f := r.Fault; f != nil && f.Error == "" {
		failover = fmt.Sprintf("%.0f", f.Failover.Seconds()*1e3)
		if !f.Complete {
			failover = "> " + failover
		}
		pause = fmt.Sprintf("%.0f", f.AckPause.Seconds()*1e3)
		if f.Kind == "kill-leader" && f.NewLeader != "" {
			leader = fmt.Sprintf("%.0f", f.Elected.Seconds()*1e3)
		}
	}
	return []string{runLabel(r.Config), file, fmt.Sprintf("%.1f", t.TicksPct), fmt.Sprintf("%.0f", t.RecordsPerSec), perBatch,
		ms1(r.Commands.P50.Seconds()), ms1(r.Commands.P99.Seconds()), ms1(t.LateP99.Seconds()), ms1(t.WriteP99.Seconds()),
		perCore(c.Servers), perCore(c.Nodes), fmt.Sprintf("%.0f", c.ServerMsPerK), fmt.Sprintf("%.0f", c.NodeMsPerK),
		perCore(c.Others), fmt.Sprintf("%.1f", c.StealPct), failover, pause, leader}
}

func ms1(seconds float64) string { return fmt.Sprintf("%.1f", seconds*1e3) }

// ratio is b/a, or "-" where a is 0.
func ratio(b, a float64) string {
	if a == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f×", b/a)
}

// printCompare prints one row per run and then each run's ratios to the first.
func printCompare(w io.Writer, files []string, reps []clusterReport, markdown bool) {
	rows := [][]string{compareColumns}
	for i, r := range reps {
		rows = append(rows, compareRow(filepath.Base(files[i]), r))
	}
	if markdown {
		for i, row := range rows {
			fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
			if i == 0 {
				fmt.Fprintf(w, "|%s\n", strings.Repeat("---|", len(row)))
			}
		}
	} else {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, row := range rows {
			fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
		}
		tw.Flush()
	}
	if len(reps) < 2 {
		return
	}
	a := reps[0]
	fmt.Fprintf(w, "\nratios to the first (%s):\n", filepath.Base(files[0]))
	for i, b := range reps[1:] {
		fmt.Fprintf(w, "%s: records/s %s, servers CPU per record %s, nodes CPU per record %s, servers CPU %s, command p99 %s, tick p99 %s\n",
			filepath.Base(files[i+1]), ratio(b.Totals.RecordsPerSec, a.Totals.RecordsPerSec), ratio(b.CPU.ServerMsPerK, a.CPU.ServerMsPerK),
			ratio(b.CPU.NodeMsPerK, a.CPU.NodeMsPerK), ratio(b.CPU.Servers, a.CPU.Servers),
			ratio(b.Commands.P99.Seconds(), a.Commands.P99.Seconds()), ratio(b.Totals.LateP99.Seconds(), a.Totals.LateP99.Seconds()))
	}
}
