package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/shard"
	"github.com/tickfence/tickfence/shard/node"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/memstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testShards = 8

// nop is the smallest kind: these tests are about the node, not what its instances do.
type nop struct{}

func (nop) Name() string                                   { return "nop" }
func (nop) New(string, actor.Command) (actor.Logic, error) { return nopState{}, nil }
func (nop) Restore(string, []byte) (actor.Logic, error)    { return nopState{}, nil }

type nopState struct{}

func (nopState) Tick(uint64)                               {}
func (nopState) Handle(uint64, actor.Command) (any, error) { return nil, nil }
func (nopState) MarshalState() ([]byte, error)             { return []byte{0x80}, nil }

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// flakyWatches makes the first watch of each kind fail: refused at start, or ended at once
// (closed channel, as when an ordered consumer gives up).
type flakyWatches struct {
	store.Store
	refuse bool
	mu     sync.Mutex
	done   map[string]bool
}

func (f *flakyWatches) first(kind string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	was := f.done[kind]
	f.done[kind] = true
	return !was
}

func (f *flakyWatches) WatchAssignments(ctx context.Context, epoch uint64) (<-chan store.AssignmentEvent, error) {
	if f.first("assignments") {
		if f.refuse {
			return nil, errors.New("watch refused: no responders")
		}
		ch := make(chan store.AssignmentEvent)
		close(ch)
		return ch, nil
	}
	return f.Store.WatchAssignments(ctx, epoch)
}

func (f *flakyWatches) ControlWatch(ctx context.Context, filter string) (<-chan store.Entry, error) {
	if f.first(filter) {
		if f.refuse {
			return nil, errors.New("watch refused: no responders")
		}
		ch := make(chan store.Entry)
		close(ch)
		return ch, nil
	}
	return f.Store.ControlWatch(ctx, filter)
}

// A watch that fails to start or ends must not leave a live session that never serves the shards
// assigned to it: the coordinator would never fail them over. The node opens it again, and a
// hand-off request is still followed.
func TestWatchesThatFailAreReopened(t *testing.T) {
	for _, refuse := range []bool{false, true} {
		name := map[bool]string{false: "ended", true: "refused"}[refuse]
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			mem := memstore.New()
			if _, err := mem.Bootstrap(ctx, store.Cluster{Shards: testShards, Partitions: 1, Epoch: 1}); err != nil {
				t.Fatal(err)
			}
			st := &flakyWatches{Store: mem, refuse: refuse, done: map[string]bool{}}
			reg := prometheus.NewRegistry()
			e, err := actor.NewEngine(actor.EngineConfig{Rate: 20})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Stop()
			kinds, _ := actor.NewKinds(nop{})
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			n, err := node.New(node.Config{Config: shard.Config{Node: "n1", Store: st, Kinds: kinds,
				Engine: e, Registerer: reg, Logger: log}})
			if err != nil {
				t.Fatal(err)
			}
			rctx, stop := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { defer close(done); _ = n.Run(rctx) }()
			defer func() { stop(); <-done }()
			<-n.Ready()
			a := store.Assignment{Owner: "n1", Session: n.Session()}
			const s = 2
			if _, err := mem.Assign(ctx, 1, s, a, 0); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the node runs the shard assigned to its session", func() bool { return n.Host().Running(s) })

			// A hand-off request for it is followed although the first move watch failed.
			rec, _ := json.Marshal(store.MoveRecord{From: "n1", FromSession: n.Session(), To: "n2", State: store.MoveRequested})
			if _, err := mem.ControlCreate(ctx, store.MoveKey(s), rec, 0); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the shard is handed off", func() bool {
				e, err := mem.ControlGet(ctx, store.MoveKey(s))
				var r store.MoveRecord
				return err == nil && json.Unmarshal(e.Value, &r) == nil && r.State == store.MoveReleased
			})
			_ = time.Second
		})
	}
}

// A hand-off asked of an older grant of this session (a leader's stale view; the shard was granted
// to this session again since) is ignored: releasing would leave the key naming this session with
// nobody running it. One asked of the current grant is followed.
func TestHandOffOfAnOlderGrantIsIgnored(t *testing.T) {
	ctx := context.Background()
	mem := memstore.New()
	if _, err := mem.Bootstrap(ctx, store.Cluster{Shards: testShards, Partitions: 1, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	e, err := actor.NewEngine(actor.EngineConfig{Rate: 20})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Stop()
	kinds, _ := actor.NewKinds(nop{})
	n, err := node.New(node.Config{Config: shard.Config{Node: "n1", Store: mem, Kinds: kinds, Engine: e, Registerer: reg}})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = n.Run(rctx) }()
	defer func() { stop(); <-done }()
	<-n.Ready()
	const s = 5
	if _, err := mem.Assign(ctx, 1, s, store.Assignment{Owner: "n1", Session: n.Session(), Grant: "7.2"}, 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the node runs the shard", func() bool { return n.Host().Running(s) })
	move := func(grant string) uint64 {
		rec, _ := json.Marshal(store.MoveRecord{From: "n1", FromSession: n.Session(), FromGrant: grant, To: "n2", State: store.MoveRequested})
		_ = mem.ControlDelete(ctx, store.MoveKey(s), 0)
		rev, err := mem.ControlCreate(ctx, store.MoveKey(s), rec, 0)
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	released := func() bool {
		e, err := mem.ControlGet(ctx, store.MoveKey(s))
		var r store.MoveRecord
		return err == nil && json.Unmarshal(e.Value, &r) == nil && r.State == store.MoveReleased
	}
	move("7.1")
	time.Sleep(300 * time.Millisecond)
	if released() || !n.Host().Running(s) {
		t.Fatal("a hand-off asked of an older grant was followed")
	}
	move("7.2")
	waitFor(t, "the hand-off of the current grant", released)
}
