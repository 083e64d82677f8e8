package bench

import (
	"testing"
	"time"

	"github.com/tickfence/tickfence/actor"
)

// BenchmarkEngineTickTwoRates is BenchmarkEngineTick with the same 1000 instances split over two
// schedules of one engine (500 at 20 Hz, 500 at 60 Hz: a kind with a rate of its own), driven by
// a manual clock one millisecond per iteration, reported per tick: what a second rate costs the
// engine's own work.
func BenchmarkEngineTickTwoRates(b *testing.B) {
	start := time.Unix(1000, 0)
	var late time.Duration
	e, err := actor.NewEngine(actor.EngineConfig{Rate: 20, Workers: 1, Start: start, Manual: true,
		ObserveWorker: func(int) func(l, d time.Duration) { return func(l, d time.Duration) { late += l } }})
	if err != nil {
		b.Fatal(err)
	}
	fast, err := e.Schedule(60)
	if err != nil {
		b.Fatal(err)
	}
	for range 500 {
		e.Add(&nopTicker{})
		fast.Add(&nopTicker{})
	}
	k := 0
	ticks := 0
	for b.Loop() {
		k++
		ticks += e.Advance(start.Add(time.Duration(k) * time.Millisecond))
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(ticks), "ns/tick")
	b.ReportMetric(float64(ticks)/float64(b.N), "ticks/op")
}
