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
	"sync/atomic"

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
var errReplan = errors.New("shard changed since it was read; replanning")

// errNotLeader: the leader lease cannot be trusted now (or the round's time is up); no write.
var errNotLeader = errors.New("coordinator: leader lease not valid; not writing")

// term is one leadership: what the rounds need of the leader lease. Every grant it writes is named
// "<lease revision>.<counter>", unique across leaders, so a frozen leader's retry can tell a
// rotation by the owner (same value, same grant) from a decision someone made since (DESIGN 5).
type term struct {
	rev   uint64      // the leader lease's revision when it was acquired
	valid func() bool // the leader lease may be trusted now
	n     atomic.Uint64
}

func (t *term) nextGrant() string { return fmt.Sprintf("%d.%d", t.rev, t.n.Add(1)) }

// check is called immediately before every write of the coordinator.
func (t *term) check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", errNotLeader, err)
	}
	if !t.valid() {
		return errNotLeader
	}
	return nil
}

// sameSession: two values name the same owner session (whatever the grant).
func sameSession(a, b store.Assignment) bool { return a.Owner == b.Owner && a.Session == b.Session }

// movedFrom reports whether cur is still the grant a move was requested from: the same session
// and, where the record names it, the same grant (rotations keep it; a new grant does not).
func movedFrom(cur store.Assignment, rec store.MoveRecord) bool {
	return cur.Owner == rec.From && cur.Session == rec.FromSession && (rec.FromGrant == "" || cur.Grant == rec.FromGrant)
}

// assign grants shard.<S> to a session with a new grant, compare-on-revision against the value
// read (from at expect). A conflict is retried only if the re-read, through the stream leader,
// shows exactly the value read — owner, session and grant: a token rotation by its owner;
// anything else (A→B→A included) replans (DESIGN 5, model/coord.pml). regrant forces a new grant
// even if the session already holds the shard (it released it in a hand-off). It returns the value
// stored and its revision.
func assign(ctx context.Context, st store.Store, t *term, epoch uint64, shard uint32, from store.Assignment, expect uint64,
	to store.Assignment, regrant bool) (store.Assignment, uint64, error) {
	if !regrant && expect != 0 && sameSession(from, to) {
		return from, expect, nil // already there: rewriting it would only rotate the owner's token
	}
	to.Grant = t.nextGrant()
	for {
		if err := t.check(ctx); err != nil {
			return store.Assignment{}, 0, err
		}
		rev, err := st.Assign(ctx, epoch, shard, to, expect)
		if err == nil {
			return to, rev, nil
		}
		if !errors.Is(err, store.ErrConflict) {
			return store.Assignment{}, 0, err
		}
		now, rev2, rerr := st.LatestAssignment(ctx, epoch, shard)
		switch {
		case errors.Is(rerr, store.ErrNotFound):
			return store.Assignment{}, 0, errReplan // released meanwhile
		case rerr != nil:
			return store.Assignment{}, 0, rerr
		case now == from && rev2 != expect:
			expect = rev2 // rotated by its owner: the decision still stands
		case !regrant && sameSession(now, to):
			return now, rev2, nil // someone already granted it there
		default:
			return store.Assignment{}, 0, errReplan
		}
	}
}
