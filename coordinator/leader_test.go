package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tickfence/tickfence/internal/lease"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/memstore"
)

// world is a memstore cluster driven by the real lead() loop, with node leases written by the
// test (no TTL: a node lives until the test deletes its key). Run it inside synctest.Test.
type world struct {
	t      *testing.T
	st     *memstore.Store
	cfg    Config
	term   *term
	valid  atomic.Bool
	cancel context.CancelFunc
	done   chan error
}

func newWorld(t *testing.T, shards uint32) *world {
	t.Helper()
	w := &world{t: t, st: memstore.New()}
	if _, err := w.st.Bootstrap(context.Background(), store.Cluster{Shards: shards, Partitions: 1, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	w.cfg = Config{Store: w.st, Node: "coord", Session: "cs", NoRebalance: true, HandOffTimeout: time.Hour,
		Registerer: prometheus.NewRegistry()}
	if err := w.cfg.defaults(); err != nil {
		t.Fatal(err)
	}
	if testing.Verbose() {
		w.cfg.Logger = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	}
	w.valid.Store(true)
	w.term = &term{rev: 100, valid: w.valid.Load}
	return w
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

func (w *world) start() {
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel, w.done = cancel, make(chan error, 1)
	go func() {
		w.done <- lead(ctx, w.cfg, w.cfg.Logger, w.term, func() time.Duration { return time.Hour })
	}()
	w.settle()
}

func (w *world) stop() {
	w.cancel()
	<-w.done
}

// settle lets a few rounds run.
func (w *world) settle() {
	time.Sleep(3 * w.cfg.Round)
	synctest.Wait()
}

func (w *world) put(key string, v any) {
	w.t.Helper()
	b, _ := json.Marshal(v)
	ctx := context.Background()
	e, err := w.st.ControlGet(ctx, key)
	switch {
	case err == nil:
		_, err = w.st.ControlUpdate(ctx, key, b, e.Revision, 0)
	case errors.Is(err, store.ErrNotFound):
		_, err = w.st.ControlCreate(ctx, key, b, 0)
	}
	if err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) node(id string, leaving bool) {
	w.put(store.NodeKey(id), store.NodeRecord{Session: id + "-s", Leaving: leaving})
}

func (w *world) kill(id string) {
	if err := w.st.ControlDelete(context.Background(), store.NodeKey(id), 0); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) shard(s uint32) (store.Assignment, uint64) {
	a, rev, err := w.st.Assignment(context.Background(), 1, s)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		w.t.Fatal(err)
	}
	return a, rev
}

func (w *world) move(s uint32) (store.MoveRecord, bool) {
	e, err := w.st.ControlGet(context.Background(), store.MoveKey(s))
	if err != nil {
		return store.MoveRecord{}, false
	}
	var rec store.MoveRecord
	_ = json.Unmarshal(e.Value, &rec)
	return rec, true
}

// release does what the old owner does at the end of a hand-off: mark the move released.
func (w *world) release(s uint32) {
	w.t.Helper()
	ctx := context.Background()
	e, err := w.st.ControlGet(ctx, store.MoveKey(s))
	if err != nil {
		w.t.Fatal(err)
	}
	var rec store.MoveRecord
	_ = json.Unmarshal(e.Value, &rec)
	rec.State, rec.StoppedAt = store.MoveReleased, time.Now().UnixNano()
	b, _ := json.Marshal(rec)
	if _, err := w.st.ControlUpdate(ctx, e.Key, b, e.Revision, 0); err != nil {
		w.t.Fatal(err)
	}
}

// TestLeadPlacesEveryShard: the real round loop on memstore sees the nodes it lists with ">" and
// grants every shard to a live session, each with a grant of its term. (With memstore's ">"
// matching nothing, it saw an empty cluster and granted nothing.)
func TestLeadPlacesEveryShard(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 8)
		w.node("n1", false)
		w.node("n2", false)
		w.start()
		defer w.stop()
		per := map[string]int{}
		grants := map[string]bool{}
		for s := uint32(0); s < 8; s++ {
			a, rev := w.shard(s)
			if rev == 0 || a.Session != a.Owner+"-s" {
				t.Fatalf("shard %d = %+v@%d; want a live session", s, a, rev)
			}
			if !strings.HasPrefix(a.Grant, "100.") || grants[a.Grant] {
				t.Fatalf("shard %d grant %q: want a new grant of term 100", s, a.Grant)
			}
			grants[a.Grant] = true
			per[a.Owner]++
		}
		if per["n1"] == 0 || per["n2"] == 0 {
			t.Fatalf("shards per node %v; want both nodes used", per)
		}
		st, err := ReadState(context.Background(), w.st)
		if err != nil || len(st.Nodes) != 2 {
			t.Fatalf("ReadState: %d nodes, %v; want 2", len(st.Nodes), err)
		}
	})
}

// TestReleasedMoveWithNowhereToGoReturnsToSource (issue 9.1): a move A→B; B dies, or starts
// leaving; A flushes, stops the shard and marks the move released. Nothing but A can take it: it
// must go back to A under a new grant (a new token A restarts from), not stay stranded under the
// token A stopped with, holding a slot of the move budget forever.
func TestReleasedMoveWithNowhereToGoReturnsToSource(t *testing.T) {
	for _, leave := range []bool{false, true} {
		t.Run(map[bool]string{false: "target died", true: "target leaving"}[leave], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newWorld(t, 1)
				w.node("A", false)
				w.start()
				defer w.stop()
				before, rev := w.shard(0)
				if before.Owner != "A" {
					t.Fatalf("shard 0 = %+v; want A", before)
				}
				w.node("B", false)
				w.put(store.MoveKey(0), store.MoveRecord{From: "A", FromSession: before.Session, To: "B", State: store.MoveRequested, Reason: "test"})
				w.settle()
				if leave {
					w.node("B", true)
				} else {
					w.kill("B")
				}
				w.release(0)
				w.settle()
				after, arev := w.shard(0)
				if !sameSession(after, before) || arev <= rev || after.Grant == before.Grant {
					t.Fatalf("after the release shard 0 = %+v@%d; want A's session under a new grant above revision %d (was %+v)",
						after, arev, rev, before)
				}
				if rec, ok := w.move(0); ok && rec.State != store.MoveDone {
					t.Fatalf("move.0 still %+v; want it settled", rec)
				}
			})
		})
	}
}

// TestReleasedMoveGrantedElsewhereIsNotHandedOn (issue 9.1): a move A→B was released, and before
// it was settled the shard was granted to C (a failover). The coordinator must not then hand it
// from C to B: C never handed it off.
func TestReleasedMoveGrantedElsewhereIsNotHandedOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 1)
		ctx := context.Background()
		for _, n := range []string{"A", "B", "C"} {
			w.node(n, false)
		}
		rev, err := w.st.Assign(ctx, 1, 0, store.Assignment{Owner: "A", Session: "A-s", Grant: "1.1"}, 0)
		if err != nil {
			t.Fatal(err)
		}
		w.put(store.MoveKey(0), store.MoveRecord{From: "A", FromSession: "A-s", To: "B", State: store.MoveRequested})
		w.release(0)
		c := store.Assignment{Owner: "C", Session: "C-s", Grant: "2.1"}
		crev, err := w.st.Assign(ctx, 1, 0, c, rev)
		if err != nil {
			t.Fatal(err)
		}
		w.start()
		defer w.stop()
		if a, r := w.shard(0); a != c || r != crev {
			t.Fatalf("shard 0 = %+v@%d; want C's grant %+v@%d left alone", a, r, c, crev)
		}
		if rec, ok := w.move(0); ok && rec.State != store.MoveDone {
			t.Fatalf("move.0 still %+v", rec)
		}
	})
}

// TestLeadWritesNothingWithoutAValidLease (issue 9.2): a leader whose lease cannot be trusted
// (frozen past its deadline, partitioned) makes no write at all — no grant, no move — until it is
// valid again.
func TestLeadWritesNothingWithoutAValidLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 4)
		w.node("n1", false)
		w.node("n2", true) // leaving: its shards would be moved
		w.valid.Store(false)
		w.start()
		defer w.stop()
		for s := uint32(0); s < 4; s++ {
			if a, rev := w.shard(s); rev != 0 {
				t.Fatalf("shard %d granted to %+v by a leader without a valid lease", s, a)
			}
		}
		w.valid.Store(true)
		w.settle()
		for s := uint32(0); s < 4; s++ {
			if a, rev := w.shard(s); rev == 0 || a.Owner != "n1" {
				t.Fatalf("shard %d = %+v@%d once the lease is valid; want n1", s, a, rev)
			}
		}
	})
}

// TestLeaderKeyReleasedWhenLeadFails: a leader whose lead() fails while the process lives releases
// the leader key at once, so another candidate takes over well within a TTL.
func TestLeaderKeyReleasedWhenLeadFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cfg := func(s store.Store, node string) Config {
			return Config{Store: s, Node: node, Session: node + "-s", Clock: lease.NewSystemClock(),
				Registerer: prometheus.NewRegistry()}
		}
		var broken failingCluster
		broken.Store = st
		done := make(chan struct{}, 2)
		go func() { _ = Run(ctx, cfg(&broken, "bad")); done <- struct{}{} }()
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		if _, err := st.Bootstrap(ctx, store.DefaultCluster()); err != nil {
			t.Fatal(err)
		}
		go func() { _ = Run(ctx, cfg(st, "good")); done <- struct{}{} }()
		start := time.Now()
		for {
			if e, err := st.ControlGet(ctx, store.LeaderKey); err == nil && strings.Contains(string(e.Value), `"good"`) {
				break
			}
			if time.Since(start) > time.Second {
				t.Fatalf("no working leader %v after the first one's lead() failed (lease TTL 2s)", time.Since(start))
			}
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
		<-done
		<-done
	})
}

// failingCluster is a store whose cluster record cannot be read: lead() fails at once.
type failingCluster struct{ store.Store }

func (failingCluster) Cluster(context.Context) (store.Cluster, error) {
	return store.Cluster{}, errors.New("cluster record unreadable")
}
