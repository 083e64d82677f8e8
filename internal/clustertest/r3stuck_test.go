package clustertest_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/coordinator"
	"github.com/tickfence/tickfence/internal/proc"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/natskv"
)

// TestR3CommandsThroughAFrozenServer: a server that hangs (SIGSTOP here; a stuck process or a link
// that drops packets alike) while leading nothing must not stop the commands to a node whose
// "commands" connection is on it for long: the node's lease is renewed over its "store"
// connection on another server, so it keeps its shards and nothing fails over; its client has to
// give the hung server up itself. With nats.go's default ping (2 minutes, two pings outstanding)
// the commands went unanswered for as long as the server hung; natskv.Connect pings every 2 s.
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
	// Pinned: the rebalancer leaves its shard where it is (a failover would still move it). The
	// rebalancer may move the chosen shard between the read and the pin: then another is chosen.
	var probe string
	var probeShard uint32
	for attempt := 0; probe == ""; attempt++ {
		if attempt == 10 {
			t.Fatalf("no instance of %s stayed there long enough to be pinned", victim)
		}
		s := c.waitState(victim+" owns instances", 60*time.Second, owns(victim, 1))
		insts := c.instancesOf(s, victim)
		if len(insts) == 0 {
			continue
		}
		var id string
		for id = range insts {
			break
		}
		if _, err := c.Store.ControlCreate(ctx, store.PinKey(insts[id]), []byte(`{}`), 0); err != nil {
			t.Fatal(err)
		}
		if c.state().Shards[insts[id]].Owner.Owner == victim {
			probe, probeShard = id, insts[id]
		} else if err := c.Store.ControlDelete(ctx, store.PinKey(insts[id]), 0); err != nil {
			t.Fatal(err)
		}
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
	t.Logf("freezing %s (leads no stream); probing %s (shard %d on %s)", r.srv.Member(frozen).Name, probe, probeShard, victim)
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
			"answered %v after SIGCONT (%v)", probe, probeShard, s.Shards[probeShard].Owner.Owner, victim, nv.Owned,
			within, r.srv.Member(frozen).Name, err, after.Round(time.Millisecond), aerr)
		return
	}
	t.Logf("status of %s answered %v into the freeze", probe, took.Round(time.Millisecond))
}

// TestR3LoadWithAFrozenReplica shows a liveness defect of the JetStream store on R3: Load reads an
// instance record with the KV API's Get, a direct get that any current replica may answer (KV
// buckets allow direct gets by default, and the data buckets keep it), picked at random among
// them; a replica on a server that hangs keeps its share and never answers. While one server of
// three is frozen about a third of the loads, from a client on any server, wait out their
// deadline. A node that rebuilds a shard or takes one over loads every instance of it, and each
// such wait costs it the whole timeout (5 s by default): in TestR3's SIGSTOP the data stream has a
// new leader after 6–9 s, yet ticking resumes only after SIGCONT. Expected: every load answered by
// a live replica (a read from the stream leader, or no direct gets on the data buckets).
func TestR3LoadWithAFrozenReplica(t *testing.T) {
	r := newR3(t)
	ctx := context.Background()
	st := r.srv.Store
	for start := time.Now(); ; time.Sleep(200 * time.Millisecond) {
		_, err := st.Bootstrap(ctx, store.Cluster{Shards: 32, Partitions: 1, Replicas: 3, Epoch: 1})
		if err == nil {
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("bootstrap: %v", err)
		}
	}
	const id = "frozen-probe"
	shard := store.ShardOf(id, 32)
	a := store.Assignment{Owner: "A", Session: "a"}
	tok, err := st.Assign(ctx, 1, shard, a, 0)
	if err != nil {
		t.Fatal(err)
	}
	g := store.Grant{Epoch: 1, Shard: shard, Token: tok, Assignment: a}
	if _, err := st.Create(ctx, g, id, store.Record{Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	// The leader and the test's client on server 0; server 2 holds a replica only.
	if err := r.srv.MoveLeader(ctx, r.dataStreams()[0], 0); err != nil {
		t.Fatal(err)
	}
	// A second store on server 1, a follower's server, as a node connected there reads.
	nc1, err := natskv.Connect("nats://"+r.srv.Member(1).ClientAddr, nats.IgnoreDiscoveredServers())
	if err != nil {
		t.Fatal(err)
	}
	defer nc1.Close()
	st1, err := natskv.Open(nc1, natskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st1.Close()
	loads := func() (failed int, last error) {
		for i := 0; i < 10; i++ {
			for _, s := range []*natskv.Store{st, st1} {
				lctx, cancel := context.WithTimeout(ctx, time.Second)
				_, _, err := s.Load(lctx, 1, shard, id)
				cancel()
				if err != nil {
					failed, last = failed+1, err
				}
			}
		}
		return failed, last
	}
	if failed, err := loads(); failed > 0 {
		t.Fatalf("%d of 20 loads failed before any fault: %v", failed, err)
	}
	// s2's replica current, as it is in a healthy cluster (a lagging one serves no direct get), and
	// its interest in them known to the other servers.
	r.current(t)
	time.Sleep(2 * time.Second)
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := r.srv.StopServer(sctx, 2); err != nil {
		t.Fatal(err)
	}
	failed, last := loads()
	if err := r.srv.ContServer(2); err != nil {
		t.Fatal(err)
	}
	if failed > 0 {
		t.Errorf("with s2 (a replica, not the leader) frozen, %d of 20 loads from clients on s0 (the leader's server) and s1 "+
			"got no answer within 1 s: %v", failed, last)
	}
}
