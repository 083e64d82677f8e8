package shard_test

import (
	"context"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/store/memstore"
)

// TestPassiveInstanceMemory measures the heap a node holds per idle instance, ticking and
// passivated (TICKFENCE_MEASURE=1; the store is in memory, its records counted in neither: the
// node's own bytes). Figures in the README (Passivation).
func TestPassiveInstanceMemory(t *testing.T) {
	if os.Getenv("TICKFENCE_MEASURE") == "" {
		t.Skip("a measurement: TICKFENCE_MEASURE=1")
	}
	const n = 5000
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	run := func(passivate time.Duration) (perInstance float64, goroutines int) {
		st := memstore.New()
		kind := finisher{name: "idle", opts: actor.KindOptions{Passivate: passivate}}
		nd := lifeNode(t, st, "A", nodeOpt{maxCmdDelay: -1}, kind)
		for s := uint32(0); s < testShards; s++ {
			nd.grant(s)
		}
		for i := range n {
			id := idIn(uint32(i%testShards), i)
			mustOK(t, nd.sendRetryingBusy(id, "c", map[string]any{"type": "create", "kind": "idle", "still": true}), "create")
		}
		if passivate > 0 {
			waitFor(t, "all passivated", func() bool { return nd.host.Passive() == n })
		}
		time.Sleep(300 * time.Millisecond)
		with, g := heap(), runtime.NumGoroutine()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := nd.host.Close(ctx); err != nil {
			t.Fatal(err)
		}
		without := heap()
		return (float64(with) - float64(without)) / n, g
	}
	ticking, g1 := run(0)
	passive, g2 := run(200 * time.Millisecond)
	t.Logf("heap per idle instance held by the node: ticking %.0f bytes, passivated %.0f bytes (goroutines %d, %d)", ticking, passive, g1, g2)
}
