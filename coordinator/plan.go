package coordinator

import (
	"math"
	"sort"

	"github.com/tickfence/tickfence/store"
)

// NodeState is a live node (it holds a lease) as the planner sees it.
type NodeState struct {
	ID      string
	Session string
	// Weight scales the load the node should carry (default 1).
	Weight float64
	// Drained nodes get nothing, and their shards move away; Leaving nodes (shutting down) too,
	// without counting against the move limit.
	Drained bool
	Leaving bool
	// TickCPU is the node's report: seconds of tick work per second, by shard.
	TickCPU map[uint32]float64
}

// ShardState is one shard as the planner sees it.
type ShardState struct {
	Owner    store.Assignment
	Revision uint64 // 0: unassigned
	Pinned   bool   // never moved by the rebalancer (only on failure, drain or shutdown)
	Moving   bool   // a graceful move is under way
	// Released: its owner stopped it in a hand-off that is not settled yet. Nobody runs it, so
	// it counts as having no owner: it is granted again (to its old owner, too, if need be).
	Released bool
}

// Input of a placement round.
type Input struct {
	Shards []ShardState
	Nodes  []NodeState
	// MaxMoves bounds graceful moves under way at once (moves already under way count).
	MaxMoves int
	// Rebalance allows load-based moves this round (the caller spaces rebalance rounds out).
	Rebalance bool
	// Tolerance: no load-based move unless max node load exceeds the mean by this factor
	// (default 0: any strict improvement).
	Tolerance float64
}

// Move is a graceful hand-off of a shard.
type Move struct {
	Shard  uint32 `json:"shard"`
	From   string `json:"from"`
	To     string `json:"to"`
	Reason string `json:"reason"` // drain, leave, rebalance
}

// Plan is what a round does.
type Plan struct {
	// Failover assigns shards whose owner has no live lease, at once (exempt from MaxMoves).
	Failover map[uint32]string `json:"failover,omitempty"`
	// Moves are graceful hand-offs to start.
	Moves []Move `json:"moves,omitempty"`
	// Before and After are max/mean node load (weighted), 1 is perfect balance.
	Before float64 `json:"imbalance_before"`
	After  float64 `json:"imbalance_after"`
}

type planNode struct {
	NodeState
	load float64
}

func (n *planNode) norm(extra float64) float64 { return (n.load + extra) / n.Weight }

// ShardLoads estimates every shard's load from the owners' reports. A shard nobody reports (new,
// unassigned, orphaned) gets the mean; every shard also gets a small base cost, so idle shards
// still spread by count.
func ShardLoads(in Input) []float64 {
	loads := make([]float64, len(in.Shards))
	known := make([]bool, len(in.Shards))
	bySession := map[store.Assignment]*NodeState{}
	for i := range in.Nodes {
		n := &in.Nodes[i]
		bySession[store.Assignment{Owner: n.ID, Session: n.Session}] = n
	}
	var sum float64
	var count int
	for s, sh := range in.Shards {
		if n := bySession[store.Assignment{Owner: sh.Owner.Owner, Session: sh.Owner.Session}]; n != nil && sh.Revision != 0 {
			if cpu, ok := n.TickCPU[uint32(s)]; ok {
				loads[s], known[s] = cpu, true
				sum += cpu
				count++
			}
		}
	}
	mean := 0.0
	if count > 0 {
		mean = sum / float64(count)
	}
	base := math.Max(mean*0.05, 1e-6)
	for s := range loads {
		if !known[s] {
			loads[s] = mean
		}
		loads[s] += base
	}
	return loads
}

// MakePlan is the placement policy, a pure function of its input: sticky (a healthy assignment
// moves only for a drain, a shutdown or a strict improvement of the load balance), load-aware,
// bounded, and honouring drains, pins and weights. A round does one of: fail over the shards
// without a live owner (and nothing else), or evacuate drained and leaving nodes, then rebalance.
func MakePlan(in Input) Plan {
	p := newPlanner(in)
	p.plan.Before = imbalance(p.nodes, p.ids)
	if p.failover(); len(p.plan.Failover) > 0 {
		// A membership change moves only what it must: nothing else this round.
		p.plan.After = imbalance(p.nodes, p.ids)
		return p.plan
	}
	p.evacuate()
	p.rebalance()
	p.plan.After = imbalance(p.nodes, p.ids)
	return p.plan
}

// planner is one MakePlan call's working state.
type planner struct {
	in       Input
	loads    []float64
	nodes    map[string]*planNode
	ids      []string    // sorted
	owner    []string    // live owner node of each shard, or ""
	eligible []*planNode // nodes that may receive shards
	budget   int         // graceful moves still allowed this round
	plan     Plan
}

func newPlanner(in Input) *planner {
	p := &planner{in: in, loads: ShardLoads(in), nodes: map[string]*planNode{}, owner: make([]string, len(in.Shards)),
		plan: Plan{Failover: map[uint32]string{}}}
	for _, n := range in.Nodes {
		if n.Weight <= 0 {
			n.Weight = 1
		}
		p.nodes[n.ID] = &planNode{NodeState: n}
		p.ids = append(p.ids, n.ID)
	}
	sort.Strings(p.ids)
	moving := 0
	for s, sh := range in.Shards {
		if n := p.nodes[sh.Owner.Owner]; n != nil && sh.Revision != 0 && n.Session == sh.Owner.Session && !sh.Released {
			p.owner[s] = n.ID
			n.load += p.loads[s]
		}
		if sh.Moving {
			moving++
		}
	}
	p.budget = in.MaxMoves - moving
	for _, id := range p.ids {
		if n := p.nodes[id]; !n.Drained && !n.Leaving {
			p.eligible = append(p.eligible, n)
		}
	}
	if len(p.eligible) == 0 { // everyone drained: better a drained owner than none
		for _, id := range p.ids {
			if n := p.nodes[id]; !n.Leaving {
				p.eligible = append(p.eligible, n)
			}
		}
	}
	return p
}

// best is the eligible node (other than except) least loaded once it carries l more.
func (p *planner) best(l float64, except string) *planNode {
	var b *planNode
	for _, n := range p.eligible {
		if n.ID != except && (b == nil || n.norm(l) < b.norm(l)) {
			b = n
		}
	}
	return b
}

// failover assigns, at once, every shard without a live owner.
func (p *planner) failover() {
	for s := range p.in.Shards {
		if p.owner[s] != "" {
			continue
		}
		if n := p.best(p.loads[s], ""); n != nil {
			p.plan.Failover[uint32(s)] = n.ID
			p.owner[s] = n.ID
			n.load += p.loads[s]
		}
	}
}

// move plans a graceful hand-off of shard s to to.
func (p *planner) move(s int, to *planNode, reason string) {
	from := p.nodes[p.owner[s]]
	from.load -= p.loads[s]
	to.load += p.loads[s]
	p.plan.Moves = append(p.plan.Moves, Move{Shard: uint32(s), From: from.ID, To: to.ID, Reason: reason})
	p.owner[s] = to.ID
}

// evacuate moves shards off drained and leaving nodes (leaving is exempt from the budget).
func (p *planner) evacuate() {
	for s, sh := range p.in.Shards {
		n := p.nodes[p.owner[s]]
		if n == nil || sh.Moving || !(n.Drained || n.Leaving) {
			continue
		}
		if n.Drained && !n.Leaving && p.budget <= 0 {
			continue
		}
		to := p.best(p.loads[s], n.ID)
		if to == nil || to.Drained || to.Leaving {
			continue
		}
		reason := "drain"
		if n.Leaving {
			reason = "leave"
		} else {
			p.budget--
		}
		p.move(s, to, reason)
	}
}

// rebalance moves from the most to the least loaded node while that strictly lowers the larger
// of the two. A node that received this round gives nothing, and one that gave receives nothing:
// sources stay above the mean and targets below it, so nothing churns.
func (p *planner) rebalance() {
	mean := meanLoad(p.nodes, p.ids)
	gave, got := map[string]bool{}, map[string]bool{}
	for p.in.Rebalance && p.budget > 0 && len(p.eligible) > 1 {
		var hi, lo *planNode
		for _, n := range p.eligible {
			if !got[n.ID] && (hi == nil || n.norm(0) > hi.norm(0)) {
				hi = n
			}
			if !gave[n.ID] && (lo == nil || n.norm(0) < lo.norm(0)) {
				lo = n
			}
		}
		if hi == nil || lo == nil || hi == lo || hi.norm(0) <= mean*(1+p.in.Tolerance) {
			return
		}
		pick, pickMax := -1, hi.norm(0)*(1-1e-9)
		for s, sh := range p.in.Shards {
			if p.owner[s] != hi.ID || sh.Pinned || sh.Moving {
				continue
			}
			after := math.Max((hi.load-p.loads[s])/hi.Weight, lo.norm(p.loads[s]))
			if after < pickMax {
				pick, pickMax = s, after
			}
		}
		if pick < 0 {
			return
		}
		p.move(pick, lo, "rebalance")
		gave[hi.ID], got[lo.ID] = true, true
		p.budget--
	}
}

func meanLoad(nodes map[string]*planNode, ids []string) float64 {
	var load, weight float64
	for _, id := range ids {
		if n := nodes[id]; !n.Drained && !n.Leaving {
			load += n.load
			weight += n.Weight
		}
	}
	if weight == 0 {
		return 0
	}
	return load / weight
}

// imbalance is max/mean of weighted node load over the nodes that should carry load.
func imbalance(nodes map[string]*planNode, ids []string) float64 {
	mean := meanLoad(nodes, ids)
	if mean == 0 {
		return 1
	}
	var hi float64
	for _, id := range ids {
		if n := nodes[id]; !n.Drained && !n.Leaving {
			hi = math.Max(hi, n.norm(0))
		}
	}
	return hi / mean
}
