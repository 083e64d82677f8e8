package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/trace"
	"time"
)

// flight keeps the last seconds of Go's execution trace in memory (runtime/trace's flight
// recorder) and writes them to a file when a summary interval went wrong: ticks skipped, or a
// tick p99 lateness over the threshold. A skip burst lasts milliseconds and comes minutes apart;
// the trace of the seconds before it shows what held the workers (go tool trace FILE).
type flight struct {
	fr        *trace.FlightRecorder
	dir       string
	threshold time.Duration // 0: only skipped ticks
	gap       time.Duration // at most one file per gap
	last      time.Time
	log       *slog.Logger
}

// flightMaxBytes caps the recorder's window: at 5 000 demo dungeons about 10 s of trace.
const flightMaxBytes = 24 << 20

// startFlight starts the recorder, keeping window of trace if flightMaxBytes hold it.
func startFlight(dir string, window, threshold time.Duration, log *slog.Logger) (*flight, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("--flight-trace: %w", err)
	}
	fr := trace.NewFlightRecorder(trace.FlightRecorderConfig{MinAge: window, MaxBytes: flightMaxBytes})
	if err := fr.Start(); err != nil {
		return nil, fmt.Errorf("--flight-trace: start the flight recorder: %w", err)
	}
	log.Info("flight recorder on", "dir", dir, "window", window, "p99_threshold", threshold)
	return &flight{fr: fr, dir: dir, threshold: threshold, gap: time.Minute, log: log}, nil
}

// check writes the trace if the interval that just ended skipped ticks or was late; it says
// whether it wrote one.
func (f *flight) check(now time.Time, skipped uint64, p99 time.Duration) bool {
	if f == nil || (skipped == 0 && (f.threshold <= 0 || p99 <= f.threshold)) {
		return false
	}
	if !f.last.IsZero() && now.Sub(f.last) < f.gap {
		return false
	}
	path := filepath.Join(f.dir, "tickd-"+now.UTC().Format("20060102T150405.000Z")+".trace")
	file, err := os.Create(path)
	if err != nil {
		f.log.Warn("flight trace not written", "err", err)
		return false // the next interval tries again: a failure does not use up the minute
	}
	n, err := f.fr.WriteTo(file)
	if cerr := file.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path) // no partial trace
		f.log.Warn("flight trace not written", "path", path, "err", err)
		return false
	}
	f.last = now
	f.log.Warn("flight trace written", "path", path, "bytes", n, "skipped_ticks", skipped, "p99_lateness", p99)
	return true
}

func (f *flight) stop() {
	if f != nil {
		f.fr.Stop()
	}
}
