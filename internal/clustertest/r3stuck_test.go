package clustertest_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/tickfence/tickfence/coordinator"
	"github.com/tickfence/tickfence/internal/proc"
	"github.com/tickfence/tickfence/store"
)

// TestR3CommandsThroughAFrozenServer shows a liveness defect of the node: a server that hangs
// (SIGSTOP here; a stuck process or a link that drops packets alike) while leading nothing stops
// every command to the instances of a node whose "commands" connection is on it, for as long as it
// hangs. The node's lease is renewed over its "store" connection on another server, so it keeps
// its shards and nothing fails over; its NATS client only notices a dead server after nats.go's
// default ping interval (2 minutes, two pings outstanding). The clients' retries meet the same
// subscription. Expected: commands answered again within a few seconds (a ping interval near
// the lease, or a node that gives its shards up when its commands connection stops working).
func TestR3CommandsThroughAFrozenServer(t *testing.T) {
	r := newR3(t)
	c := r.on(t)
	nodes := []string{"n1", "n2"}
	for _, id := range nodes {
		c.node(id)
	}
	c.waitState("every node owns shards", 60*time.Second, func(s *coordinator.State) bool {
		for _, id := range nodes {
			if n, ok := s.Live(id); !ok || n.Owned == 0 {
				return false
			}
		}
		return proc.AllOwnedLive(s)
	})
	// A node whose commands connection is on server 1 or 2 and whose store connection is not:
	// restart n2 until one is (each connection picks a server at random).
	victim, frozen := "", -1
	for attempt := 0; victim == ""; attempt++ {
		for _, id := range nodes {
			if cmd, st := r.srv.ConnServer(id, "commands"), r.srv.ConnServer(id, "store"); cmd > 0 && st >= 0 && st != cmd {
				victim, frozen = id, cmd
				break
			}
		}
		if victim != "" {
			break
		}
		if attempt == 10 {
			t.Fatalf("no node with its commands and store connections on different servers after %d restarts", attempt)
		}
		p := r.srv.Node("n2")
		signal(t, p, syscall.SIGTERM)
		<-p.Exited()
		c.node("n2")
	}
	// The frozen server leads no stream: its freeze only hangs the connections on it.
	ctx := context.Background()
	for _, stream := range []string{"KV_" + store.ControlBucket, r.dataStreams()[0], "tickfence-effects"} {
		if l, err := r.srv.StreamLeader(ctx, stream); err == nil && l == frozen {
			if err := r.srv.MoveLeader(ctx, stream, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	l := c.startLoad("hang", 16, 0) // the instances, no workers
	s := c.waitState(victim+" owns instances", 60*time.Second, owns(victim, 1))
	insts := c.instancesOf(s, victim)
	if len(insts) == 0 {
		t.Fatalf("%s owns no instance", victim)
	}
	var probe string
	for id := range insts {
		probe = id
		break
	}
	// Pinned: the rebalancer leaves its shard where it is (a failover would still move it).
	if _, err := c.Store.ControlCreate(ctx, store.PinKey(insts[probe]), []byte(`{}`), 0); err != nil {
		t.Fatal(err)
	}
	if s := c.state(); s.Shards[insts[probe]].Owner.Owner != victim {
		t.Fatalf("shard %d moved to %s before it was pinned", insts[probe], s.Shards[insts[probe]].Owner.Owner)
	}
	status := func(reqID string, within time.Duration) (time.Duration, error) {
		cctx, cancel := context.WithTimeout(ctx, within)
		defer cancel()
		start := time.Now()
		res, err := l.client.SendMap(cctx, probe, reqID, map[string]any{"type": "status"})
		if err == nil && !res.OK {
			err = fmt.Errorf("answered %+v", res)
		}
		return time.Since(start), err
	}
	if _, err := status("before", 10*time.Second); err != nil {
		t.Fatalf("status of %s before the freeze: %v", probe, err)
	}
	for _, id := range nodes {
		t.Logf("%s: commands connection on server %d, store connection on server %d", id, r.srv.ConnServer(id, "commands"), r.srv.ConnServer(id, "store"))
	}
	t.Logf("freezing %s (leads no stream); probing %s (shard %d on %s)", r.srv.Member(frozen).Name, probe, insts[probe], victim)
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := r.srv.StopServer(sctx, frozen); err != nil {
		t.Fatal(err)
	}
	const within = 15 * time.Second // lease, a failover and a margin; nats.go's ping takes minutes
	took, err := status("during", within)
	if cerr := r.srv.ContServer(frozen); cerr != nil {
		t.Fatal(cerr)
	}
	after, aerr := status("after", 30*time.Second)
	if err != nil {
		s := c.state()
		nv, _ := s.Live(victim)
		t.Errorf("status of %s (shard %d, owner %s, %s still live with %d shards) unanswered for %v while %s was frozen: %v; "+
			"answered %v after SIGCONT (%v)", probe, insts[probe], s.Shards[insts[probe]].Owner.Owner, victim, nv.Owned,
			within, r.srv.Member(frozen).Name, err, after.Round(time.Millisecond), aerr)
		return
	}
	t.Logf("status of %s answered %v into the freeze", probe, took.Round(time.Millisecond))
}
