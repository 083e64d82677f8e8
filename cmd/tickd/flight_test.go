package main

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The flight recorder writes its trace when an interval skipped ticks or went over the p99
// threshold, at most once per gap, and the file is a Go execution trace.
func TestFlightTraceWrittenOnSkipsAndLateness(t *testing.T) {
	dir, fl := testFlight(t, 10*time.Millisecond)
	time.Sleep(50 * time.Millisecond) // something to record
	now := time.Now()
	steps := []struct {
		at      time.Duration
		skipped uint64
		p99     time.Duration
		want    bool
	}{
		{0, 0, 5 * time.Millisecond, false},            // on time, nothing skipped
		{0, 0, 10 * time.Millisecond, false},           // at the threshold is not over it
		{0, 3, time.Millisecond, true},                 // skipped ticks
		{30 * time.Second, 1, time.Millisecond, false}, // within a minute of the last file
		{90 * time.Second, 0, 11 * time.Millisecond, true},
	}
	files := 0
	for i, s := range steps {
		if got := fl.check(now.Add(s.at), s.skipped, s.p99); got != s.want {
			t.Errorf("step %d (%+v): wrote %v, want %v", i, s, got, s.want)
		}
		if s.want {
			files++
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != files {
		t.Fatalf("%d files in %s, want %d", len(entries), dir, files)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte("go 1.")) || len(b) < 1000 {
			t.Errorf("%s: %d bytes starting %q, not a Go execution trace", e.Name(), len(b), b[:min(len(b), 16)])
		}
	}
	// Off unless asked for: a nil recorder never writes.
	var off *flight
	if off.check(now, 100, time.Second) {
		t.Error("a nil flight recorder wrote a trace")
	}
}

// A POST to the handler writes the trace at once, whatever the intervals did, at most once per
// askGap; any other method is refused and writes nothing.
func TestFlightTraceWrittenOnRequest(t *testing.T) {
	dir, fl := testFlight(t, 0)
	time.Sleep(50 * time.Millisecond) // something to record
	h := fl.handler()
	do := func(method string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, "/debug/flight-trace", nil))
		return rec
	}
	if rec := do(http.MethodGet); rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != http.MethodPost {
		t.Fatalf("GET: %d, Allow %q; want 405, POST", rec.Code, rec.Header().Get("Allow"))
	}
	rec := do(http.MethodPost)
	if rec.Code != http.StatusOK {
		t.Fatalf("POST: %d %s", rec.Code, rec.Body)
	}
	path := strings.TrimSpace(rec.Body.String())
	b, err := os.ReadFile(path)
	if err != nil || !bytes.HasPrefix(b, []byte("go 1.")) {
		t.Fatalf("the answered path %q is not a trace (%v)", path, err)
	}
	if rec := do(http.MethodPost); rec.Code != http.StatusTooManyRequests {
		t.Fatalf("a second POST at once: %d, want 429", rec.Code)
	}
	// An interval that skipped ticks still writes its own: requests do not use up its minute.
	time.Sleep(2 * time.Millisecond) // another file name
	if !fl.check(time.Now(), 1, 0) {
		t.Fatal("an interval with skipped ticks wrote no trace after a request")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Fatalf("%d files, want 2", len(entries))
	}
}

// testFlight starts a flight recorder of a second's window writing into a new directory, stopped
// when the test ends.
func testFlight(t *testing.T, threshold time.Duration) (string, *flight) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "traces")
	fl, err := startFlight(dir, "tickd", time.Second, threshold, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fl.stop)
	return dir, fl
}
