package coordinator

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tickfence/tickfence/internal/metrics"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/memstore"
)

// TestLeaderCollectsBlobs: of two candidates, only the leader collects blobs, once per interval,
// and its metrics say what the collections did; a failed collection is counted and retried next
// interval; when the candidates stop, so do the collections.
func TestLeaderCollectsBlobs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		if _, err := st.Bootstrap(context.Background(), store.Cluster{Shards: 4, Partitions: 1, Epoch: 1}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var runs [2]atomic.Int64
		regs := [2]*prometheus.Registry{prometheus.NewRegistry(), prometheus.NewRegistry()}
		done := make(chan error, 2)
		for i := range 2 {
			cfg := Config{Store: st, Node: []string{"n1", "n2"}[i], Session: []string{"s1", "s2"}[i], NoRebalance: true,
				Registerer: regs[i], BlobGCEvery: time.Minute,
				CollectBlobs: func(context.Context) (store.GCResult, error) {
					if runs[i].Add(1) == 2 {
						return store.GCResult{}, errors.New("the server is away")
					}
					return store.GCResult{Objects: 5, Referenced: 2, Young: 1, Deleted: []string{"i1/1-2-3", "i2/1-2-4"}, DeletedBytes: 300}, nil
				}}
			go func() { done <- Run(ctx, cfg) }()
		}
		time.Sleep(5*time.Minute + 30*time.Second)
		synctest.Wait()
		total := runs[0].Load() + runs[1].Load()
		if total != 5 || (runs[0].Load() != 0 && runs[1].Load() != 0) {
			t.Fatalf("collections: n1 %d, n2 %d; want 5 in 5.5 min, all by the one leader", runs[0].Load(), runs[1].Load())
		}
		leader := 0
		if runs[1].Load() > 0 {
			leader = 1
		}
		m := metrics.For(regs[leader])
		if got := testutil.ToFloat64(m.BlobGCRuns.WithLabelValues("ok")); got != 4 {
			t.Errorf("tickfence_blob_gc_runs_total{result=ok} = %v, want 4", got)
		}
		if got := testutil.ToFloat64(m.BlobGCRuns.WithLabelValues("error")); got != 1 {
			t.Errorf("tickfence_blob_gc_runs_total{result=error} = %v, want 1", got)
		}
		if got := testutil.ToFloat64(m.BlobGCDeleted); got != 8 {
			t.Errorf("tickfence_blob_gc_deleted_total = %v, want 8", got)
		}
		if got := testutil.ToFloat64(m.BlobGCDeletedBytes); got != 1200 {
			t.Errorf("tickfence_blob_gc_deleted_bytes_total = %v, want 1200", got)
		}
		if got := testutil.ToFloat64(m.BlobGCObjects); got != 3 {
			t.Errorf("tickfence_blob_gc_objects = %v, want 3 (5 listed, 2 deleted)", got)
		}
		if got := testutil.ToFloat64(m.BlobGCLastSuccess); got == 0 {
			t.Error("tickfence_blob_gc_last_success_timestamp_seconds is 0 after collections")
		}
		cancel()
		for range 2 {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		before := runs[0].Load() + runs[1].Load()
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		if after := runs[0].Load() + runs[1].Load(); after != before {
			t.Fatalf("%d collections after the candidates stopped", after-before)
		}
	})
}
