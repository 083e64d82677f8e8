package memstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tickfence/tickfence/internal/clocktest"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/memstore"
)

// TestTTLRunsOnTheStoresClock: a control key's TTL ends exactly when the store's clock says so,
// with an expiry marker its watchers see, and a renewal restarts it.
func TestTTLRunsOnTheStoresClock(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	clock := clocktest.New(start)
	st := memstore.New().WithClock(clock)
	ch, err := st.ControlWatch(ctx, "node.*")
	if err != nil {
		t.Fatal(err)
	}
	rev, err := st.ControlCreate(ctx, "node.a", []byte(`{}`), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if e := next(t, ch); e.Revision != rev || !e.Created.Equal(start) {
		t.Fatalf("created %+v, want revision %d at %v (the store's clock)", e, rev, start)
	}
	clock.Advance(1500 * time.Millisecond)
	if rev, err = st.ControlUpdate(ctx, "node.a", []byte(`{}`), rev, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	next(t, ch)
	clock.Advance(1999 * time.Millisecond) // 2 s after the creation, 1.999 s after the renewal
	if _, err := st.ControlGet(ctx, "node.a"); err != nil {
		t.Fatalf("the key ended before its renewed TTL: %v", err)
	}
	clock.Advance(time.Millisecond)
	e := next(t, ch)
	if !e.Deleted || !e.Expired {
		t.Fatalf("after the TTL the watcher saw %+v, want an expiry marker", e)
	}
	if _, err := st.ControlGet(ctx, "node.a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after the TTL: ControlGet err = %v, want ErrNotFound", err)
	}
}

func next(t *testing.T, ch <-chan store.Entry) store.Entry {
	t.Helper()
	select {
	case e := <-ch:
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no watch event")
		return store.Entry{}
	}
}
