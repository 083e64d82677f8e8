package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/tickfence/tickfence/store/memstore"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tickfence/tickfence/store"
)

// lapseAfterAssign: the leader's lease stops being trustworthy right after a chosen grant lands
// (its renewal is late; the round's deadline passes), before the round's next write.
type lapseAfterAssign struct {
	store.Store
	when  func(store.Assignment) bool
	lapse func()
	fired atomic.Bool
}

func (l *lapseAfterAssign) Assign(ctx context.Context, epoch uint64, shard uint32, a store.Assignment, expect uint64) (uint64, error) {
	rev, err := l.Store.Assign(ctx, epoch, shard, a, expect)
	if err == nil && l.when(a) && l.fired.CompareAndSwap(false, true) {
		l.lapse()
	}
	return rev, err
}

// C1: move A→B; B dies; A releases. The coordinator gives shard 0 back to A under a new grant
// (A restarts it and runs it), but the lease lapses before move.0 is marked done. B comes back.
// The still-"released" move must not hand the shard A is now running to B without a hand-off.
func TestReleasedMoveRegrantedToSourceIsNotHandedOnLater(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 1)
		w.node("A", false)
		w.start()
		before, _ := w.shard(0)
		w.stop()
		la := &lapseAfterAssign{Store: w.st, when: func(a store.Assignment) bool { return a.Owner == "A" },
			lapse: func() { w.valid.Store(false) }}
		w.cfg.Store = la
		w.start()
		defer w.stop()
		w.node("B", false)
		w.put(store.MoveKey(0), store.MoveRecord{From: "A", FromSession: before.Session, FromGrant: before.Grant, To: "B", State: store.MoveRequested, Reason: "test"})
		w.settle()
		w.kill("B")
		w.release(0)
		w.settle()
		regrant, rrev := w.shard(0)
		if !la.fired.Load() || !sameSession(regrant, before) || regrant.Grant == before.Grant {
			t.Fatalf("setup: shard 0 = %+v@%d (fired %v); want A under a new grant", regrant, rrev, la.fired.Load())
		}
		rec, _ := w.move(0)
		t.Logf("A runs shard 0 under its new grant %s@%d; move.0 is still %s", regrant.Grant, rrev, rec.State)
		// A is running it now. B rejoins, the lease is renewed.
		time.Sleep(5 * time.Second)
		w.node("B", false)
		w.valid.Store(true)
		w.settle()
		after, arev := w.shard(0)
		if after.Owner != "A" {
			t.Fatalf("shard 0 = %+v@%d: taken from A (which was running it under grant %s@%d) without a hand-off, by a move A released before it was regranted",
				after, arev, regrant.Grant, rrev)
		}
		if arev != rrev {
			t.Errorf("shard 0 rewritten %d→%d (%+v): A's token rotated again, A rebuilds the shard for nothing", rrev, arev, after)
		}
	})
}

// C1b: as C1, but B stays dead: once the lease is valid again, A (running the shard under its
// new grant) is regranted once more — its token rotated under it.
func TestReleasedMoveRegrantedToSourceNotRegrantedAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 1)
		w.node("A", false)
		w.start()
		before, _ := w.shard(0)
		w.stop()
		la := &lapseAfterAssign{Store: w.st, when: func(a store.Assignment) bool { return a.Owner == "A" },
			lapse: func() { w.valid.Store(false) }}
		w.cfg.Store = la
		w.start()
		defer w.stop()
		w.node("B", false)
		w.put(store.MoveKey(0), store.MoveRecord{From: "A", FromSession: before.Session, FromGrant: before.Grant, To: "B", State: store.MoveRequested, Reason: "test"})
		w.settle()
		w.kill("B")
		w.release(0)
		w.settle()
		regrant, rrev := w.shard(0)
		if !la.fired.Load() || !sameSession(regrant, before) || regrant.Grant == before.Grant {
			t.Fatalf("setup: shard 0 = %+v@%d", regrant, rrev)
		}
		w.valid.Store(true)
		w.settle()
		if after, arev := w.shard(0); arev != rrev {
			t.Fatalf("shard 0 rewritten %+v@%d → %+v@%d: A, running it, has its token rotated by a second regrant", regrant, rrev, after, arev)
		}
	})
}

// brokenWatch: the leader's watches cannot start (a consumer limit, a stream it cannot read),
// while its lease renewals go through.
type brokenWatch struct{ store.Store }

func (brokenWatch) ControlWatch(context.Context, string) (<-chan store.Entry, error) {
	return nil, errors.New("maximum consumers limit reached")
}

// C5: a leader whose view can never be built holds the leader key for ever, rebuilding every
// round: the healthy candidate never leads, and a node that dies is never failed over.
func TestLeaderWhoseViewNeverBuildsStepsDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if _, err := st.Bootstrap(ctx, store.Cluster{Shards: 2, Partitions: 1, Epoch: 1}); err != nil {
			t.Fatal(err)
		}
		cfg := func(s store.Store, node string) Config {
			return Config{Store: s, Node: node, Session: node + "-s", NoRebalance: true,
				Registerer: prometheus.NewRegistry()}
		}
		done := make(chan struct{}, 2)
		go func() { _ = Run(ctx, cfg(brokenWatch{st}, "bad")); done <- struct{}{} }()
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		go func() { _ = Run(ctx, cfg(st, "good")); done <- struct{}{} }()
		v, _ := json.Marshal(store.NodeRecord{Session: "n1-s"})
		if _, err := st.ControlCreate(ctx, store.NodeKey("n1"), v, 0); err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Second)
		e, _ := st.ControlGet(ctx, store.LeaderKey)
		_, rev, _ := st.Assignment(ctx, 1, 0)
		cancel()
		<-done
		<-done
		if rev == 0 {
			t.Fatalf("after 30s: leader key %s, shard 0 never assigned: a leader that cannot build its view kept the role", e.Value)
		}
	})
}
