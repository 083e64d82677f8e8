// Package node is a tickfence node: it holds the node's lease (node.<id>) for a session, runs a
// shard.Host for that session, follows its grants and hand-off requests, self-fences when its
// lease cannot be trusted, and rejoins with a new session if the lease is lost. The shards
// themselves (load, register, rotate, rebuild) and their single-owner instances are package
// shard; the coordinator that assigns them is package coordinator.
package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tickfence/tickfence/internal/lease"
	"github.com/tickfence/tickfence/internal/metrics"
	"github.com/tickfence/tickfence/internal/watch"
	"github.com/tickfence/tickfence/shard"
	"github.com/tickfence/tickfence/store"
)

// Clock is the time a node's lease is decided by: Now for logs only, Monotonic (elapsed since a
// fixed point of the process, only moving forward) for renewals and self-fencing. Tests pass a
// fake one.
type Clock interface {
	Now() time.Time
	Monotonic() time.Duration
	// After and AfterFunc wait on the monotonic clock (time.After, time.AfterFunc).
	After(d time.Duration) <-chan time.Time
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// Config configures a Node: a Host config (its Session is made by the node) plus the lease.
type Config struct {
	shard.Config
	// LeaseTTL (whole seconds, default 2s) and LeaseMargin (default 500ms) of node.<id>.
	LeaseTTL    time.Duration
	LeaseMargin time.Duration
	Clock       Clock // nil: the system clock
	// P99Lateness, if set, is reported in the lease (it reads and resets a window).
	P99Lateness func() time.Duration
	// BeforeRelease, if set, runs in a hand-off after the instances are flushed and before the
	// move is marked released (fault tests crash the node there).
	BeforeRelease func(shard uint32, id string)
	// RideThrough is how long, from its last acknowledged renewal, the node keeps ticking when
	// it cannot renew its lease (0, the default: it pauses at TTL minus margin, as before;
	// DefaultRideThrough is the value to turn it on with). Opt-in for now: under the store-fault
	// nemesis it leaves about one run in a thousand with an instance unanswered after healing
	// (issue 36), which pausing at once does not. Its writes stay checked by the fence in the data stream,
	// which is what keeps a node whose shards were given to another from writing (DESIGN 4), so
	// a control bucket electing a new leader stops no instance; past it the node pauses every
	// shard until a renewal is acknowledged, then re-validates them by rotating their tokens.
	RideThrough time.Duration
}

// DefaultRideThrough, when ride-through is turned on, covers JetStream's elections of a control bucket leader (4–12 s measured on
// three servers) with room to spare, and bounds what a node cut off from the control plane may
// still do (tick, publish frames) before it stops.
const DefaultRideThrough = 15 * time.Second

// Node is one tickd node: it holds the lease node.<id> for a session, runs a Host for that session,
// follows its grants and hand-off requests, self-fences when its lease cannot be trusted, and
// rejoins with a new session if the lease is lost. A restarted node is a new session too: it never
// adopts the tokens of a previous life.
type Node struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics.Node
	leaving atomic.Bool

	mu      sync.Mutex
	host    *shard.Host
	lease   *lease.Lease
	session string
	wake    chan struct{}
}

// New validates the config.
func New(cfg Config) (*Node, error) {
	if cfg.Node == "" || cfg.Store == nil {
		return nil, errors.New("node: node ID and store are required")
	}
	if err := store.ValidID(cfg.Node); err != nil {
		return nil, fmt.Errorf("node ID: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = lease.NewSystemClock()
	}
	return &Node{cfg: cfg, log: cfg.Logger, metrics: metrics.For(cfg.Registerer), wake: make(chan struct{})}, nil
}

func newSession() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Host is the host of the current session (nil before the first lease).
func (n *Node) Host() *shard.Host {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.host
}

// Session is the current session.
func (n *Node) Session() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.session
}

// Ready is closed once the node holds its first lease and follows its grants.
func (n *Node) Ready() <-chan struct{} { return n.wake }

func (n *Node) record(session string) []byte {
	r := store.NodeRecord{Session: session, Leaving: n.leaving.Load()}
	if h := n.Host(); h != nil && h.Session() == session {
		l := h.Load()
		r.Shards, r.Instances, r.TickCPU = l.Shards, l.Instances, l.TickCPU
		r.Failed, r.FailedCount = l.Failed, l.FailedCount
	}
	if n.cfg.P99Lateness != nil {
		r.P99LatenessMs = float64(n.cfg.P99Lateness()) / 1e6
	}
	b, _ := json.Marshal(r)
	return b
}

// Run holds the lease and runs the node until ctx ends; then it releases the lease.
func (n *Node) Run(ctx context.Context) error {
	first := true
	for ctx.Err() == nil {
		session := newSession()
		host, l, err := n.join(ctx, session)
		if err != nil {
			if n.retryLater(ctx, "cannot join", err) {
				continue
			}
			return nil
		}
		if first {
			close(n.wake)
			first = false
		}
		newEpoch, err := n.serve(ctx, host, l, session)
		if ctx.Err() == nil && !newEpoch {
			n.log.Error("node lease lost: stopping every shard and rejoining with a new session", "session", session, "err", err)
			host.Abandon("lease_lost")
			continue
		}
		if newEpoch {
			// A restore sealed this epoch: nothing of this session can be written any more.
			n.log.Warn("the cluster moved to a new epoch: stopping every shard and rejoining", "session", session)
			host.Abandon("new_epoch")
		}
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if rerr := l.Release(rctx); rerr != nil {
			n.log.Warn("node lease not released", "err", rerr)
		}
		cancel()
	}
	return nil
}

// join starts a session: a Host for it, then the lease node.<id> naming it (waiting out the lease
// of an earlier life of this node ID). The lease pauses the host when it self-fences.
func (n *Node) join(ctx context.Context, session string) (*shard.Host, *lease.Lease, error) {
	cfg := n.cfg.Config
	cfg.Session = session
	cfg.Logger = n.log
	host, err := shard.New(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot start a session: %w", err)
	}
	waited, waitedAt := false, time.Duration(0)
	r := &rider{n: n, host: host}
	l, err := lease.Acquire(ctx, lease.Config{Store: n.cfg.Store, Key: store.NodeKey(n.cfg.Node),
		TTL: n.cfg.LeaseTTL, Margin: n.cfg.LeaseMargin, Clock: n.cfg.Clock, Logger: n.log,
		Value: func() []byte { return n.record(session) },
		Mine: func(v []byte) bool {
			var r store.NodeRecord
			return json.Unmarshal(v, &r) == nil && r.Session == session
		},
		Recreate:       true,
		OnFenced:       func() { r.fenced() },
		OnValid:        func() { r.valid() },
		ObserveRenewal: func(d time.Duration) { n.metrics.LeaseRenewal.Observe(d.Seconds()) },
	}, func(holder store.Entry) {
		if now := n.cfg.Clock.Monotonic(); !waited || now-waitedAt > 5*time.Second {
			n.log.Info("waiting for the live lease of this node ID to expire", "key", holder.Key, "revision", holder.Revision)
			waited, waitedAt = true, now
		}
	})
	if err != nil {
		host.Abandon("shutdown")
		return nil, nil, fmt.Errorf("cannot take the node lease: %w", err)
	}
	n.mu.Lock()
	n.host, n.lease, n.session = host, l, session
	n.mu.Unlock()
	n.log.Info("node joined", "session", session, "lease_revision", l.Revision())
	return host, l, nil
}

// serve follows the session's grants, hand-off requests and the cluster's epoch while renewing the
// lease; it returns when ctx ends, the lease is lost (its error), or a restore started a new epoch.
func (n *Node) serve(ctx context.Context, host *shard.Host, l *lease.Lease, session string) (newEpoch bool, err error) {
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var moved atomic.Bool
	wg.Add(3)
	go func() { defer wg.Done(); _ = host.Watch(wctx) }()
	go func() { defer wg.Done(); n.followMoves(wctx, host, session) }()
	go func() {
		defer wg.Done()
		if n.followEpoch(wctx, host.Cluster().Epoch) {
			moved.Store(true)
			stop()
		}
	}()
	err = l.Run(wctx)
	stop()
	wg.Wait()
	return moved.Load(), err
}

// retryLater waits a moment after a failure to (re)join — the store may be briefly unreachable —
// and reports whether to try again (false once ctx ends).
func (n *Node) retryLater(ctx context.Context, what string, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	n.log.Warn(what+"; retrying", "err", err)
	select {
	case <-ctx.Done():
		return false
	case <-n.cfg.Clock.After(time.Second):
		return true
	}
}

// follow keeps a control-bucket watch open until ctx ends: one that fails to start or ends is
// logged and opened again after a backoff (a node that silently stopped following hand-offs or
// epochs would keep its lease while ignoring the coordinator). handle returns true to stop.
func (n *Node) follow(ctx context.Context, filter string, handle func(store.Entry) bool) {
	watch.Keep(ctx, n.log.With("filter", filter), "control watch",
		func() (<-chan store.Entry, error) { return n.cfg.Store.ControlWatch(ctx, filter) }, handle, nil)
}

// followMoves hands off the shards the coordinator moves away from this session, and notes the
// ones arriving so their pause is measured.
func (n *Node) followMoves(ctx context.Context, host *shard.Host, session string) {
	handled := map[string]bool{} // move key@revision: a reopened watch replays them
	var wg sync.WaitGroup
	defer wg.Wait()
	n.follow(ctx, "move.*", func(e store.Entry) bool {
		if e.Deleted {
			return false
		}
		var rec store.MoveRecord
		if json.Unmarshal(e.Value, &rec) != nil {
			return false
		}
		_, name := store.SplitKey(e.Key)
		s, err := store.ShardName(name)
		if err != nil {
			return false
		}
		switch {
		case rec.State == store.MoveRequested && rec.From == n.cfg.Node && rec.FromSession == session:
			k := fmt.Sprintf("%s@%d", e.Key, e.Revision)
			if handled[k] {
				return false
			}
			handled[k] = true
			if rec.FromGrant != "" && !host.Holds(s, rec.FromGrant) {
				// Asked of an older grant (a leader's stale view): the coordinator settles it.
				n.log.Info("hand-off request for a grant this session no longer runs under; ignored",
					"shard", s, "grant", rec.FromGrant, "to", rec.To)
				return false
			}
			wg.Add(1)
			go func(e store.Entry, rec store.MoveRecord) {
				defer wg.Done()
				n.handOff(ctx, host, s, e, rec)
			}(e, rec)
		case rec.State != store.MoveRequested && rec.To == n.cfg.Node && rec.StoppedAt != 0:
			host.ExpectHandOff(s, time.Unix(0, rec.StoppedAt))
		}
		return false
	})
}

func (n *Node) handOff(ctx context.Context, host *shard.Host, s uint32, e store.Entry, rec store.MoveRecord) {
	start := time.Now()
	err := host.HandOff(ctx, s, func(stoppedAt time.Time) error {
		if n.cfg.BeforeRelease != nil {
			n.cfg.BeforeRelease(s, "")
		}
		rec.State, rec.StoppedAt = store.MoveReleased, stoppedAt.UnixNano()
		b, _ := json.Marshal(rec)
		_, err := n.cfg.Store.ControlUpdate(ctx, e.Key, b, e.Revision, 0)
		return err
	})
	if err == nil {
		n.log.Info("shard handed off", "shard", s, "to", rec.To, "reason", rec.Reason, "took", time.Since(start).Round(time.Millisecond))
		return
	}
	// Not handed on (the move was withdrawn, or the flush failed): if the shard is still ours,
	// take it back under a rotated token — some of its writes may have landed.
	a, rev, rerr := n.cfg.Store.LatestAssignment(ctx, host.Cluster().Epoch, s)
	if rerr != nil || a.Owner != n.cfg.Node || a.Session != host.Session() {
		return
	}
	g, rerr := n.cfg.Store.Rotate(ctx, store.Grant{Epoch: host.Cluster().Epoch, Shard: s, Token: rev, Assignment: a})
	if rerr != nil {
		n.log.Warn("shard not taken back after a failed hand-off", "shard", s, "err", rerr)
		return
	}
	host.Apply(store.AssignmentEvent{Shard: s, Revision: g.Token, Assignment: a})
}

// Leave hands every shard off before the node exits (SIGTERM): the node announces it is leaving,
// the coordinator moves its shards away, and whatever is left when no other node can take it (or
// when the hand-off's share of ctx's deadline is over) is flushed and released here. With a
// deadline on ctx the whole of Leave ends by it: hand-offs until flushReserve before it, then the
// flush of the rest (without one, the flush gets 10 s of its own once ctx ends). Shards neither
// handed off nor flushed and released by then (the store unreachable, a rotation that never
// settled) are a *LeaveError: they move to other nodes once this node's lease expires, with their
// last unwritten ticks lost.
func (n *Node) Leave(ctx context.Context) error {
	n.leaving.Store(true)
	n.mu.Lock()
	l, host := n.lease, n.host
	n.mu.Unlock()
	if host == nil {
		return nil
	}
	if l != nil {
		l.Renew()
	}
	handCtx, fctx := ctx, ctx
	if deadline, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		handCtx, cancel = context.WithDeadline(ctx, deadline.Add(-flushReserve(time.Until(deadline))))
		defer cancel()
	}
	last := time.Now()
	for len(host.Shards()) > 0 && n.othersAlive(handCtx) {
		if time.Since(last) > 2*time.Second {
			n.log.Info("leaving: handing shards off", "shards_left", len(host.Shards()))
			last = time.Now()
		}
		select {
		case <-handCtx.Done():
			n.log.Warn("leaving: hand-off deadline passed; flushing the rest here", "shards_left", len(host.Shards()))
			if _, ok := ctx.Deadline(); !ok {
				var cancel context.CancelFunc
				fctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
			}
			return closeHost(fctx, host)
		case <-n.cfg.Clock.After(100 * time.Millisecond):
		}
	}
	if len(host.Shards()) == 0 { // all handed on (else no other node could take them: Close releases them)
		n.awaitRegrants(ctx, host)
	}
	return closeHost(fctx, host)
}

// flushReserve is the part of a leave's remaining time kept for flushing and releasing what was
// not handed off: a third of it, at most 2 s (a flush is one write per instance, in parallel).
func flushReserve(left time.Duration) time.Duration {
	return min(max(left, 0)/3, 2*time.Second)
}

// closeHost flushes and releases the shards still held (Host.Close); those it could not are a
// *LeaveError.
func closeHost(ctx context.Context, host *shard.Host) error {
	held := host.Shards()
	err := host.Close(ctx)
	if err == nil {
		return nil
	}
	e := &LeaveError{Held: held, Shards: 1, Err: err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		e.Shards = len(j.Unwrap()) // one error per shard (Host.Close joins them)
	}
	return e
}

// LeaveError is a Leave that ended with shards neither handed off nor flushed and released: they
// move once the node's lease expires, and their instances lose the ticks not written yet.
type LeaveError struct {
	Shards int      // how many were left
	Held   []uint32 // the shards still held when the flush began (those left are among them)
	Err    error    // Host.Close's errors, one per shard left
	// Cause, if set, is what kept them (the caller's diagnosis, e.g. no NATS server reachable);
	// Error names it instead of the per-shard errors.
	Cause string
}

func (e *LeaveError) Error() string {
	why := e.Cause
	if why == "" {
		why = e.Err.Error()
		if j, ok := e.Err.(interface{ Unwrap() []error }); ok && len(j.Unwrap()) > 1 {
			why = fmt.Sprintf("%v (and %d more)", j.Unwrap()[0], len(j.Unwrap())-1)
		}
	}
	return fmt.Sprintf("%d of %d shards neither handed off nor flushed: %s", e.Shards, len(e.Held), why)
}

func (e *LeaveError) Unwrap() error { return e.Err }

// awaitRegrants keeps the lease (up to 5 s) until no shard key names this session any more: the
// shards it handed on are granted elsewhere by then. Exiting at once would drop the lease while
// the coordinator is still settling those hand-offs, and they would count as failovers.
func (n *Node) awaitRegrants(ctx context.Context, host *shard.Host) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		evs, err := n.cfg.Store.ListAssignments(ctx, host.Cluster().Epoch)
		named := false
		for _, ev := range evs {
			named = named || !ev.Deleted && ev.Owner == n.cfg.Node && ev.Session == host.Session()
		}
		if err == nil && !named {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-n.cfg.Clock.After(50 * time.Millisecond):
		}
	}
}

// othersAlive reports whether another node that is not leaving holds a lease.
func (n *Node) othersAlive(ctx context.Context) bool {
	es, err := n.cfg.Store.ControlList(ctx, "node.*")
	if err != nil {
		return true // cannot tell: keep waiting for the coordinator
	}
	for _, e := range es {
		var r store.NodeRecord
		if e.Key != store.NodeKey(n.cfg.Node) && json.Unmarshal(e.Value, &r) == nil && !r.Leaving {
			return true
		}
	}
	return false
}

// followEpoch reports true once the cluster record names an epoch other than the one given.
func (n *Node) followEpoch(ctx context.Context, epoch uint64) bool {
	changed := false
	n.follow(ctx, store.ClusterKey, func(e store.Entry) bool {
		var c store.Cluster
		changed = !e.Deleted && json.Unmarshal(e.Value, &c) == nil && c.Epoch != epoch
		return changed // the watch ends with the context its caller cancels next
	})
	return changed
}

// rider decides what a session does while its lease goes unrenewed (Config.RideThrough): it goes
// on ticking on the fence, and pauses every shard only once the ride-through is over.
type rider struct {
	n    *Node
	host *shard.Host

	mu     sync.Mutex
	riding bool        // the lease is not valid now
	paused bool        // the ride-through ran out: the host is paused
	stop   func() bool // cancels the pause
}

// fenced: the lease went unrenewed past TTL minus margin.
func (r *rider) fenced() {
	n := r.n
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.riding {
		return
	}
	r.riding = true
	ttl, margin := n.cfg.LeaseTTL, n.cfg.LeaseMargin
	if ttl == 0 {
		ttl = 2 * time.Second
	}
	if margin == 0 {
		margin = 500 * time.Millisecond
	}
	ride := n.cfg.RideThrough
	left := ride - (ttl - margin)
	if ride <= 0 || left <= 0 {
		r.pauseLocked()
		return
	}
	n.metrics.RideThroughs.Inc()
	n.metrics.RidingThrough.Set(1)
	n.log.Warn("node lease not renewed: ticking on, every write still checked by the fence", "session", r.host.Session(),
		"pause_in", left, "ride_through", ride)
	r.stop = n.cfg.Clock.AfterFunc(left, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.riding && !r.paused {
			r.pauseLocked()
		}
	})
}

func (r *rider) pauseLocked() {
	r.paused = true
	r.n.metrics.SelfFenced.Inc()
	r.n.metrics.RidingThrough.Set(0)
	r.host.Pause()
}

// valid: a renewal was acknowledged again.
func (r *rider) valid() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stop != nil {
		r.stop()
		r.stop = nil
	}
	r.n.metrics.RidingThrough.Set(0)
	if r.riding && !r.paused {
		r.n.log.Info("node lease renewed again: it was ridden through", "session", r.host.Session())
	}
	r.riding = false
	if r.paused {
		r.paused = false
		r.host.Resume()
	}
}
