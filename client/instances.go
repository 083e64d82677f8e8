package client

import (
	"context"
	"fmt"
	"sync"

	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/natskv"
)

// Instance is an instance as a listing found it in the store.
type Instance struct {
	ID    string
	Shard uint32
	Kind  string
	// Tick is the stored record's (an instance ticking writes every few ticks: it is a little
	// behind).
	Tick uint64
	// Labels are the instance's labels: set by its create command ({"labels":{"mode":"heroic"}})
	// and by its Logic (actor.Lifecycle.SetLabel), as its last write stored them.
	Labels map[string]string
	// Passive: its last write passivated it (its kind's actor.KindOptions.Passivate); its next
	// command or watcher wakes it.
	Passive bool
}

// Instances lists the cluster's live instances that hold every one of labels (a value "*" asks
// only for the key; nil or empty: every instance), sorted by ID: for matchmaking ("an open heroic
// raid"), dashboards and tools. It reads every instance record of the live epoch in one pass of
// each data bucket (store.ListInstances), so it costs the store about one read of every record:
// call it every few seconds, not per player. The records are read as a replica holds them, a
// little behind their owners. Tombstones (ended instances) and records that cannot be read are
// left out.
//
// It needs a credential that reads the data buckets (an operator's, an observer's, a node's): a
// gateway's or a player's cannot (the players' account has no JetStream).
func (c *Client) Instances(ctx context.Context, labels map[string]string) ([]Instance, error) {
	st, err := c.lister()
	if err != nil {
		return nil, err
	}
	cl, err := st.Cluster(ctx)
	if err != nil {
		return nil, fmt.Errorf("list instances: %w", err)
	}
	ls, err := store.ListInstances(ctx, st, cl, store.ListOptions{Labels: labels})
	if err != nil {
		return nil, fmt.Errorf("list instances: %w", err)
	}
	out := make([]Instance, 0, len(ls))
	for _, l := range ls {
		if l.Err != nil {
			continue
		}
		out = append(out, Instance{ID: l.ID, Shard: l.Shard, Kind: l.Record.Kind, Tick: l.Record.Tick, Labels: l.Record.Labels, Passive: l.Record.Passive})
	}
	return out, nil
}

// listing is the store Instances reads, opened the first time.
type listing struct {
	mu sync.Mutex
	st *natskv.Store
}

func (c *Client) lister() (*natskv.Store, error) {
	c.list.mu.Lock()
	defer c.list.mu.Unlock()
	if c.list.st == nil {
		st, err := natskv.Open(c.nc, natskv.Options{OpenOnly: true})
		if err != nil {
			return nil, fmt.Errorf("list instances: %w", err)
		}
		c.list.st = st
	}
	return c.list.st, nil
}

func (c *Client) closeLister() {
	c.list.mu.Lock()
	defer c.list.mu.Unlock()
	if c.list.st != nil {
		_ = c.list.st.Close()
		c.list.st = nil
	}
}
