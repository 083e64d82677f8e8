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
	err := runTicks([]string{"--instances", "200", "--rate", "50", "--work", "1us", "--duration", "200ms",
		"--warmup", "100ms", "--mem-instances", "100", "--json", js, "--plot", plot})
	if err != nil {
		t.Fatal(err)
	}
	var rep ticksReport
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
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
