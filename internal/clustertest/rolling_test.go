package clustertest_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/tickfence/tickfence/internal/proc"
)

// TestR3RollingRestart (issue 36, item 3): the three servers of an R3 cluster restarted one by one
// the way an operator upgrades — SIGTERM (tickd server's graceful stop: every stream leadership
// moved to the others first, then lame duck mode), start it again, wait for its /healthz to say
// it has caught up, then the next — under command load: each server moved its leaderships before
// going, no command goes unanswered, every history stays linearizable, and no node self-fences.
func TestR3RollingRestart(t *testing.T) {
	srv, err := proc.StartServers(context.Background(), proc.ServersConfig{Partitions: 3,
		ClusterConfig: proc.ClusterConfig{Bin: tickd, DataDir: t.TempDir(), Lease: lease, Shards: 32, History: 1_000_000,
			ServerArgs: []string{"--log-json", "--metrics", "127.0.0.1:0"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Close()
		if t.Failed() {
			for _, p := range srv.Procs() {
				for _, l := range p.Lines(max(p.LineCount()-30, 0)) {
					b, _ := json.Marshal(l)
					t.Logf("%s: %s", p.Name, b)
				}
			}
		}
	})
	c := &cluster{Cluster: srv.Cluster, t: t}
	nodes := []string{"n1", "n2"}
	for _, n := range nodes {
		c.node(n)
	}
	c.waitState("every shard owned by a live node", 60*time.Second, proc.AllOwnedLive)
	for i := range srv.Members() {
		if _, err := srv.WaitReady(context.Background(), i); err != nil {
			t.Fatal(err)
		}
	}
	r := &r3{srv: srv}
	before := r.sumOf(nodes, "tickfence_self_fenced_total", "tickfence_token_rotations_total")
	l := c.startLoad("roll", 16, 4)
	l.waitSent(100, 60*time.Second)
	start := time.Now()
	for i, m := range srv.Members() {
		from := m.Proc().LineCount()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		t0 := time.Now()
		if err := srv.StopServerGracefully(ctx, i); err != nil {
			t.Fatal(err)
		}
		stopped := time.Since(t0)
		_, stop := m.Proc().Find(from, func(l map[string]any) bool { return l["msg"] == "stopped gracefully" })
		if stop == nil {
			t.Errorf("%s: no \"stopped gracefully\" line (its leaderships moved before lame duck mode)", m.Name)
		}
		if err := srv.RestartServer(ctx, i); err != nil {
			t.Fatal(err)
		}
		ready, err := srv.WaitReady(ctx, i)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: stopped in %v (%v leaderships moved first), ready %v after its start", m.Name, stopped.Round(time.Millisecond),
			stop["leaderships_moved"], ready.Round(time.Millisecond))
		l.waitSent(20, 30*time.Second)
	}
	took := time.Since(start)
	after := r.sumOf(nodes, "tickfence_self_fenced_total", "tickfence_token_rotations_total")
	var lat []time.Duration
	for _, op := range l.ops.Ops() {
		if !op.Return.IsZero() && op.Call.After(start) && op.Call.Before(start.Add(took)) {
			lat = append(lat, op.Return.Sub(op.Call))
		}
	}
	slices.Sort(lat)
	if len(lat) > 0 {
		t.Logf("rolling restart: %v; %d commands meanwhile, p50 %v, p99 %v, max %v; self-fences %v, token rotations %v",
			took.Round(100*time.Millisecond), len(lat), lat[len(lat)/2].Round(time.Millisecond), lat[len(lat)*99/100].Round(time.Millisecond),
			lat[len(lat)-1].Round(time.Millisecond), after[0]-before[0], after[1]-before[1])
	}
	if d := after[0] - before[0]; d != 0 {
		t.Errorf("%v self-fences during the rolling restart", d)
	}
	r.partitions = 3
	r.finish(c, l) // every command answered, histories linearizable and fenced
}

// sumOf sums each sample over the nodes.
func (r *r3) sumOf(nodes []string, samples ...string) []float64 {
	out := make([]float64, len(samples))
	for i, s := range samples {
		out[i] = r.sum(s, nodes...)
	}
	return out
}
