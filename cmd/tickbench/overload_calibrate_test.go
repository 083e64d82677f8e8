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
		}, func(good, bad, mid float64) {
			if !(good < mid && mid < bad) {
				t.Errorf("knee %.0f: bisecting at %.0f outside (%.0f, %.0f)", knee, mid, good, bad)
			}
		})
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
