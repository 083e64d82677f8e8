package coordinator

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tickfence/tickfence/internal/lease"
	"github.com/tickfence/tickfence/internal/metrics"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/memstore"
)

// TestUnownedShardsGauge: the leader's tickfence_shards_unowned counts the shards without a live
// owner and tickfence_shard_unowned_max_seconds how long the oldest has had none — the inputs of
// the "shard unowned for more than twice the lease" alert (deploy/prometheus). With no node, every
// shard is unowned and the age grows; a node joins and both drop to 0; it dies and, with nowhere
// to fail over to, they rise again.
func TestUnownedShardsGauge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 4)
		m := w.cfg.metrics
		if got := testutil.ToFloat64(m.LeaseTTL); got != 2 {
			t.Fatalf("tickfence_lease_ttl_seconds = %v; want 2 (the default TTL)", got)
		}
		w.start()
		defer w.stop()
		if got := testutil.ToFloat64(m.ShardsUnowned); got != 4 {
			t.Fatalf("no node: tickfence_shards_unowned = %v; want 4", got)
		}
		first := testutil.ToFloat64(m.ShardUnownedMaxAge)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if later := testutil.ToFloat64(m.ShardUnownedMaxAge); later < first+4.5 {
			t.Fatalf("tickfence_shard_unowned_max_seconds went from %v to %v in 5 s; want it to grow with the time unowned", first, later)
		}
		w.node("n1", false)
		w.settle()
		if n, age := testutil.ToFloat64(m.ShardsUnowned), testutil.ToFloat64(m.ShardUnownedMaxAge); n != 0 || age != 0 {
			t.Fatalf("every shard granted to n1: unowned %v, max age %v; want 0 and 0", n, age)
		}
		w.kill("n1")
		w.settle()
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if n, age := testutil.ToFloat64(m.ShardsUnowned), testutil.ToFloat64(m.ShardUnownedMaxAge); n != 4 || age < 3 {
			t.Fatalf("n1's lease gone, no other node: unowned %v, max age %v; want 4 and at least 3 s", n, age)
		}
	})
}

// TestElectionsCounter: tickfence_coordinator_elections_total counts every time the candidate
// becomes leader (the input of the leader-flapping alert): once at start, and again after its
// leader key was taken away and it won it back.
func TestElectionsCounter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if _, err := st.Bootstrap(ctx, store.DefaultCluster()); err != nil {
			t.Fatal(err)
		}
		cfg := Config{Store: st, Node: "a", Session: "a-s", Clock: lease.NewSystemClock(), Registerer: prometheus.NewRegistry()}
		m := metrics.For(cfg.Registerer)
		done := make(chan struct{})
		go func() { _ = Run(ctx, cfg); close(done) }()
		waitFor := func(what string, ok func() bool) {
			t.Helper()
			for start := time.Now(); !ok(); time.Sleep(10 * time.Millisecond) {
				if time.Since(start) > 10*time.Second {
					t.Fatalf("%s: elections %v, leader %v", what, testutil.ToFloat64(m.Elections), testutil.ToFloat64(m.CoordinatorLeader))
				}
			}
		}
		waitFor("first election", func() bool {
			return testutil.ToFloat64(m.Elections) == 1 && testutil.ToFloat64(m.CoordinatorLeader) == 1
		})
		if err := st.ControlDelete(ctx, store.LeaderKey, 0); err != nil { // the key is no longer ours
			t.Fatal(err)
		}
		waitFor("second election", func() bool {
			return testutil.ToFloat64(m.Elections) == 2 && testutil.ToFloat64(m.CoordinatorLeader) == 1
		})
		cancel()
		<-done
		if got := testutil.ToFloat64(m.CoordinatorLeader); got != 0 {
			t.Fatalf("stopped: tickfence_coordinator_leader = %v; want 0", got)
		}
	})
}
