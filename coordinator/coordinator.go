// Package coordinator places shards on node sessions. Every tickd is a candidate; the one that
// holds the `leader` lease runs placement rounds: it reassigns at once every shard whose owner has
// no live lease (failover), hands shards off gracefully through move.<S> for drains, shutdowns and
// load balancing, and writes shard.<S> — whose revision is the owner's fencing token. The leader
// keeps no state of its own: on election it rebuilds its view from the buckets.
package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/tickfence/tickfence/store"
)

// Bootstrap creates the cluster record and the buckets of its epoch on first start. If the cluster
// exists with another shard count and shardsSet says the operator asked for one, it is an error:
// S is fixed when the cluster is created.
func Bootstrap(ctx context.Context, st store.Store, want store.Cluster, shardsSet bool, log *slog.Logger) (store.Cluster, error) {
	got, err := st.Bootstrap(ctx, want)
	if err != nil {
		return store.Cluster{}, err
	}
	if shardsSet && got.Shards != want.Shards {
		return store.Cluster{}, fmt.Errorf("the cluster was created with %d shards; --shards %d cannot change it", got.Shards, want.Shards)
	}
	if log != nil {
		log.Info("cluster ready", "shards", got.Shards, "partitions", got.Partitions, "epoch", got.Epoch)
	}
	return got, nil
}

// errReplan: shard.<S> changed under us to another owner; the next round decides again.
var errReplan = errors.New("shard changed owner since it was read; replanning")

// assign writes shard.<S> compare-on-revision. A conflict is retried only if the re-read shows the
// same owner and session (a token rotation); otherwise the round replans (DESIGN 5).
func assign(ctx context.Context, st store.Store, epoch uint64, shard uint32, from store.Assignment, expect uint64, to store.Assignment) (uint64, error) {
	if from == to && expect != 0 {
		return expect, nil // already there: rewriting it would only rotate the owner's token
	}
	for {
		rev, err := st.Assign(ctx, epoch, shard, to, expect)
		if err == nil {
			return rev, nil
		}
		if !errors.Is(err, store.ErrConflict) {
			return 0, err
		}
		now, rev2, rerr := st.Assignment(ctx, epoch, shard)
		switch {
		case errors.Is(rerr, store.ErrNotFound) && expect != 0:
			expect = 0 // released meanwhile
			from = store.Assignment{}
		case rerr != nil:
			return 0, rerr
		case now == to:
			return rev2, nil
		case now == from && rev2 != expect:
			expect = rev2
		default:
			return 0, errReplan
		}
	}
}
