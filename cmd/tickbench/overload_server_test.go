package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tickfence/tickfence/internal/proc"
)

// TestSlowestStretch finds the longest run of samples in which the server sent under a quarter
// of its mean rate: a pause in delivery between steady stretches.
func TestSlowestStretch(t *testing.T) {
	t0 := time.Unix(0, 0)
	var s []serverSample
	msgs := 0.0
	for i := range 30 {
		// 1 000 messages per 100 ms, but none from sample 10 to 14 and 100 per 100 ms from 20 to 21.
		switch {
		case i > 10 && i <= 14:
		case i > 20 && i <= 21:
			msgs += 100
		default:
			msgs += 1000
		}
		s = append(s, serverSample{t0.Add(time.Duration(i) * 100 * time.Millisecond), msgs})
	}
	if got := slowestStretch(s); got != 400*time.Millisecond {
		t.Fatalf("slowest stretch %v, want 400ms", got)
	}
	if got := slowestStretch(s[:2]); got != 0 {
		t.Fatalf("two samples: %v, want 0", got)
	}
	steady := []serverSample{{t0, 0}, {t0.Add(time.Second), 1000}, {t0.Add(2 * time.Second), 2000}}
	if got := slowestStretch(steady); got != 0 {
		t.Fatalf("steady: %v, want 0", got)
	}
}

// A server that stops answering its metrics (the stall the watch is there to see) does not hold
// the step: each scrape is bounded, and the unanswered one counts as the slowest answer.
func TestWatchServerEndsWhenScrapeHangs(t *testing.T) {
	release := make(chan struct{})
	hs := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
	defer hs.Close()
	defer close(release)
	p, err := proc.Start("sh", "server", nil, "-c", fmt.Sprintf(`echo '{"msg":"metrics","url":"%s/metrics"}' >&2; exec sleep 30`, hs.URL))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	for p.MetricsURL() == "" {
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	watched := watchServer(ctx, p)
	time.Sleep(200 * time.Millisecond)
	cancel() // the step's load ends
	select {
	case w := <-watched:
		if w.ScrapeMax < scrapeLimit || w.Samples != 0 {
			t.Fatalf("slowest answer %v, %d samples; want at least %v and none", w.ScrapeMax, w.Samples, scrapeLimit)
		}
	case <-time.After(scrapeLimit + 3*time.Second):
		t.Fatal("the watch still waits on a scrape the server never answers")
	}
}

// Only a server whose help lists --metrics as a flag has it: an older one's help mentions a
// node's --metrics in an example, and given the flag it would refuse to start.
func TestServerHasMetricsReadsTheFlagList(t *testing.T) {
	dir := t.TempDir()
	for name, c := range map[string]struct {
		help string
		want bool
	}{
		"new": {"Flags:\n  -listen string\n    \tHOST:PORT\n  -metrics string\n    \tserve Prometheus metrics\n", true},
		"old": {"Flags:\n  -listen string\n    \tHOST:PORT\n\nExamples:\n  # the player demo page of a node started with --metrics 127.0.0.1:9465:\n", false},
	} {
		bin := filepath.Join(dir, name)
		script := fmt.Sprintf("#!/bin/sh\nprintf '%s' >&2\nexit 0\n", c.help)
		if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		if got := serverHasMetrics(bin); got != c.want {
			t.Errorf("%s tickd: serverHasMetrics %v, want %v", name, got, c.want)
		}
	}
}
