package main

import (
	"os"
	"testing"
	"time"
)

// Review finding: a write that fails (here: the directory is gone; a full disk would do the same) still counts as
// "the last file" for the one-a-minute limit: the skip burst that follows within the minute gets
// no trace, although none was ever written.
func TestFailedFlightWriteDoesNotUseUpTheMinute(t *testing.T) {
	dir, fl := testFlight(t, 0)
	time.Sleep(20 * time.Millisecond)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if fl.check(now, 1, 0) {
		t.Fatal("wrote a trace into a removed directory")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if !fl.check(now.Add(10*time.Second), 5, 0) {
		t.Error("skipped ticks 10 s after a failed write: no trace written (the failed write used up the minute)")
	}
}
