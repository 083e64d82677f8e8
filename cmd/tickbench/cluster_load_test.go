package main

import (
	"context"
	mrand "math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tickfence/tickfence/internal/hdr"
	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/store/natskv"
)

func newTestGen(t *testing.T) *loadGen {
	srv, err := natsserver.Start(natsserver.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	nc, err := natskv.Connect("", srv.ConnectOption())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ids := []string{"a", "b", "c", "d"}
	return &loadGen{nc: nc, client: natscmd.NewClient(nc, 8), ids: ids, rate: 20000, giveUp: 5 * time.Millisecond,
		runID: "t", rng: mrand.New(mrand.NewPCG(1, 2)), rtt: hdr.New(7), errs: map[string]int64{},
		acked: make([]atomic.Int64, len(ids)), unknowN: make([]atomic.Int64, len(ids))}
}

// After stop returns, no attack starts (a reviewer's test; the old `go g.run(ctx)` followed by wait
// had the race detector report a race in 30 such cycles): wait may follow at once; calling stop twice is harmless;
// a cancelled parent ctx ends run as well.
func TestLoadGenStartStop(t *testing.T) {
	g := newTestGen(t)
	for i := range 30 {
		ctx, cancel := context.WithCancel(context.Background())
		stop := g.start(ctx)
		time.Sleep(3 * time.Millisecond)
		if i%3 == 0 {
			cancel() // parent ends first (the error paths)
		}
		stop()
		before := g.seq.Load() + uint64(g.inflight.Load())
		g.wait()
		time.Sleep(5 * time.Millisecond)
		if g.inflight.Load() != 0 {
			t.Fatalf("cycle %d: %d in flight after stop and wait", i, g.inflight.Load())
		}
		if after := g.seq.Load(); after > before {
			t.Fatalf("cycle %d: attacks started after stop: seq %d > %d", i, after, before)
		}
		done := make(chan struct{})
		go func() { stop(); close(done) }() // second call
		select {
		case <-done:
		case <-time.After(time.Second):
			t.Fatal("second stop blocked")
		}
		cancel()
	}
}
