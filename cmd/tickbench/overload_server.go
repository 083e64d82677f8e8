package main

import (
	"context"
	"os/exec"
	"regexp"
	"time"

	"github.com/tickfence/tickfence/internal/proc"
)

// serverWatch samples the tickd server's metrics (tickd server --metrics) every 100 ms during a
// step: how much it held queued for one client at most, how long it took to answer (a server
// that does not answer its metrics for half a second does not route commands either), and the
// longest stretch in which it sent under a quarter of the step's mean rate (a pause in delivery,
// seen from the server).
type serverWatch struct {
	PendingMax float64       // tickfence_nats_pending_bytes_max, the most seen
	ScrapeMax  time.Duration // the slowest answer to a scrape
	SlowOutMax time.Duration // the longest stretch sending under a quarter of the mean rate
	Samples    int
	samples    []serverSample
}

type serverSample struct {
	at      time.Time
	outMsgs float64
}

// scrapeLimit bounds one scrape of the server's metrics.
const scrapeLimit = 2 * time.Second

// watchServer samples srv until ctx ends and returns what it saw (nil if srv serves no metrics).
func watchServer(ctx context.Context, srv *proc.Proc) <-chan *serverWatch {
	out := make(chan *serverWatch, 1)
	if srv.MetricsURL() == "" {
		out <- nil
		return out
	}
	go func() {
		w := &serverWatch{}
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for ctx.Err() == nil {
			start := time.Now()
			// An answer begun is waited for (its delay is the figure), up to scrapeLimit: a server
			// that does not answer must not hold the step.
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), scrapeLimit)
			m, err := srv.Scrape(sctx)
			cancel()
			w.ScrapeMax = max(w.ScrapeMax, time.Since(start)) // an unanswered one counts too
			if err == nil {
				w.PendingMax = max(w.PendingMax, m["tickfence_nats_pending_bytes_max"])
				w.samples = append(w.samples, serverSample{time.Now(), m["tickfence_nats_out_msgs_total"]})
			}
			select {
			case <-ctx.Done():
			case <-t.C:
			}
		}
		w.SlowOutMax = slowestStretch(w.samples)
		w.Samples = len(w.samples)
		out <- w
	}()
	return out
}

// slowestStretch is the longest run of consecutive samples between which messages went out at
// under a quarter of the mean rate over all of them.
func slowestStretch(s []serverSample) time.Duration {
	if len(s) < 3 {
		return 0
	}
	span := s[len(s)-1].at.Sub(s[0].at).Seconds()
	if span <= 0 {
		return 0
	}
	mean := (s[len(s)-1].outMsgs - s[0].outMsgs) / span
	var longest, run time.Duration
	for i := 1; i < len(s); i++ {
		d := s[i].at.Sub(s[i-1].at)
		if d > 0 && (s[i].outMsgs-s[i-1].outMsgs)/d.Seconds() < mean/4 {
			run += d
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	return longest
}

// serverHasMetrics reports whether the tickd binary's server mode takes --metrics (a tickd from
// before it, given with --tickd, does not): its help lists the flag on a line of its own (the
// help of one before mentions a node's --metrics in an example).
func serverHasMetrics(bin string) bool {
	out, _ := exec.Command(bin, "server", "--help").CombinedOutput()
	return metricsFlagLine.Match(out)
}

var metricsFlagLine = regexp.MustCompile(`(?m)^\s+-metrics\b`)
