package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tickfence/tickfence/coordinator"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/memstore"
)

// cluster is a planner test world: nodes, shards with loads, and an owner per shard.
type cluster struct {
	nodes  []coordinator.NodeState
	shards []coordinator.ShardState
	load   []float64
}

func newCluster(rng *rand.Rand, nShards, nNodes int) *cluster {
	c := &cluster{shards: make([]coordinator.ShardState, nShards), load: make([]float64, nShards)}
	for i := 0; i < nNodes; i++ {
		c.nodes = append(c.nodes, coordinator.NodeState{ID: fmt.Sprintf("n%d", i), Session: fmt.Sprintf("s%d", i), Weight: 1})
	}
	for s := range c.load {
		c.load[s] = 0.001 + rng.Float64()*rng.Float64()*0.05 // skewed: a few hot shards
	}
	return c
}

func (c *cluster) input(k int) coordinator.Input {
	nodes := make([]coordinator.NodeState, len(c.nodes))
	for i, n := range c.nodes {
		n.TickCPU = map[uint32]float64{}
		for s, sh := range c.shards {
			if sh.Owner.Owner == n.ID && sh.Owner.Session == n.Session {
				n.TickCPU[uint32(s)] = c.load[s]
			}
		}
		nodes[i] = n
	}
	return coordinator.Input{Shards: append([]coordinator.ShardState(nil), c.shards...), Nodes: nodes, MaxMoves: k, Rebalance: true}
}

func (c *cluster) node(id string) coordinator.NodeState {
	for _, n := range c.nodes {
		if n.ID == id {
			return n
		}
	}
	panic(id)
}

// apply carries a plan out at once (moves complete within the round).
func (c *cluster) apply(p coordinator.Plan) {
	for s, id := range p.Failover {
		n := c.node(id)
		c.shards[s] = coordinator.ShardState{Owner: store.Assignment{Owner: n.ID, Session: n.Session}, Revision: c.shards[s].Revision + 1}
	}
	for _, m := range p.Moves {
		n := c.node(m.To)
		c.shards[m.Shard] = coordinator.ShardState{Owner: store.Assignment{Owner: n.ID, Session: n.Session}, Revision: c.shards[m.Shard].Revision + 1}
	}
}

func (c *cluster) nodeLoads() (max, mean, largest float64) {
	per := map[string]float64{}
	var total float64
	for s, sh := range c.shards {
		per[sh.Owner.Owner] += c.load[s]
		total += c.load[s]
		largest = math.Max(largest, c.load[s])
	}
	for _, n := range c.nodes {
		max = math.Max(max, per[n.ID])
	}
	return max, total / float64(len(c.nodes)), largest
}

func (c *cluster) checkOwners(t *testing.T) {
	t.Helper()
	live := map[store.Assignment]bool{}
	for _, n := range c.nodes {
		live[store.Assignment{Owner: n.ID, Session: n.Session}] = true
	}
	for s, sh := range c.shards {
		if !live[sh.Owner] {
			t.Fatalf("shard %d owned by %+v, not a live session", s, sh.Owner)
		}
	}
}

// TestPlannerProperties checks, on random clusters (the seed is printed): every shard ends with
// exactly one live owner; a node's death moves only its shards; a joining node only receives;
// after ⌈S/K⌉ rounds max/mean ≤ 1 + largest shard load / mean; a balanced cluster gets an empty plan.
func TestPlannerProperties(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	for trial := 0; trial < 200; trial++ {
		nShards, nNodes, k := 1+rng.IntN(300), 1+rng.IntN(8), 1+rng.IntN(16)
		c := newCluster(rng, nShards, nNodes)
		round := func() coordinator.Plan {
			p := coordinator.MakePlan(c.input(k))
			if len(p.Moves) > k {
				t.Fatalf("trial %d: %d moves, limit %d", trial, len(p.Moves), k)
			}
			c.apply(p)
			return p
		}
		round() // initial placement: all failover
		c.checkOwners(t)
		for i := 0; i < (nShards+k-1)/k; i++ {
			round()
		}
		max, mean, largest := c.nodeLoads()
		if max/mean > 1+largest/mean+1e-9 {
			t.Fatalf("trial %d (S=%d N=%d K=%d): max/mean %.3f > 1 + largest/mean %.3f", trial, nShards, nNodes, k, max/mean, 1+largest/mean)
		}
		// Converged: the next plan is empty.
		if p := coordinator.MakePlan(c.input(k)); len(p.Moves)+len(p.Failover) != 0 {
			// Allow one more pass, then it must be a fixed point.
			c.apply(p)
			for j := 0; j < nShards && len(p.Moves) > 0; j++ {
				p = coordinator.MakePlan(c.input(k))
				c.apply(p)
			}
			if len(p.Moves) != 0 {
				t.Fatalf("trial %d: plan never empties", trial)
			}
		}
		if nNodes > 1 {
			// A node dies: only its shards move, all at once.
			dead := c.nodes[rng.IntN(nNodes)]
			before := append([]coordinator.ShardState(nil), c.shards...)
			var alive []coordinator.NodeState
			for _, n := range c.nodes {
				if n.ID != dead.ID {
					alive = append(alive, n)
				}
			}
			c.nodes = alive
			p := coordinator.MakePlan(c.input(k))
			if len(p.Moves) != 0 {
				t.Fatalf("trial %d: failover round also moved %d healthy shards", trial, len(p.Moves))
			}
			for s := range before {
				_, moved := p.Failover[uint32(s)]
				if moved != (before[s].Owner.Owner == dead.ID) {
					t.Fatalf("trial %d: shard %d (owner %s) moved=%v after %s died", trial, s, before[s].Owner.Owner, moved, dead.ID)
				}
			}
			c.apply(p)
			c.checkOwners(t)
		}
		// A node joins a converged cluster: every move goes to it.
		for j := 0; j < nShards; j++ {
			p := coordinator.MakePlan(c.input(k))
			if len(p.Moves) == 0 {
				break
			}
			c.apply(p)
		}
		c.nodes = append(c.nodes, coordinator.NodeState{ID: "new", Session: "new-s", Weight: 1})
		per := map[string]float64{}
		var total float64
		in := c.input(k)
		for s, l := range coordinator.ShardLoads(in) { // the loads the planner sees
			per[c.shards[s].Owner.Owner] += l
			total += l
		}
		joinMean := total / float64(len(c.nodes))
		p := coordinator.MakePlan(in)
		movedOnce := map[uint32]bool{}
		for _, m := range p.Moves {
			// Only what it must: load leaves only nodes above the mean, no shard moves twice, and
			// the first move of a join goes to the empty new node.
			if per[m.From] < joinMean || movedOnce[m.Shard] || m.From == "new" {
				t.Fatalf("trial %d: after a join, shard %d moved %s (%.3f) → %s (%.3f), mean %.3f", trial, m.Shard, m.From, per[m.From], m.To, per[m.To], joinMean)
			}
			movedOnce[m.Shard] = true
		}
		if len(p.Moves) > 0 && p.Moves[0].To != "new" {
			t.Fatalf("trial %d: first move after a join went to %s, not the new node", trial, p.Moves[0].To)
		}
	}
}

func TestPlannerBalancedIsEmpty(t *testing.T) {
	c := &cluster{shards: make([]coordinator.ShardState, 12), load: make([]float64, 12)}
	for i := 0; i < 3; i++ {
		c.nodes = append(c.nodes, coordinator.NodeState{ID: fmt.Sprintf("n%d", i), Session: "s", Weight: 1})
	}
	for s := range c.shards {
		c.load[s] = 0.01
		c.shards[s] = coordinator.ShardState{Owner: store.Assignment{Owner: fmt.Sprintf("n%d", s%3), Session: "s"}, Revision: 1}
	}
	if p := coordinator.MakePlan(c.input(4)); len(p.Moves)+len(p.Failover) != 0 || p.Before != 1 {
		t.Fatalf("balanced cluster got plan %+v", p)
	}
}

func TestPlannerHonoursDrainPinAndWeight(t *testing.T) {
	c := &cluster{shards: make([]coordinator.ShardState, 8), load: make([]float64, 8)}
	c.nodes = []coordinator.NodeState{{ID: "a", Session: "s", Weight: 1}, {ID: "b", Session: "s", Weight: 3}, {ID: "c", Session: "s", Weight: 1, Drained: true}}
	for s := range c.shards {
		c.load[s] = 0.01
		c.shards[s] = coordinator.ShardState{Owner: store.Assignment{Owner: "a", Session: "s"}, Revision: 1, Pinned: s == 0}
	}
	c.shards[7].Owner.Owner = "c"
	for i := 0; i < 10; i++ {
		c.apply(coordinator.MakePlan(c.input(8)))
	}
	count := map[string]int{}
	for _, sh := range c.shards {
		count[sh.Owner.Owner]++
	}
	if count["c"] != 0 || c.shards[0].Owner.Owner != "a" || count["b"] <= count["a"] {
		t.Fatalf("owners %v (shard 0 on %s): want nothing on drained c, pinned shard 0 still on a, b (weight 3) above a", count, c.shards[0].Owner.Owner)
	}
}

func TestBootstrapRefusesAnotherShardCount(t *testing.T) {
	ctx := context.Background()
	st := memstore.New()
	if _, err := coordinator.Bootstrap(ctx, st, store.Cluster{Shards: 16, Partitions: 1, Epoch: 1}, true, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := coordinator.Bootstrap(ctx, st, store.Cluster{Shards: 99, Partitions: 1, Epoch: 1}, true, nil); err == nil {
		t.Fatal("Bootstrap accepted a different --shards for an existing cluster")
	}
	if cl, err := coordinator.Bootstrap(ctx, st, store.Cluster{Shards: 99, Partitions: 1, Epoch: 1}, false, nil); err != nil || cl.Shards != 16 {
		t.Fatalf("Bootstrap with the default shard count: %+v, %v", cl, err)
	}
}

// TestBootstrapShape: a new cluster records the partitions and replicas asked for; a node that asks
// an existing cluster for other ones explicitly is refused with both values named, and one that
// leaves them at their defaults joins the cluster as it is. A record without replicas reads as 1.
func TestBootstrapShape(t *testing.T) {
	ctx := context.Background()
	st := memstore.New()
	created := store.Cluster{Shards: 16, Partitions: 4, Epoch: 1, Replicas: 3}
	if cl, err := coordinator.BootstrapWith(ctx, st, created, coordinator.Require{Shards: true, Partitions: true, Replicas: true}, nil); err != nil || cl != created {
		t.Fatalf("Bootstrap of a new cluster = %+v, %v; want %+v", cl, err, created)
	}
	if cl, err := st.Cluster(ctx); err != nil || cl.Replicas != 3 || cl.Partitions != 4 {
		t.Fatalf("cluster record %+v, %v; want 4 partitions, 3 replicas recorded", cl, err)
	}
	def := store.DefaultCluster() // a node with every flag at its default: 256 shards, P 1, R1
	for _, tc := range []struct {
		req  coordinator.Require
		want []string // in the error; none: joins
	}{
		{coordinator.Require{}, nil},
		{coordinator.Require{Replicas: true}, []string{"created with 3 replicas", "--replicas 1 cannot change it", "leave --replicas out"}},
		{coordinator.Require{Partitions: true}, []string{"created with 4 partitions", "--partitions 1 cannot change it", "leave --partitions out"}},
		{coordinator.Require{Shards: true, Partitions: true, Replicas: true}, []string{"created with 16 shards, 4 partitions, 3 replicas",
			"--shards 256 --partitions 1 --replicas 1 cannot change it", "leave --shards and --partitions and --replicas out"}},
	} {
		cl, err := coordinator.BootstrapWith(ctx, st, def, tc.req, nil)
		if tc.want == nil {
			if err != nil || cl != created {
				t.Errorf("defaults, %+v: %+v, %v; want to join %+v", tc.req, cl, err, created)
			}
			continue
		}
		var se *coordinator.ShapeError
		if !errors.As(err, &se) {
			t.Fatalf("%+v: %v, want a ShapeError", tc.req, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: %q lacks %q", tc.req, err, w)
			}
		}
	}
	// Asking explicitly for what the cluster has is fine.
	if _, err := coordinator.BootstrapWith(ctx, st, created, coordinator.Require{Shards: true, Partitions: true, Replicas: true}, nil); err != nil {
		t.Fatal(err)
	}

	// An older record, without replicas: 1, so --replicas 1 joins and --replicas 3 is refused.
	old := memstore.New()
	if _, err := old.Bootstrap(ctx, store.Cluster{Shards: 16, Partitions: 1, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	one := store.Cluster{Shards: 16, Partitions: 1, Epoch: 1, Replicas: 1}
	if cl, err := coordinator.BootstrapWith(ctx, old, one, coordinator.Require{Replicas: true}, nil); err != nil || cl.ReplicasOr1() != 1 {
		t.Fatalf("--replicas 1 on an older record: %+v, %v", cl, err)
	}
	one.Replicas = 3
	if _, err := coordinator.BootstrapWith(ctx, old, one, coordinator.Require{Replicas: true}, nil); err == nil ||
		!strings.Contains(err.Error(), "created with 1 replica; --replicas 3") {
		t.Fatalf("--replicas 3 on an older record: %v, want refused naming 1 and 3", err)
	}
}
