package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tickfence/tickfence/internal/proc"
	"github.com/tickfence/tickfence/store/natskv"
)

func TestParseClusterFlagsStore(t *testing.T) {
	cfg, _, err := parseClusterFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Servers != 1 || cfg.Replicas != 1 || cfg.Partitions != 1 || cfg.WriteStrategy != "auto" || cfg.CheckpointEvery != 20 || cfg.TickRate != 20 {
		t.Fatalf("defaults: %+v", cfg)
	}
	cfg, _, err = parseClusterFlags([]string{"--servers", "3", "--partitions", "3", "--write-strategy", "single", "--checkpoint-every", "1", "--kill-leader"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Replicas != 3 || cfg.Partitions != 3 || cfg.WriteStrategy != "single" || cfg.CheckpointEvery != 1 ||
		cfg.Fault != "kill-leader" || cfg.LeaderOf != "p0" {
		t.Fatalf("3 servers, bare --kill-leader: %+v", cfg)
	}
	for _, of := range []string{"p2", "data", "control"} {
		cfg, _, err = parseClusterFlags([]string{"--servers", "3", "--partitions", "3", "--kill-leader=" + of})
		if err != nil || cfg.LeaderOf != of {
			t.Fatalf("--kill-leader=%s: %+v, %v", of, cfg, err)
		}
	}
	if got := describeFault(cfg); !strings.Contains(got, "control bucket") {
		t.Errorf("describeFault: %q", got)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--kill-leader"}, "needs --servers 3"},
		{[]string{"--servers", "3", "--replicas", "1", "--kill-leader"}, "needs --servers 3"},
		{[]string{"--servers", "3", "--partitions", "3", "--kill-leader=p3"}, "want p0 … p2"},
		{[]string{"--servers", "3", "--kill-leader=x1"}, "want p0"},
		{[]string{"--servers", "3", "--kill-leader=p"}, "want p0"},
		{[]string{"--replicas", "3"}, "at most --servers"},
		{[]string{"--servers", "3", "--replicas", "2"}, "want 1, 3 or 5"},
		{[]string{"--servers", "6"}, "want 1 to 5"},
		{[]string{"--partitions", "33"}, "want 1 to --shards"},
		{[]string{"--write-strategy", "fast"}, "want auto, single or batches"},
		{[]string{"--checkpoint-every", "0"}, "at least 1"},
		{[]string{"--servers", "3", "--kill-leader", "--kill-node"}, "one fault per run"},
	} {
		if _, _, err := parseClusterFlags(tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one saying %q", tc.args, err, tc.want)
		}
	}
}

func TestParseProcStat(t *testing.T) {
	st, ok := parseProcStat("cpu  3620233 10 363639 3583353 7217 0 34377 317166 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\nintr 1\n")
	if !ok {
		t.Fatal("not parsed")
	}
	want := procStat{busy: (3620233 + 10 + 363639 + 0 + 34377) / 100.0, idle: (3583353 + 7217) / 100.0, steal: 3171.66}
	if math.Abs(st.busy-want.busy) > 1e-6 || math.Abs(st.idle-want.idle) > 1e-6 || math.Abs(st.steal-want.steal) > 1e-6 {
		t.Fatalf("got %+v, want %+v", st, want)
	}
	if _, ok := parseProcStat("intr 1\n"); ok {
		t.Fatal("parsed a text without a cpu line")
	}
}

func TestBinCountersAndTickDip(t *testing.T) {
	// n1 ticks 100/s throughout; n2 100/s until it dies at 2.5 s; scrapes not on whole seconds.
	series := map[string][]counterAt{
		"n1": {{0, 0}, {0.5, 50}, {1.5, 150}, {2.5, 250}, {4, 400}},
		"n2": {{0.2, 1000}, {2.5, 1230}},
	}
	got := binCounters(series, 4)
	want := []float64{180, 200, 150, 100}
	for k, p := range got {
		if p.At != float64(k) || math.Abs(p.Ticks-want[k]) > 1e-9 {
			t.Fatalf("bins %+v, want ticks %v", got, want)
		}
	}
	minPct, below := tickDip(got, 2.5, 200)
	if minPct != 50 || below != 2 {
		t.Fatalf("tickDip from 2.5 s: %v %%, %d s under 90 %%; want 50 %%, 2 s", minPct, below)
	}
	if minPct, below = tickDip(got, 0, 200); minPct != 50 || below != 2 {
		t.Fatalf("tickDip from 0: %v %%, %d", minPct, below)
	}
}

func TestAckPauseOf(t *testing.T) {
	s := func(sent, rtt float64, inst int32, ok bool) rttSample {
		return rttSample{sent: sent, rtt: time.Duration(rtt * 1e9), inst: inst, ok: ok}
	}
	samples := []rttSample{
		s(9.9, 0.05, 0, true),  // answered before the fault: not counted
		s(10.0, 0.1, 1, true),  // 10.1
		s(10.2, 5.0, 0, true),  // 15.2: the pause of instance 0
		s(11, 0.1, 1, true),    // 11.1
		s(12, 0.1, 1, false),   // refused: not an acknowledgement
		s(14, 0.1, 1, true),    // 14.1
		s(16, 0.5, 0, true),    // 16.5
		s(1.7e9, 0.1, 0, true), // a warm-up command (sent before the window's start was marked)
	}
	all := func(int) bool { return true }
	pause := func(end float64, in func(int) bool) time.Duration {
		return ackPauseOf(samples, 10, end, in).Round(time.Millisecond)
	}
	if got := pause(17, all); got != 3*time.Second {
		t.Errorf("all: %v, want 3s (11.1 → 14.1)", got)
	}
	if got := pause(17, func(i int) bool { return i == 0 }); got != 5200*time.Millisecond {
		t.Errorf("instance 0: %v, want 5.2s (10 → 15.2)", got)
	}
	if got := pause(30, func(i int) bool { return i == 1 }); got != 15900*time.Millisecond {
		t.Errorf("instance 1 to 30 s: %v, want 15.9s (14.1 → the window's end)", got)
	}
}

func TestAddBuckets(t *testing.T) {
	a := []proc.Bucket{{LE: 0.001, Count: 1}, {LE: 0.01, Count: 3}, {LE: math.Inf(1), Count: 4}}
	b := []proc.Bucket{{LE: 0.001, Count: 2}, {LE: 0.01, Count: 2}, {LE: math.Inf(1), Count: 10}}
	got := addBuckets(addBuckets(nil, a), b)
	want := []proc.Bucket{{LE: 0.001, Count: 3}, {LE: 0.01, Count: 5}, {LE: math.Inf(1), Count: 14}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}

// sampleReport is a report as a 3-server run with a leader kill would make it.
func sampleReport(strategy string, recsPerSec, serverCPU float64) clusterReport {
	cfg := clusterConfig{Nodes: 3, Instances: 500, Shards: 32, Lease: 2 * time.Second, Rate: 500, Duration: 30 * time.Second,
		Warmup: 5 * time.Second, Fault: "kill-leader", Seed: 1, Servers: 3, Replicas: 3, Partitions: 3, WriteStrategy: strategy,
		CheckpointEvery: 20, TickRate: 20, LeaderOf: "p0"}
	records := recsPerSec * 30
	r := clusterReport{Config: cfg, LoadOn: "s2",
		Nodes: []nodeResult{{ID: "n1", Instances: 170, Shards: 11, TicksPerSec: 3400, Records: records / 3, Batches: 100, BatchRecords: 280, Seconds: 30}},
		Totals: clusterTotals{Instances: 500, Scheduled: 10000, TicksPerSec: 9990, TicksPct: 99.9, Records: records, RecordsPerSec: recsPerSec,
			Batches: records / 2.8, RecordsPerBatch: 2.8, LateP99: 3 * time.Millisecond, WriteP99: 20 * time.Millisecond},
		CPU: cpuResult{Seconds: 30, CPUs: 2, Servers: serverCPU, Nodes: 12, Bench: 3, Busy: 60, Others: 60 - serverCPU - 15, StealPct: 1.5,
			ServerMsPerK: 1e6 * serverCPU / records, NodeMsPerK: 1e6 * 12 / records,
			Procs: []procCPUResult{{"s1", "server", serverCPU / 3}, {"n1", "node", 4}, {"tickbench", "tickbench", 3}}},
		Streams:  []natskv.PartitionStream{{Partition: 0, Leader: "s1"}, {Partition: 1, Leader: "s2"}, {Partition: 2, Leader: "s3"}},
		Commands: commandResult{Sent: 15000, Answered: 15000, OK: 15000, P50: 30 * time.Millisecond, P99: 250 * time.Millisecond},
		Fault: &faultResult{Kind: "kill-leader", At: 15, Server: "s1", Stream: "KV_tickfence-data-e1-p0",
			Led: []string{"KV_tickfence-control", "KV_tickfence-data-e1-p0"}, Partitions: []int{0}, Instances: 167, Shards: 11, Sampled: 64,
			NewLeader: "s3", Elected: 5200 * time.Millisecond, Failover: 6100 * time.Millisecond, Complete: true,
			AckPause: 5900 * time.Millisecond, AckPauseAll: 1200 * time.Millisecond, TickMinPct: 31, TickSecsBelow90: 4},
	}
	return r
}

func TestPrintClusterReport(t *testing.T) {
	var out bytes.Buffer
	printCluster(&out, sampleReport("batches", 1400, 19))
	for _, want := range []string{
		"cluster: 500 instances served; 9990 ticks/s of 10000 scheduled (99.90 %)",
		"fenced records: 1400/s (42000 written ok), 2.80 records per batch",
		"servers 19.0 CPU-s (s1 6.3), nodes 12.0 (n1 4.0), tickbench 3.0",
		"steal 1.5 %",
		"CPU per 1 000 fenced records: servers 452 CPU-ms, nodes 286 CPU-ms",
		"data partitions' leaders as the window opened: p0 s1, p1 s2, p2 s3; the load client on s2",
		"fault: kill -9 of server s1 at 15.0s, leader of KV_tickfence-control, KV_tickfence-data-e1-p0 (data partitions [0]: 167 instances on 11 shards)",
		"new leader of KV_tickfence-data-e1-p0: s3 after 5200.000 ms",
		"writes resumed: 6100.000 ms until every one of 64 sampled instances",
		"5900.000 ms for the affected instances, 1200.000 ms for all",
		"lowest second 31 % of the schedule, 4 s under 90 %",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

func TestClusterReportJSONAndCompare(t *testing.T) {
	dir := t.TempDir()
	var files []string
	for i, r := range []clusterReport{sampleReport("single", 1600, 35), sampleReport("batches", 1400, 19)} {
		f := filepath.Join(dir, []string{"single.json", "batches.json"}[i])
		if err := writeJSON(f, r); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	b, err := os.ReadFile(files[1])
	if err != nil {
		t.Fatal(err)
	}
	var back clusterReport
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Totals.RecordsPerBatch != 2.8 || back.CPU.Servers != 19 || back.Fault.Elected != 5200*time.Millisecond ||
		back.Fault.NewLeader != "s3" || back.Config.LeaderOf != "p0" || len(back.Streams) != 3 {
		t.Fatalf("JSON round trip: %+v", back)
	}
	for _, key := range []string{`"records_per_batch"`, `"server_cpu_ms_per_1k_records"`, `"steal_pct"`, `"new_leader_ns"`, `"ack_pause_ns"`} {
		if !bytes.Contains(b, []byte(key)) {
			t.Errorf("JSON lacks %s", key)
		}
	}

	reps := []clusterReport{sampleReport("single", 1600, 35), back}
	var out bytes.Buffer
	printCompare(&out, []string{"single.json", "batches.json"}, reps, false)
	for _, want := range []string{"3srv R3 P3 single ce20 32sh 500i kill-leader", "3srv R3 P3 batches ce20",
		"ratios to the first (single.json)", "batches.json: records/s 0.88×, servers CPU per record 0.62×"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("compare lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	printCompare(&out, []string{"a", "b"}, reps, true)
	lines := strings.Split(out.String(), "\n")
	if !strings.HasPrefix(lines[0], "| run | file | ticks % |") || !strings.HasPrefix(lines[1], "|---|") || !strings.Contains(lines[2], "| 5200 |") {
		t.Fatalf("markdown:\n%s", out.String())
	}
	if err := runClusterCompare(append([]string{"--markdown"}, files...)); err != nil {
		t.Fatal(err)
	}
	if err := runClusterCompare(nil); err == nil {
		t.Fatal("compare without reports: no error")
	}
}

// The cluster's totals: a node killed halfway counts for its ticks and records, not for the
// instances served at the end; batches and histograms add up over the nodes.
func TestClusterTotals(t *testing.T) {
	scrape := func(ticks, ok, batches, batchRecs, instances, fast, slow float64) proc.Metrics {
		return proc.Metrics{"tickfence_ticks_total": ticks, okWrites: ok, "tickfence_instances": instances,
			"tickfence_write_batch_records_count": batches, "tickfence_write_batch_records_sum": batchRecs,
			`tickfence_tick_lateness_seconds_bucket{le="0.001"}`: fast, `tickfence_tick_lateness_seconds_bucket{le="+Inf"}`: fast + slow}
	}
	s := &sampler{b: &benchCluster{ids: []string{"n1", "n2"}}, scrapes: map[string][]scrapeAt{
		"n1": {{0, scrape(0, 0, 0, 0, 50, 0, 0)}, {10, scrape(20000, 2000, 500, 1500, 100, 99, 1)}},
		"n2": {{0, scrape(0, 0, 0, 0, 50, 0, 0)}, {5, scrape(5000, 500, 100, 500, 50, 100, 0)}}, // killed at 5 s
	}}
	cfg := clusterConfig{Instances: 100, TickRate: 20, Duration: 10 * time.Second}
	tot := s.totals(s.results(), cfg)
	if tot.Instances != 100 || tot.Scheduled != 2000 || tot.TicksPerSec != 2500 || tot.TicksPct != 125 {
		t.Errorf("instances %d, scheduled %v, ticks/s %v (%v %%); want 100, 2000, 2500, 125", tot.Instances, tot.Scheduled, tot.TicksPerSec, tot.TicksPct)
	}
	if tot.Records != 2500 || tot.RecordsPerSec != 250 || tot.Batches != 600 || math.Abs(tot.RecordsPerBatch-2000.0/600) > 1e-9 {
		t.Errorf("records %v (%v/s), batches %v, %v per batch; want 2500, 250, 600, 3.33", tot.Records, tot.RecordsPerSec, tot.Batches, tot.RecordsPerBatch)
	}
	if tot.LateP50 <= 0 || tot.LateP50 > time.Millisecond || tot.LateP99 > time.Millisecond {
		t.Errorf("lateness p50 %v, p99 %v: want both within the first bucket (199 of 200 ticks under 1 ms)", tot.LateP50, tot.LateP99)
	}
}
