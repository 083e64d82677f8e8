package main

import (
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime/trace"
	"sync"
	"time"

	"github.com/tickfence/tickfence/internal/flightrec"
)

// flight keeps the last seconds of Go's execution trace in memory (runtime/trace's flight
// recorder) and writes them to a file when a summary interval went wrong: ticks skipped, or a
// tick p99 lateness over the threshold. A skip burst lasts milliseconds and comes minutes apart;
// the trace of the seconds before it shows what held the workers (go tool trace FILE). A POST to
// its handler writes one at once: for what only a client sees (commands answered late).
type flight struct {
	fr        *trace.FlightRecorder
	dir       string
	name      string        // of the files: NAME-TIME.trace
	threshold time.Duration // 0: only skipped ticks
	gap       time.Duration // at most one file per gap
	log       *slog.Logger

	mu    sync.Mutex
	last  time.Time // of the last file written for an interval
	asked time.Time // of the last file written on request
}

// askGap: at most one trace on request per askGap (each is up to flightrec.MaxBytes).
const askGap = 5 * time.Second

// startFlight starts the recorder, keeping window of trace if flightrec.MaxBytes hold it; its files
// are named name-TIME.trace.
func startFlight(dir, name string, window, threshold time.Duration, log *slog.Logger) (*flight, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("--flight-trace: %w", err)
	}
	fr, err := flightrec.Start(window)
	if err != nil {
		return nil, fmt.Errorf("--flight-trace: start the flight recorder: %w", err)
	}
	attrs := []any{"dir", dir, "window", window}
	if threshold > 0 {
		attrs = append(attrs, "p99_threshold", threshold)
	}
	log.Info("flight recorder on", attrs...)
	return &flight{fr: fr, dir: dir, name: name, threshold: threshold, gap: time.Minute, log: log}, nil
}

// check writes the trace if the interval that just ended skipped ticks or was late; it says
// whether it wrote one.
func (f *flight) check(now time.Time, skipped uint64, p99 time.Duration) bool {
	if f == nil || (skipped == 0 && (f.threshold <= 0 || p99 <= f.threshold)) {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.last.IsZero() && now.Sub(f.last) < f.gap {
		return false
	}
	if _, err := f.write(now, "skipped_ticks", skipped, "p99_lateness", p99); err != nil {
		return false // the next interval tries again: a failure does not use up the minute
	}
	f.last = now
	return true
}

// handler writes the trace at once on a POST (at most one per askGap) and answers its path.
func (f *flight) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "POST here to write the flight recorder's last seconds to a file now", http.StatusMethodNotAllowed)
			return
		}
		now := time.Now()
		f.mu.Lock()
		defer f.mu.Unlock()
		if !f.asked.IsZero() && now.Sub(f.asked) < askGap {
			http.Error(w, fmt.Sprintf("a trace was written on request %v ago: at most one per %v", now.Sub(f.asked).Round(time.Millisecond), askGap), http.StatusTooManyRequests)
			return
		}
		path, err := f.write(now, "asked_by", r.RemoteAddr)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		f.asked = now
		fmt.Fprintln(w, path)
	})
}

// write writes the recorder's window to a new file in dir and logs it with attrs; under f.mu.
func (f *flight) write(now time.Time, attrs ...any) (string, error) {
	path := filepath.Join(f.dir, f.name+"-"+now.UTC().Format("20060102T150405.000Z")+".trace")
	n, err := flightrec.Write(f.fr, path)
	if err != nil {
		f.log.Warn("flight trace not written", "path", path, "err", err)
		return "", err
	}
	f.log.Warn("flight trace written", append([]any{"path", path, "bytes", n}, attrs...)...)
	return path, nil
}

func (f *flight) stop() {
	if f != nil {
		f.fr.Stop()
	}
}
