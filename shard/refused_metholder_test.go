package shard_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tickfence/tickfence/store"
)

// metHolderStore holds a create's initial write after the store answered it (so the answer is
// settled later), and the next LatestAssignment (the adopting rotation's read) until released.
type metHolderStore struct {
	store.Store
	mu      sync.Mutex
	writeID string
	wGate   gate
	laArmed bool
	laGate  gate
}

func (m *metHolderStore) Write(ctx context.Context, g store.Grant, id string, rec store.Record) (uint64, error) {
	rev, err := m.Store.Write(ctx, g, id, rec)
	m.mu.Lock()
	hold := m.writeID == id
	if hold {
		m.writeID = ""
	}
	m.mu.Unlock()
	if hold {
		m.wGate.pass()
	}
	return rev, err
}

func (m *metHolderStore) LatestAssignment(ctx context.Context, epoch uint64, s uint32) (store.Assignment, uint64, error) {
	m.mu.Lock()
	hold := m.laArmed
	m.laArmed = false
	m.mu.Unlock()
	if hold {
		m.laGate.pass()
	}
	return m.Store.LatestAssignment(ctx, epoch, s)
}

// The store met shard.<S> held by B, but by the time the answer is sorted the key names this
// session again (B handed it back) and the shard is adopting that revision. Stopping it on the
// holder the store met leaves a shard assigned to this live session unserved.
func TestMetHolderNeverStopsAShardThatIsOursAgain(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		st := &metHolderStore{Store: b.open(t)}
		n := newNode(t, st, "X", nodeOpt{})
		const s = 4
		g1 := n.grant(s)
		// S goes to B, unseen by X (its watch lags).
		t2, err := st.Assign(ctx, 1, s, store.Assignment{Owner: "B", Session: "B-s1"}, g1.Token)
		if err != nil {
			t.Fatal(err)
		}
		id := idIn(s, 31)
		st.mu.Lock()
		st.writeID = id
		st.mu.Unlock()
		wEntered, wRelease := st.wGate.arm()
		answer := n.submit(id, "c1", mustBody(t, map[string]any{"type": "create", "kind": "counter"}))
		<-wEntered // the initial write was refused by the fence at t2 (held by B)
		// B hands S back to X's same session; X's watch delivers that revision.
		t3, err := st.Assign(ctx, 1, s, g1.Assignment, t2)
		if err != nil {
			t.Fatal(err)
		}
		st.mu.Lock()
		st.laArmed = true
		st.mu.Unlock()
		laEntered, laRelease := st.laGate.arm()
		n.host.Apply(store.AssignmentEvent{Shard: s, Revision: t3, Assignment: g1.Assignment})
		<-laEntered // adopting t3
		close(wRelease)
		<-answer
		time.Sleep(100 * time.Millisecond) // the stale answer is sorted
		close(laRelease)
		deadline := time.Now().Add(3 * time.Second)
		for !n.host.Running(s) {
			if time.Now().After(deadline) {
				a, rev, err := st.Store.LatestAssignment(ctx, 1, s)
				if err != nil && !errors.Is(err, store.ErrNotFound) {
					t.Fatal(err)
				}
				t.Fatalf("shard %d is assigned to this session (%+v at revision %d) but no longer runs here: stopped on the holder the store met at %d", s, a, rev, t2)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}
