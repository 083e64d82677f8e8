package main

import (
	"context"
	"testing"
)

// The capacity search lands within about 10 % below the knee wherever the knee falls between
// the ramp's rungs (a 1.5× ramp alone could land up to a third below it), never above it, and
// stops at once when a try says so.
func TestSearchCapacityBisects(t *testing.T) {
	for _, knee := range []float64{600, 1000, 28_900, 30_000, 43_000, 64_000, 90_000} {
		var tries []float64
		got := searchCapacity(context.Background(), func(rate float64) (bool, bool) {
			tries = append(tries, rate)
			return rate <= knee, false
		}, func(_, _, _ float64) {})
		if got > knee || got < knee/1.11 {
			t.Errorf("knee %.0f: found %.0f after %v; want within 10 %% below it", knee, got, tries)
		}
	}
	n := 0
	got := searchCapacity(context.Background(), func(rate float64) (bool, bool) {
		n++
		return true, n == 3
	}, func(_, _, _ float64) { t.Error("bisected after a stop") })
	if n != 3 || got != 750 {
		t.Errorf("stopped at the 3rd try: %d tries, capacity %.0f; want 3 and 750 (the last kept)", n, got)
	}
	if got := searchCapacity(context.Background(), func(float64) (bool, bool) { return false, false }, func(_, _, _ float64) {}); got != 0 {
		t.Errorf("nothing kept up with: capacity %.0f, want 0", got)
	}
}

// A stop during the bisection ends it at once, and so does a cancelled ctx (a reviewer's test: a
// search that went on bisecting after either passed the one above).
func TestSearchCapacityStopsWhileBisecting(t *testing.T) {
	var tries []float64
	got := searchCapacity(context.Background(), func(rate float64) (bool, bool) {
		tries = append(tries, rate)
		if len(tries) == 4 { // 500, 750 kept, 1125 not; the 4th is the first bisection
			return false, true
		}
		return rate <= 1000, false
	}, func(_, _, _ float64) {})
	if len(tries) != 4 || got != 750 {
		t.Errorf("stop at the first bisection: tries %v, capacity %.0f; want 4 tries and 750", tries, got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tries = nil
	got = searchCapacity(ctx, func(rate float64) (bool, bool) {
		tries = append(tries, rate)
		if rate > 1000 {
			cancel()
		}
		return rate <= 1000, false
	}, func(_, _, _ float64) { t.Error("bisected after ctx was cancelled") })
	if len(tries) != 3 || got != 750 {
		t.Errorf("cancelled at the 3rd try: tries %v, capacity %.0f; want 3 and 750", tries, got)
	}
}
