package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// A tiny ticks run end to end: every design reports, the JSON and the plot are written. It checks
// the plumbing, never timings.
func TestTicksSmoke(t *testing.T) {
	dir := t.TempDir()
	js, plot := filepath.Join(dir, "t.json"), filepath.Join(dir, "t.html")
	err := runTicks([]string{"--instances", "200", "--tick-rate", "50", "--work", "1us", "--duration", "200ms",
		"--warmup", "100ms", "--mem-instances", "100", "--json", js, "--plot", plot})
	if err != nil {
		t.Fatal(err)
	}
	var rep ticksReport
	readReport(t, js, &rep)
	if len(rep.Results) != 3 {
		t.Fatalf("got %d results, want 3 (raw, engine, ticker)", len(rep.Results))
	}
	for _, r := range rep.Results {
		if r.TicksPerSec <= 0 {
			t.Errorf("%s: %v ticks/s, want > 0", r.Design, r.TicksPerSec)
		}
		if r.Design != "raw" && (r.Expected == 0 || len(r.Series) == 0) {
			t.Errorf("%s: expected %d ticks, %d plot points; want both > 0", r.Design, r.Expected, len(r.Series))
		}
	}
	if fi, err := os.Stat(plot); err != nil || fi.Size() == 0 {
		t.Fatalf("plot: %v", err)
	}
}

// A small cluster run end to end with real processes: a tickd server and two nodes, 20 instances
// under command load. Every attack is answered, every node ticks and reports lateness, and the
// JSON and the plot are written.
func TestClusterSmoke(t *testing.T) {
	dir := t.TempDir()
	js, plot := filepath.Join(dir, "c.json"), filepath.Join(dir, "c.html")
	err := runCluster([]string{"--nodes", "2", "--instances", "20", "--rate", "100", "--duration", "4s", "--warmup", "1s",
		"--seed", "1", "--json", js, "--plot", plot})
	if err != nil {
		t.Fatal(err)
	}
	var rep clusterReport
	readReport(t, js, &rep)
	c := rep.Commands
	if c.Sent == 0 || c.OK != c.Sent || c.Unknown != 0 || c.P50 <= 0 {
		t.Fatalf("commands: sent %d, ok %d, unknown %d, p50 %v; want all answered ok", c.Sent, c.OK, c.Unknown, c.P50)
	}
	if len(rep.Nodes) != 2 {
		t.Fatalf("got %d node results, want 2", len(rep.Nodes))
	}
	instances := 0
	for _, n := range rep.Nodes {
		if n.TicksPerSec <= 0 || n.LateP99 <= 0 {
			t.Errorf("%s: %v ticks/s, lateness p99 %v; want both > 0", n.ID, n.TicksPerSec, n.LateP99)
		}
		instances += n.Instances
	}
	if instances != 20 {
		t.Errorf("nodes run %d instances in all, want 20", instances)
	}
	if len(rep.Lateness) == 0 || len(rep.RoundTr) == 0 {
		t.Errorf("series: %d nodes, %d round-trip points; want both > 0", len(rep.Lateness), len(rep.RoundTr))
	}
	if fi, err := os.Stat(plot); err != nil || fi.Size() == 0 {
		t.Fatalf("plot: %v", err)
	}
}

// A short nemesis run: faults are injected, the cluster heals, the stored history is complete
// and clean, every acknowledged attack is in the stored state exactly once, and every effect the
// states explain is in the effects stream and was applied once by the consumer.
func TestChaosSmoke(t *testing.T) {
	js := filepath.Join(t.TempDir(), "chaos.json")
	err := runChaos([]string{"--duration", "15s", "--fault-every", "3s", "--instances", "20", "--rate", "50",
		"--seed", "1", "--json", js})
	if err != nil {
		t.Fatal(err)
	}
	var rep chaosReport
	readReport(t, js, &rep)
	faults := 0
	for _, n := range rep.Faults {
		faults += n
	}
	if !rep.Pass || faults == 0 {
		t.Fatalf("pass %v with %d faults (failures %v); want a pass after at least one fault", rep.Pass, faults, rep.Failures)
	}
	if rep.History.Messages == 0 || rep.History.Incomplete != "" || rep.History.Stale != 0 {
		t.Fatalf("history: %+v; want complete, non-empty, no stale record", rep.History)
	}
	d := rep.Damage
	if d.FinalWriteAcked != 20 || d.AckedDamage == 0 || d.Lost != 0 || d.Duplicates != 0 {
		t.Fatalf("damage: %+v; want 20 final writes acknowledged, nothing lost or duplicated", d)
	}
	if rep.Commands.OK == 0 {
		t.Fatalf("no attack acknowledged: %+v", rep.Commands)
	}
	// Every instance is killable here (--killable 20 of 20): loot flows during the faults.
	if e := rep.Effects; e.Expected == 0 || e.StreamKeys != e.Expected || e.Applied != e.Expected || e.Missing != 0 ||
		e.Unexpected != 0 || e.Undelivered != 0 {
		t.Fatalf("effects: %+v; want some, each in the stream and applied once", e)
	}
}

// A small overload run end to end with real processes: a tickd server and a node, 20 dungeons, a
// step below the given capacity and one far past it. The first is answered in full, nearly all ok
// (rates compared with one another, never with the clock: a stall of the machine must not fail it); past
// it the sessions' windows bound what is in flight; no acknowledged attack is lost or applied
// twice; the JSON and the plot are written.
func TestOverloadSmoke(t *testing.T) {
	dir := t.TempDir()
	js, plot := filepath.Join(dir, "o.json"), filepath.Join(dir, "o.html")
	err := runOverload([]string{"--instances", "20", "--shards", "8", "--capacity", "200", "--steps", "50,5000",
		"--step", "2s", "--give-up", "10s", "--json", js, "--plot", plot})
	if err != nil {
		t.Fatal(err)
	}
	var rep overloadReport
	readReport(t, js, &rep)
	if len(rep.Steps) != 2 {
		t.Fatalf("got %d steps, want 2", len(rep.Steps))
	}
	low, high := rep.Steps[0], rep.Steps[1]
	if low.OK < 0.9*(low.OK+low.Busy+low.Other+low.TimedOut) || low.TimedOut > 0 || low.NotSent != 0 || low.InFlight <= 0 {
		t.Errorf("50 %%: ok %.1f/s, busy %.1f/s, other %.1f/s, timed out %.1f/s, not sent %d, in flight %.1f; want every attack sent and answered, nearly all ok",
			low.OK, low.Busy, low.Other, low.TimedOut, low.NotSent, low.InFlight)
	}
	if high.OK <= 0 || high.InFlight <= 0 || high.InFlightMax > int64(20*64) {
		t.Errorf("5000 %%: ok %.0f/s, in flight mean %.1f, most %d; want some acknowledged and in flight, at most 64 per dungeon",
			high.OK, high.InFlight, high.InFlightMax)
	}
	if d := rep.Damage; d.Instances != 20 || d.AckedDamage == 0 || d.Lost != 0 || d.Duplicates != 0 || d.Unreadable != 0 {
		t.Errorf("damage: %+v; want 20 instances read, nothing lost or applied twice", d)
	}
	if fi, err := os.Stat(plot); err != nil || fi.Size() == 0 {
		t.Fatalf("plot: %v", err)
	}
}

// readReport reads a scenario's --json file into v.
func readReport(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}
