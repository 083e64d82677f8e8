package main

import (
	"testing"
	"time"
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
