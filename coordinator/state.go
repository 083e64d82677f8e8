package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"time"

	"github.com/tickfence/tickfence/store"
)

// NodeView is a live node as operators see it.
type NodeView struct {
	ID        string           `json:"id"`
	Record    store.NodeRecord `json:"lease"`
	Revision  uint64           `json:"lease_revision"`
	LeaseAge  time.Duration    `json:"lease_age_ns"` // since the last renewal, by the server's timestamp
	Drained   bool             `json:"drained"`
	Weight    float64          `json:"weight"`
	Owned     int              `json:"shards_owned"`
	Load      float64          `json:"load"` // planner's estimate: tick CPU s/s of its shards
	Instances int              `json:"instances"`
}

// State is the whole cluster read from the buckets, for operators' tools.
type State struct {
	Cluster store.Cluster               `json:"cluster"`
	Leader  *store.LeaderRecord         `json:"leader,omitempty"`
	Nodes   []NodeView                  `json:"nodes"`
	Shards  []ShardState                `json:"shards"`
	Moves   map[uint32]store.MoveRecord `json:"moves,omitempty"`
	// Imbalance is max/mean node load (weighted); 1 is perfect.
	Imbalance float64 `json:"imbalance"`
	// Stuck lists leaving nodes that cannot hand off: all their peers are drained.
	Stuck []StuckHandOff `json:"stuck_leaving,omitempty"`
	snap  snapshot
}

// ReadState reads the control bucket and every shard.<S>.
func ReadState(ctx context.Context, st store.Store) (*State, error) {
	cl, err := st.Cluster(ctx)
	if err != nil {
		return nil, err
	}
	entries, err := st.ControlList(ctx, ">")
	if err != nil {
		return nil, err
	}
	v := &view{control: map[string]store.Entry{}, shards: make([]ShardState, cl.Shards)}
	for _, e := range entries {
		v.applyControl(e)
	}
	for s := uint32(0); s < cl.Shards; s++ {
		a, rev, err := st.Assignment(ctx, cl.Epoch, s)
		if err == nil {
			v.applyShard(store.AssignmentEvent{Shard: s, Revision: rev, Assignment: a})
		} else if !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
	}
	return v.state(cl, time.Now()), nil
}

// state is the State of what v holds, lease ages as of now.
func (v *view) state(cl store.Cluster, now time.Time) *State {
	snap := v.snapshot()
	v.mu.Lock()
	control := make(map[string]store.Entry, len(v.control))
	for k, e := range v.control {
		if kind, _ := store.SplitKey(k); kind == "node" || k == store.LeaderKey {
			control[k] = e
		}
	}
	v.mu.Unlock()
	out := &State{Cluster: cl, Shards: snap.shards, Moves: map[uint32]store.MoveRecord{}, snap: snap}
	if e, ok := control[store.LeaderKey]; ok {
		var r store.LeaderRecord
		if json.Unmarshal(e.Value, &r) == nil {
			out.Leader = &r
		}
	}
	for s, e := range snap.moves {
		var r store.MoveRecord
		if json.Unmarshal(e.Value, &r) == nil {
			out.Moves[s] = r
		}
	}
	in := snap.input(0, false, 0)
	loads := ShardLoads(in)
	for _, n := range in.Nodes {
		e := control[store.NodeKey(n.ID)]
		nv := NodeView{ID: n.ID, Record: snap.nodes[n.ID], Revision: e.Revision, Drained: n.Drained, Weight: n.Weight}
		if !e.Created.IsZero() {
			nv.LeaseAge = now.Sub(e.Created)
		}
		for s, sh := range in.Shards {
			if sh.Owner.Owner == n.ID && sh.Owner.Session == n.Session && sh.Revision != 0 {
				nv.Owned++
				nv.Load += loads[s]
			}
		}
		nv.Instances = nv.Record.Instances
		out.Nodes = append(out.Nodes, nv)
	}
	sort.Slice(out.Nodes, func(i, j int) bool { return out.Nodes[i].ID < out.Nodes[j].ID })
	out.Imbalance = MakePlan(in).Before
	out.Stuck = StuckLeaving(in)
	return out
}

// Plan computes a rebalancing plan over the current state: load-based moves only, at most
// maxMoves, as the leader would (drains and shutdowns are its business).
func (s *State) Plan(maxMoves int, tolerance float64) Plan {
	return MakePlan(s.snap.input(maxMoves, true, tolerance))
}

// Live reports whether a node holds a lease.
func (s *State) Live(node string) (NodeView, bool) {
	for _, n := range s.Nodes {
		if n.ID == node {
			return n, true
		}
	}
	return NodeView{}, false
}

// StuckHandOff is a leaving node that cannot hand its shards off: every other live node is
// drained, and the planner moves nothing onto a drained node. Undrain one to let it leave.
type StuckHandOff struct {
	Node    string   `json:"node"`
	Shards  int      `json:"shards"`
	Drained []string `json:"drained_peers"`
}

// StuckLeaving lists the leaving nodes that own shards while all their live peers are drained.
func StuckLeaving(in Input) []StuckHandOff {
	owned := map[string]int{}
	for _, sh := range in.Shards {
		if sh.Revision != 0 && !sh.Released {
			owned[sh.Owner.Owner+"\x00"+sh.Owner.Session]++
		}
	}
	var out []StuckHandOff
	for _, n := range in.Nodes {
		k := owned[n.ID+"\x00"+n.Session]
		if !n.Leaving || k == 0 {
			continue
		}
		var drained []string
		stuck := true
		for _, p := range in.Nodes {
			switch {
			case p.ID == n.ID || p.Leaving:
			case p.Drained:
				drained = append(drained, p.ID)
			default:
				stuck = false
			}
		}
		if stuck && len(drained) > 0 {
			out = append(out, StuckHandOff{Node: n.ID, Shards: k, Drained: drained})
		}
	}
	return out
}
