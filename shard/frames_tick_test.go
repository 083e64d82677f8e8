package shard_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tickfence/tickfence/shard"
	"github.com/tickfence/tickfence/shard/natscmd"
)

// TestWatchShowsEveryFrameOfATick: a Logic may publish several frames in one tick (README:
// Publish from Tick or Handle; any topic). The shower publishes its tick on the main subject every
// tick and, on the command "topic", one frame on topic hp — the same tick. Watch ("delivers the
// frames of one instance, every topic") must show the hp frame, and every main frame.
func TestWatchShowsEveryFrameOfATick(t *testing.T) {
	var jet backend
	for _, b := range backends(t) {
		if b.nc != nil {
			jet = b
		}
	}
	st := jet.open(t)
	a := newNode(t, st, "a", nodeOpt{frames: func(reg prometheus.Registerer) shard.FramePublisher {
		p := natscmd.NewFramePublisher(jet.nc(t), 0, reg)
		t.Cleanup(p.Close)
		return p
	}})
	const s = 2
	a.grant(s)
	id := idIn(s, 3)
	mustOK(t, a.send(id, "c1", map[string]any{"type": "create", "kind": "shower"}), "create")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w, err := natscmd.NewClient(jet.nc(t), testShards).Watch(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	<-w.C
	for i := 0; i < 5; i++ {
		mustOK(t, a.send(id, "t"+string(rune('0'+i)), map[string]any{"type": "topic"}), "topic")
	}
	time.Sleep(300 * time.Millisecond)
	hp := 0
	for len(w.C) > 0 {
		if f := <-w.C; f.Topic == "hp" {
			hp++
		}
	}
	if hp != 5 {
		t.Fatalf("the watcher showed %d of the 5 frames on topic hp (%d frames dropped by the rule as stale)", hp, w.Stale())
	}
}
