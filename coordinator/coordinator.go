// Package coordinator places shards on node sessions by writing shard.<S> in the data buckets;
// each write's revision is the token the owner fences its writes with. This first cut runs one
// node: it creates the cluster record and buckets on first start and assigns every shard to that
// node's current session. The placement is a pure function (Plan) so a multi-node planner can
// replace it without touching the I/O around it.
package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tickfence/tickfence/store"
)

// Config of a coordinator.
type Config struct {
	Store   store.Store
	Node    string
	Session string
	Logger  *slog.Logger
	// Progress, if set, is told how many shards of how many were checked so far in a round.
	Progress func(done, total int)
}

// Coordinator assigns shards.
type Coordinator struct {
	cfg Config
	log *slog.Logger
}

// New makes a coordinator.
func New(cfg Config) (*Coordinator, error) {
	if cfg.Store == nil || cfg.Node == "" || cfg.Session == "" {
		return nil, errors.New("coordinator: store, node and session are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Coordinator{cfg: cfg, log: cfg.Logger.With("role", "coordinator")}, nil
}

// Bootstrap creates the cluster record and the buckets of its epoch on first start. If the cluster
// exists with another shard count and shardsSet says the operator asked for one, it is an error:
// S is fixed when the cluster is created.
func (c *Coordinator) Bootstrap(ctx context.Context, want store.Cluster, shardsSet bool) (store.Cluster, error) {
	got, err := c.cfg.Store.Bootstrap(ctx, want)
	if err != nil {
		return store.Cluster{}, err
	}
	if shardsSet && got.Shards != want.Shards {
		return store.Cluster{}, fmt.Errorf("the cluster was created with %d shards; --shards %d cannot change it", got.Shards, want.Shards)
	}
	if got == want {
		c.log.Info("cluster ready", "shards", got.Shards, "partitions", got.Partitions, "epoch", got.Epoch)
	}
	return got, nil
}

// Owner is the current value and revision of one shard.<S>.
type Owner struct {
	store.Assignment
	Revision uint64 // 0: unassigned (never assigned, or released)
}

// Plan returns the assignment each shard should get, for shards whose current owner is not a live
// session. With one node, every shard goes to it.
func Plan(current []Owner, live []store.Assignment) map[uint32]store.Assignment {
	alive := map[store.Assignment]bool{}
	for _, a := range live {
		alive[a] = true
	}
	out := map[uint32]store.Assignment{}
	if len(live) == 0 {
		return out
	}
	for s, o := range current {
		if o.Revision != 0 && alive[o.Assignment] {
			continue // sticky: a live owner keeps its shard
		}
		out[uint32(s)] = live[s%len(live)]
	}
	return out
}

// Round reads every shard's owner and assigns those that need it to this node's session. It
// returns how many shards it assigned.
func (c *Coordinator) Round(ctx context.Context) (int, error) {
	st := c.cfg.Store
	cl, err := st.Cluster(ctx)
	if err != nil {
		return 0, err
	}
	current := make([]Owner, cl.Shards)
	for s := uint32(0); s < cl.Shards; s++ {
		a, rev, err := st.Assignment(ctx, cl.Epoch, s)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return 0, err
		}
		current[s] = Owner{Assignment: a, Revision: rev}
		if c.cfg.Progress != nil && (s+1)%64 == 0 {
			c.cfg.Progress(int(s+1), int(cl.Shards))
		}
	}
	me := store.Assignment{Owner: c.cfg.Node, Session: c.cfg.Session}
	plan := Plan(current, []store.Assignment{me})
	start := time.Now()
	moved := 0
	for s, a := range plan {
		expect := current[s].Revision
		for {
			rev, err := st.Assign(ctx, cl.Epoch, s, a, expect)
			if err == nil {
				c.log.Debug("shard assigned", "shard", s, "owner", a.Owner, "session", a.Session,
					"previous_owner", current[s].Owner, "previous_session", current[s].Session, "token", rev)
				moved++
				break
			}
			if !errors.Is(err, store.ErrConflict) {
				return moved, fmt.Errorf("assign shard %d: %w", s, err)
			}
			// Someone wrote shard.<S> since we read it: retry only if it still names the same owner
			// (a rotation); otherwise leave it to the next round's plan.
			now, rev2, rerr := st.Assignment(ctx, cl.Epoch, s)
			if rerr != nil && !errors.Is(rerr, store.ErrNotFound) {
				return moved, rerr
			}
			if now != current[s].Assignment || now == a {
				break
			}
			expect = rev2
		}
	}
	if moved > 0 {
		c.log.Info("placement round", "assigned", moved, "shards", cl.Shards, "took", time.Since(start).Round(time.Millisecond))
	}
	return moved, nil
}
