// Package flightrec starts Go's flight recorder (runtime/trace) with the bounds tickd and
// tickbench share, and writes its window to a file.
package flightrec

import (
	"os"
	"runtime/trace"
	"time"
)

// MaxBytes caps the recorder's window: at 5 000 demo dungeons about 10 s of trace.
const MaxBytes = 24 << 20

// Start starts a recorder keeping the last window of execution trace, if MaxBytes hold it.
func Start(window time.Duration) (*trace.FlightRecorder, error) {
	fr := trace.NewFlightRecorder(trace.FlightRecorderConfig{MinAge: window, MaxBytes: MaxBytes})
	if err := fr.Start(); err != nil {
		return nil, err
	}
	return fr, nil
}

// Write writes the recorder's window to a new file at path (never over an existing one) and
// returns its size; a failed write leaves no partial file.
func Write(fr *trace.FlightRecorder, path string) (int64, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return 0, err
	}
	n, err := fr.WriteTo(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return 0, err
	}
	return n, nil
}
