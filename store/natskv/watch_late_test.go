package natskv_test

import (
	"context"
	"testing"
	"time"

	"github.com/tickfence/tickfence/store"
)

// TestLateWatchReportsExpiryInTime (a review of the control bucket without delete markers): a
// watch that starts late in a lease's life (a new coordinator leader, a restarted watcher) dated
// the lease from when it saw it, not from when it was written, and reported the expiry up to a
// whole TTL after the server removed the key. A 6 s lease, watched from 4 s in: removed at ~6 s,
// was reported at ~10 s; now within the server's own expiry lag (well under the 4 s it was late).
func TestLateWatchReportsExpiryInTime(t *testing.T) {
	s := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := s.Bootstrap(ctx, store.Cluster{Shards: 1, Partitions: 1, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	written := time.Now()
	if _, err := s.ControlCreate(ctx, "node.n1", []byte(`{}`), 6*time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * time.Second)
	ch, err := s.ControlWatch(ctx, "node.*")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.After(12 * time.Second)
	for {
		select {
		case e := <-ch:
			if e.Deleted {
				late := time.Since(written) - 6*time.Second
				t.Logf("expiry reported %v after the TTL ran out", late.Round(10*time.Millisecond))
				if late > 3*time.Second {
					t.Errorf("the watch reported the expiry %v after the lease's TTL ran out: dated from when it saw the lease, not from when it was written", late.Round(10*time.Millisecond))
				}
				return
			}
		case <-deadline:
			t.Fatal("no expiry reported within 12 s")
		}
	}
}
