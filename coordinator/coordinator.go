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
	"strings"
	"sync/atomic"

	"github.com/tickfence/tickfence/store"
)

// Bootstrap creates the cluster record and the buckets of its epoch on first start. If the cluster
// exists with another shard count and shardsSet says the operator asked for one, it is an error:
// S is fixed when the cluster is created. It is BootstrapWith(Require{Shards: shardsSet}).
func Bootstrap(ctx context.Context, st store.Store, want store.Cluster, shardsSet bool, log *slog.Logger) (store.Cluster, error) {
	return BootstrapWith(ctx, st, want, Require{Shards: shardsSet}, log)
}

// Require names the parts of a new cluster's shape that the operator asked for explicitly
// (tickd's --shards, --partitions, --replicas). Shards, partitions and replicas are fixed when the
// cluster is created: joining a cluster that records another value for a required part is an
// error, and a part not required is taken from the cluster as it is.
type Require struct {
	Shards, Partitions, Replicas bool
}

// BootstrapWith creates the cluster record and the buckets of its epoch on first start (shaped
// like want), or joins the cluster there is; it refuses, naming both values, a cluster whose
// recorded shape differs from want in a part req requires. A record without replicas has 1.
func BootstrapWith(ctx context.Context, st store.Store, want store.Cluster, req Require, log *slog.Logger) (store.Cluster, error) {
	got, err := st.Bootstrap(ctx, want)
	if err != nil {
		return store.Cluster{}, err
	}
	if err := checkShape(got, want, req); err != nil {
		return store.Cluster{}, err
	}
	if log != nil {
		log.Info("cluster ready", "shards", got.Shards, "partitions", got.Partitions, "replicas", got.ReplicasOr1(), "epoch", got.Epoch)
	}
	return got, nil
}

// ShapeError is a node asking an existing cluster for another shape than it was created with.
type ShapeError struct {
	Got, Want store.Cluster
	Parts     []string // the flags that differ: "--shards", "--partitions", "--replicas"
}

func (e *ShapeError) Error() string {
	var was, asked []string
	for _, p := range e.Parts {
		switch p {
		case "--shards":
			was, asked = append(was, plural(uint64(e.Got.Shards), "shard")), append(asked, fmt.Sprintf("--shards %d", e.Want.Shards))
		case "--partitions":
			was, asked = append(was, plural(uint64(e.Got.Partitions), "partition")), append(asked, fmt.Sprintf("--partitions %d", e.Want.Partitions))
		case "--replicas":
			was, asked = append(was, plural(uint64(e.Got.ReplicasOr1()), "replica")), append(asked, fmt.Sprintf("--replicas %d", e.Want.ReplicasOr1()))
		}
	}
	return fmt.Sprintf("the cluster was created with %s; %s cannot change it (a cluster's shards, partitions and replicas "+
		"are fixed when it is created): leave %s out to join it as it is, or create a new cluster on other JetStream storage "+
		"(another NATS server or account, or a new --data directory)",
		strings.Join(was, ", "), strings.Join(asked, " "), strings.Join(e.Parts, " and "))
}

func plural(n uint64, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// CheckShape is BootstrapWith's judgement of a cluster got against the shape want: a
// *ShapeError naming the parts req requires that differ, or nil.
func CheckShape(got, want store.Cluster, req Require) error { return checkShape(got, want, req) }

func checkShape(got, want store.Cluster, req Require) error {
	e := &ShapeError{Got: got, Want: want}
	if req.Shards && got.Shards != want.Shards {
		e.Parts = append(e.Parts, "--shards")
	}
	if req.Partitions && got.Partitions != want.Partitions {
		e.Parts = append(e.Parts, "--partitions")
	}
	if req.Replicas && got.ReplicasOr1() != want.ReplicasOr1() {
		e.Parts = append(e.Parts, "--replicas")
	}
	if len(e.Parts) == 0 {
		return nil
	}
	return e
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
