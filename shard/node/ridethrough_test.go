package node_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/internal/metrics"
	"github.com/tickfence/tickfence/shard"
	"github.com/tickfence/tickfence/shard/node"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/memstore"
)

// controlCut cuts the lease's way to the control bucket (as while it elects a leader) and leaves
// the data stream reachable.
type controlCut struct {
	store.Store
	cut atomic.Bool
}

var errUnavailable = errors.New("nats: no responders available for request")

func (c *controlCut) ControlUpdate(ctx context.Context, key string, v []byte, expect uint64, ttl time.Duration) (uint64, error) {
	if c.cut.Load() {
		return 0, errUnavailable
	}
	return c.Store.ControlUpdate(ctx, key, v, expect, ttl)
}

func (c *controlCut) ControlCreate(ctx context.Context, key string, v []byte, ttl time.Duration) (uint64, error) {
	if c.cut.Load() {
		return 0, errUnavailable
	}
	return c.Store.ControlCreate(ctx, key, v, ttl)
}

func (c *controlCut) LatestControl(ctx context.Context, key string) (store.Entry, error) {
	if c.cut.Load() {
		return store.Entry{}, errUnavailable
	}
	return c.Store.LatestControl(ctx, key)
}

// TestControlPlaneLossIsRiddenThrough (issue 36.1): a node whose lease cannot be renewed for
// longer than the lease (the control bucket electing a leader) keeps ticking and writing — the
// fence checks every write — and when the control bucket is back it creates its expired lease
// again under the same session: no pause, no new session, its shard still running. Only past
// RideThrough does it pause its shards (and re-validate them once its lease is renewed). Before,
// it paused every shard at TTL minus margin and, its lease expired, rejoined under a new session.
func TestControlPlaneLossIsRiddenThrough(t *testing.T) {
	ctx := context.Background()
	mem := memstore.New()
	if _, err := mem.Bootstrap(ctx, store.Cluster{Shards: testShards, Partitions: 1, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	st := &controlCut{Store: mem}
	reg := prometheus.NewRegistry()
	e, err := actor.NewEngine(actor.EngineConfig{Rate: 20, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Stop()
	kinds, _ := actor.NewKinds(nop{})
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	n, err := node.New(node.Config{Config: shard.Config{Node: "n1", Store: st, Kinds: kinds, Engine: e, Registerer: reg,
		Logger: log, CheckpointEvery: 2}, LeaseTTL: time.Second, LeaseMargin: 200 * time.Millisecond, RideThrough: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = n.Run(rctx) }()
	defer func() {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_ = n.Leave(lctx) // no other node: flushes and releases the shard, closing the host
		stop()
		<-done
	}()
	<-n.Ready()
	session := n.Session()
	const s = 2
	if _, err := mem.Assign(ctx, 1, s, store.Assignment{Owner: "n1", Session: session}, 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the node runs its shard", func() bool { return n.Host().Running(s) })
	id := ""
	for i := 0; id == "" || store.ShardOf(id, testShards) != s; i++ {
		id = "r" + strconv.Itoa(i)
	}
	body, _ := msgpack.Marshal(map[string]any{"type": "create", "kind": "nop"})
	req, err := wire.DecodeCommand(wire.Subject(s, id), wire.Headers{RequestID: "c1"}, body, testShards)
	if err != nil {
		t.Fatal(err)
	}
	answered := make(chan []byte, 1)
	n.Host().Submit(shard.Command{Request: req, Received: time.Now(), Reply: func(b []byte) { answered <- b }})
	select {
	case b := <-answered:
		if r, _ := wire.DecodeReply(b, false); !r.OK {
			t.Fatalf("create: %+v", r.Error)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("create not answered")
	}
	m := metrics.For(reg)
	tickOf := func() uint64 {
		rec, _, err := mem.Load(ctx, 1, s, id)
		if err != nil {
			t.Fatal(err)
		}
		return rec.Tick
	}

	// 2 s without the control bucket: twice the lease.
	st.cut.Store(true)
	before := tickOf()
	time.Sleep(2 * time.Second)
	during := tickOf()
	st.cut.Store(false)
	if during < before+20 {
		t.Errorf("the instance's stored tick went from %d to %d in 2 s without the control bucket: it stopped (want about 40 more)", before, during)
	}
	if got := testutil.ToFloat64(m.SelfFenced); got != 0 {
		t.Errorf("%v pauses while riding through 2 s (ride-through 3 s)", got)
	}
	if got := testutil.ToFloat64(m.RideThroughs); got != 1 {
		t.Errorf("%v ride-throughs counted, want 1", got)
	}
	waitFor(t, "the lease is back", func() bool {
		e, err := mem.ControlGet(ctx, store.NodeKey("n1"))
		return err == nil && testutil.ToFloat64(m.RidingThrough) == 0 && len(e.Value) > 0
	})
	if n.Session() != session || !n.Host().Running(s) {
		t.Fatalf("after the control bucket came back: session %s (was %s), running the shard %v; want the same session running it", n.Session(), session, n.Host().Running(s))
	}

	// Longer than the ride-through: it pauses, and after the renewal re-validates and goes on.
	st.cut.Store(true)
	time.Sleep(4 * time.Second)
	if got := testutil.ToFloat64(m.SelfFenced); got != 1 {
		t.Errorf("%v pauses after 4 s without the control bucket (ride-through 3 s), want 1", got)
	}
	paused := tickOf()
	time.Sleep(500 * time.Millisecond)
	if tickOf() != paused {
		t.Errorf("the instance went on writing while paused")
	}
	st.cut.Store(false)
	waitFor(t, "the shard ticks again", func() bool { return tickOf() > paused+5 })
	if n.Session() != session {
		t.Errorf("a new session after a pause: %s, was %s", n.Session(), session)
	}
}
