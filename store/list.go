package store

import (
	"context"
	"slices"
	"strings"
)

// Listed is one instance record as a listing found it.
type Listed struct {
	Shard    uint32
	ID       string
	Revision uint64
	// Record is the record as stored; a state kept as a blob is not read (State is empty and
	// Blob names it). Its Labels are what a listing filters on.
	Record Record
	// Err: the record could not be read (Record is then zero).
	Err error
}

// Lister is a store that lists every instance record of an epoch in one pass (natskv: one
// ordered consumer per data bucket), instead of a listing and a load per instance.
type Lister interface {
	// ListRecords calls fn with every instance record of the epoch (tombstones included), in no
	// order, until fn returns an error (returned). Like Instances, it may be served by a replica:
	// for display and matchmaking, never to decide what an owner does.
	ListRecords(ctx context.Context, epoch uint64, fn func(Listed) error) error
}

// ListOptions choose what ListInstances returns.
type ListOptions struct {
	// Labels: only instances holding every one of these labels (MatchLabels: "*" asks only for
	// the key). Empty: every instance.
	Labels map[string]string
	// Shard, if set, lists only that shard's instances.
	Shard *uint32
	// Ended includes the tombstones of ended instances (by default left out). A record that could
	// not be read is always listed (with its Err), whatever its labels.
	Ended bool
}

// ListInstances lists the instances of the cluster's live epoch that opt selects, sorted by ID:
// with one pass over the records if st is a Lister, else a listing and a load per instance.
func ListInstances(ctx context.Context, st Store, cl Cluster, opt ListOptions) ([]Listed, error) {
	var out []Listed
	keep := func(l Listed) {
		if opt.Shard != nil && l.Shard != *opt.Shard {
			return
		}
		if l.Err == nil && (l.Record.Ended && !opt.Ended || !MatchLabels(l.Record.Labels, opt.Labels)) {
			return
		}
		out = append(out, l)
	}
	if ls, ok := st.(Lister); ok && opt.Shard == nil {
		if err := ls.ListRecords(ctx, cl.Epoch, func(l Listed) error { keep(l); return nil }); err != nil {
			return nil, err
		}
	} else {
		for s := range cl.Shards {
			if opt.Shard != nil && s != *opt.Shard {
				continue
			}
			ids, err := st.Instances(ctx, cl.Epoch, s)
			if err != nil {
				return nil, err
			}
			for _, id := range ids {
				rec, rev, err := st.Load(ctx, cl.Epoch, s, id)
				keep(Listed{Shard: s, ID: id, Revision: rev, Record: rec, Err: err})
			}
		}
	}
	slices.SortFunc(out, func(a, b Listed) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}
