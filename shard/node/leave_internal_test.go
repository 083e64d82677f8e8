package node

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestFlushReserve: a leave keeps a third of its time for the flush, at most 2 s, none when the
// time is up.
func TestFlushReserve(t *testing.T) {
	for left, want := range map[time.Duration]time.Duration{
		-time.Second: 0, 0: 0, 3 * time.Second: time.Second, 10 * time.Second: 2 * time.Second, time.Minute: 2 * time.Second,
	} {
		if got := flushReserve(left); got != want {
			t.Errorf("flushReserve(%v) = %v, want %v", left, got, want)
		}
	}
}

// TestLeaveErrorSaysWhy: a LeaveError names the cause it was given rather than the shards' own
// errors (which say only that time ran out), and one shard's error and a count without one.
func TestLeaveErrorSaysWhy(t *testing.T) {
	errs := errors.Join(errors.New("hand off shard 3: still loading: context deadline exceeded"),
		errors.New("hand off shard 5: still loading: context deadline exceeded"))
	e := &LeaveError{Shards: 2, Held: []uint32{3, 5, 7}, Err: errs}
	if got := e.Error(); got != "2 of 3 shards neither handed off nor flushed: hand off shard 3: still loading: context deadline exceeded (and 1 more)" {
		t.Errorf("without a cause: %q", got)
	}
	e.Cause = "no NATS server reachable"
	if got := e.Error(); !strings.HasSuffix(got, ": no NATS server reachable") {
		t.Errorf("with a cause: %q", got)
	}
	if errors.Unwrap(e) != errs {
		t.Errorf("the shards' errors are not wrapped")
	}
}
