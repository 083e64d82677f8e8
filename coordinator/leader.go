package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tickfence/tickfence/internal/lease"
	"github.com/tickfence/tickfence/internal/logkey"
	"github.com/tickfence/tickfence/internal/metrics"
	"github.com/tickfence/tickfence/store"
)

// Clock is the time a coordinator decides by: Now for logs only, Monotonic (elapsed since a
// fixed point of the process, only moving forward) for leases and hand-off timeouts. Tests
// pass a fake one.
type Clock interface {
	Now() time.Time
	Monotonic() time.Duration
	// After and AfterFunc wait on the monotonic clock (time.After, time.AfterFunc).
	After(d time.Duration) <-chan time.Time
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// Config of a coordinator candidate.
type Config struct {
	Store   store.Store
	Node    string
	Session string
	// TTL and Margin of the leader lease (defaults 2s and 500ms).
	TTL    time.Duration
	Margin time.Duration
	// Round is the interval between placement rounds (default 250ms); an expired node lease or a
	// move update starts one at once.
	Round time.Duration
	// NodeGrace: after this leader is elected, and after its own lease could not be renewed for
	// a while (the control bucket electing a leader), shards whose owner has no live lease are
	// failed over only once the control plane has been reachable this long (default TTL): nodes
	// that could not renew meanwhile get a lease's time to renew (they re-create an expired lease
	// under the same session) before they are declared dead. Hand-offs are not delayed.
	NodeGrace time.Duration
	// RebalanceEvery spaces out load-based rebalancing (default 1s).
	RebalanceEvery time.Duration
	// MaxMoves bounds graceful moves under way at once (default 8). Failover is exempt.
	MaxMoves int
	// HandOffTimeout: a move not released by its old owner within it is reassigned anyway.
	HandOffTimeout time.Duration
	// Tolerance: no load-based move while the busiest node is within this factor of the mean
	// (default 0.25; negative: 0, any strict improvement moves a shard).
	Tolerance float64
	// NoRebalance turns off load-based moves (drains, shutdowns and failover still happen).
	NoRebalance bool
	// CollectBlobs, if set, is run by the leader every BlobGCEvery (default DefaultBlobGCEvery)
	// while it leads: one collection of unreferenced blobs (e.g. natskv.Store.CollectBlobs with
	// its grace period). Leave it nil where this node's credential may not delete blobs.
	CollectBlobs func(ctx context.Context) (store.GCResult, error)
	BlobGCEvery  time.Duration
	Logger       *slog.Logger
	// Registerer receives the coordinator's metrics, shared with a node and engine configured
	// with the same one. nil: none.
	Registerer prometheus.Registerer
	metrics    *metrics.Node
	Clock      Clock // nil: the system clock
}

func (c *Config) defaults() error {
	if c.Store == nil || c.Node == "" || c.Session == "" {
		return errors.New("coordinator: store, node and session are required")
	}
	c.metrics = metrics.For(c.Registerer)
	if c.TTL == 0 {
		c.TTL = 2 * time.Second
	}
	c.metrics.LeaseTTL.Set(c.TTL.Seconds())
	if c.Margin == 0 {
		c.Margin = 500 * time.Millisecond
	}
	if c.NodeGrace == 0 {
		c.NodeGrace = c.TTL
	}
	if c.Round == 0 {
		c.Round = 250 * time.Millisecond
	}
	if c.RebalanceEvery == 0 {
		c.RebalanceEvery = time.Second
	}
	if c.MaxMoves == 0 {
		c.MaxMoves = 8
	}
	if c.HandOffTimeout == 0 {
		c.HandOffTimeout = 5 * time.Second
	}
	if c.BlobGCEvery <= 0 {
		c.BlobGCEvery = DefaultBlobGCEvery
	}
	switch {
	case c.Tolerance == 0:
		c.Tolerance = 0.25
	case c.Tolerance < 0:
		c.Tolerance = 0
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = lease.NewSystemClock()
	}
	return nil
}

// Run is a candidate: it tries to hold the leader lease and coordinates while it does, until ctx
// ends. Then, if leader, it releases the lease (compare-and-delete) so another takes over at once.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.defaults(); err != nil {
		return err
	}
	log := cfg.Logger.With("role", "coordinator")
	me, _ := json.Marshal(store.LeaderRecord{Node: cfg.Node, Session: cfg.Session})
	for ctx.Err() == nil {
		lctx, stepDown := context.WithCancel(ctx)
		l, err := lease.TryAcquire(ctx, lease.Config{Store: cfg.Store, Key: store.LeaderKey, TTL: cfg.TTL, Margin: cfg.Margin,
			Value: func() []byte { return me },
			Mine: func(v []byte) bool {
				var r store.LeaderRecord
				return json.Unmarshal(v, &r) == nil && r.Session == cfg.Session
			},
			Clock: cfg.Clock, Logger: log,
			OnFenced:       func() { cfg.metrics.SelfFenced.Inc(); stepDown() },
			ObserveRenewal: func(d time.Duration) { cfg.metrics.LeaseRenewal.Observe(d.Seconds()) }})
		if err != nil {
			stepDown()
			if !errors.Is(err, store.ErrConflict) {
				log.Warn("leader election", "err", err)
			}
			select {
			case <-ctx.Done():
			case <-cfg.Clock.After(cfg.Round):
			}
			continue
		}
		log.Info("became coordinator leader", "leader_revision", l.Revision())
		cfg.metrics.CoordinatorLeader.Set(1)
		cfg.metrics.Elections.Inc()
		t := &term{rev: l.Revision(), valid: l.Valid}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := l.Run(lctx); err != nil {
				log.Warn("coordinator lease lost", "err", err)
			}
			stepDown()
		}()
		if cfg.CollectBlobs != nil {
			wg.Add(1)
			go func() { defer wg.Done(); collectBlobs(lctx, cfg, log) }()
		}
		for lost := 0; ; {
			began := cfg.Clock.Monotonic()
			err = lead(lctx, cfg, log, t, l.Remaining)
			if cfg.Clock.Monotonic()-began > 10*cfg.Round {
				lost = 0 // it worked for a while
			}
			if errors.Is(err, errViewLost) && lctx.Err() == nil && lost < 5 {
				lost++
				// A watch of the view failed or ended: rebuild it rather than plan on a frozen
				// picture (shards of a dead node would never be failed over).
				log.Warn("rebuilding the coordinator's view", "err", err)
				select {
				case <-lctx.Done():
				case <-cfg.Clock.After(cfg.Round):
				}
				continue
			}
			if !errors.Is(err, errEpochChanged) || lctx.Err() != nil {
				break // including a view that could not be rebuilt five times: leave the role to another
			}
			lost = 0
			log.Info("new epoch: rebuilding the view from its buckets")
		}
		failed := lctx.Err() == nil // lead gave up by itself, the lease still ours
		stepDown()
		wg.Wait()
		cfg.metrics.CoordinatorLeader.Set(0)
		cfg.metrics.ShardsUnowned.Set(0) // another leader's view now
		cfg.metrics.ShardUnownedMaxAge.Set(0)
		// Release the key (compare-and-delete) so another candidate takes over at once instead of
		// after a TTL; a lease already lost is left alone by the compare.
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if rerr := l.Release(rctx); rerr != nil && !errors.Is(rerr, store.ErrConflict) {
			log.Warn("leader lease not released", "err", rerr)
		}
		cancel()
		if ctx.Err() != nil {
			log.Info("stepped down: shutting down")
			return nil
		}
		log.Warn("stepped down as coordinator leader", "err", err)
		if failed {
			// Leave the role to the other candidates for a lease's time before standing again.
			select {
			case <-ctx.Done():
			case <-cfg.Clock.After(cfg.TTL):
			}
		}
	}
	return nil
}

// errEpochChanged: a restore started a new epoch (DESIGN 6); the view is rebuilt from its buckets.
var errEpochChanged = errors.New("cluster epoch changed")

// errViewLost: a watch that feeds the view could not start or ended; the view is rebuilt.
var errViewLost = errors.New("a watch of the coordinator's view ended")

// view is the leader's picture of the buckets, fed by watches; rebuilt on every election.
type view struct {
	mu      sync.Mutex
	control map[string]store.Entry // live control keys
	shards  []ShardState
}

func (v *view) applyControl(e store.Entry) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if cur, ok := v.control[e.Key]; ok && cur.Revision >= e.Revision {
		return
	}
	if e.Deleted {
		delete(v.control, e.Key)
		return
	}
	v.control[e.Key] = e
}

func (v *view) applyShard(ev store.AssignmentEvent) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if int(ev.Shard) >= len(v.shards) || v.shards[ev.Shard].Revision > ev.Revision {
		return
	}
	if ev.Deleted {
		v.shards[ev.Shard] = ShardState{Revision: 0}
		return
	}
	v.shards[ev.Shard] = ShardState{Owner: ev.Assignment, Revision: ev.Revision}
}

type snapshot struct {
	nodes   map[string]store.NodeRecord
	weights map[string]float64
	drained map[string]bool
	pinned  map[uint32]bool
	moves   map[uint32]store.Entry
	shards  []ShardState
}

func (v *view) snapshot() snapshot {
	v.mu.Lock()
	defer v.mu.Unlock()
	s := snapshot{nodes: map[string]store.NodeRecord{}, weights: map[string]float64{}, drained: map[string]bool{},
		pinned: map[uint32]bool{}, moves: map[uint32]store.Entry{}, shards: append([]ShardState(nil), v.shards...)}
	for k, e := range v.control {
		kind, name := store.SplitKey(k)
		switch kind {
		case "node":
			var r store.NodeRecord
			if json.Unmarshal(e.Value, &r) == nil {
				s.nodes[name] = r
			}
		case "weight":
			var r store.WeightRecord
			if json.Unmarshal(e.Value, &r) == nil && r.Weight > 0 {
				s.weights[name] = r.Weight
			}
		case "drain":
			s.drained[name] = true
		case "pin":
			if sh, err := store.ShardName(name); err == nil {
				s.pinned[sh] = true
			}
		case "move":
			if sh, err := store.ShardName(name); err == nil {
				s.moves[sh] = e
			}
		}
	}
	return s
}

// Input builds the planner's input from a snapshot.
func (s snapshot) input(maxMoves int, rebalance bool, tolerance float64) Input {
	in := Input{MaxMoves: maxMoves, Rebalance: rebalance, Tolerance: tolerance, Shards: s.shards}
	for i := range in.Shards {
		in.Shards[i].Pinned = s.pinned[uint32(i)]
		if e, ok := s.moves[uint32(i)]; ok {
			var rec store.MoveRecord
			in.Shards[i].Moving = json.Unmarshal(e.Value, &rec) != nil || rec.State != store.MoveDone
			// Its owner stopped it in a hand-off: nobody runs it until it is granted again.
			in.Shards[i].Released = rec.State == store.MoveReleased && movedFrom(in.Shards[i].Owner, rec)
		}
	}
	ids := make([]string, 0, len(s.nodes))
	for id := range s.nodes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		r := s.nodes[id]
		w := s.weights[id]
		if w == 0 {
			w = 1
		}
		in.Nodes = append(in.Nodes, NodeState{ID: id, Session: r.Session, Weight: w, Drained: s.drained[id],
			Leaving: r.Leaving, TickCPU: r.TickCPU})
	}
	return in
}

// lead runs placement rounds until ctx ends (stepping down). Every write checks the term's lease
// first, and no round runs past the lease's deadline (remaining).
func lead(ctx context.Context, cfg Config, log *slog.Logger, t *term, remaining func() time.Duration) error {
	st := cfg.Store
	cl, err := st.Cluster(ctx)
	if err != nil {
		return err
	}
	v := &view{control: map[string]store.Entry{}, shards: make([]ShardState, cl.Shards)}
	kick := make(chan struct{}, 1)
	poke := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	// A new epoch (a restore) ends this view: the watches stop with it.
	epochCtx, epochChanged := context.WithCancelCause(ctx)
	defer epochChanged(nil)
	ctlCh, err := st.ControlWatch(epochCtx, ">")
	if err != nil {
		return fmt.Errorf("%w: control: %v", errViewLost, err)
	}
	shardCh, err := st.WatchAssignments(epochCtx, cl.Epoch)
	if err != nil {
		return fmt.Errorf("%w: assignments: %v", errViewLost, err)
	}
	// The watches replay current values first; reading them directly as well means the first
	// round sees everything even before the replay is through.
	entries, err := st.ControlList(ctx, ">")
	if err != nil {
		return fmt.Errorf("%w: list control keys: %v", errViewLost, err)
	}
	for _, e := range entries {
		v.applyControl(e)
	}
	assigned, err := st.ListAssignments(ctx, cl.Epoch)
	if err != nil {
		return fmt.Errorf("%w: list assignments: %v", errViewLost, err)
	}
	for _, ev := range assigned {
		v.applyShard(ev)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(2)
	go func() {
		defer wg.Done()
		for e := range ctlCh {
			if e.Key == store.ClusterKey && !e.Deleted {
				var c store.Cluster
				if json.Unmarshal(e.Value, &c) == nil && c.Epoch != cl.Epoch {
					epochChanged(errEpochChanged)
				}
			}
			v.applyControl(e)
			if kind, _ := store.SplitKey(e.Key); (kind == "node" && e.Deleted) || kind == "move" || kind == "drain" {
				poke() // a lease expired, a hand-off progressed, a drain began: act now
			}
		}
		epochChanged(errViewLost) // no-op if the view already ended for another cause
	}()
	go func() {
		defer wg.Done()
		for ev := range shardCh {
			v.applyShard(ev)
		}
		epochChanged(errViewLost)
	}()
	r := &rounds{cfg: cfg, log: log, st: st, epoch: cl.Epoch, v: v, t: t, firstSeen: map[string]time.Duration{},
		lastRebalance: cfg.Clock.Monotonic(), stuck: map[string]bool{}, unowned: map[uint32]time.Duration{},
		reachable: cfg.Clock.Monotonic()}
	tick := lease.NewTicker(cfg.Clock, cfg.Round)
	defer tick.Stop()
	outage := false
	for {
		d := remaining()
		if d <= 0 {
			outage = true // this leader's lease unrenewed: the control plane may be away for nodes too
		} else if outage {
			outage, r.reachable = false, cfg.Clock.Monotonic()
			log.Info("leader lease renewed again: shards of nodes without a live lease wait for them to renew", "grace", cfg.NodeGrace)
		}
		if d > 0 {
			rctx, cancel := context.WithTimeout(epochCtx, d)
			if err := r.round(rctx); err != nil && epochCtx.Err() == nil {
				log.Warn("placement round failed", "err", err)
			}
			cancel()
		}
		select {
		case <-epochCtx.Done():
			if cause := context.Cause(epochCtx); ctx.Err() == nil && (errors.Is(cause, errEpochChanged) || errors.Is(cause, errViewLost)) {
				return cause
			}
			return ctx.Err()
		case <-tick.C:
		case <-kick:
		}
	}
}

type rounds struct {
	cfg           Config
	log           *slog.Logger
	st            store.Store
	epoch         uint64
	v             *view
	t             *term
	stuck         map[string]bool          // leaving nodes already reported as unable to hand off
	firstSeen     map[string]time.Duration // move key@revision → when this leader first saw it (monotonic)
	lastRebalance time.Duration
	// reachable: since when (monotonic) this leader's view of the control plane has been whole
	// (its election, or its lease renewed again after a lapse); see Config.NodeGrace.
	reachable time.Duration
	deferred  bool                     // failovers are being deferred (logged once per grace)
	unowned   map[uint32]time.Duration // shard → when this leader first saw it without a live owner (monotonic)
}

func (r *rounds) seen(key string, rev uint64) time.Duration {
	k := fmt.Sprintf("%s@%d", key, rev)
	at, ok := r.firstSeen[k]
	if !ok {
		at = r.cfg.Clock.Monotonic()
		r.firstSeen[k] = at
	}
	return r.cfg.Clock.Monotonic() - at
}

// round is one placement round: settle hand-offs, fail over orphaned shards, start new moves.
func (r *rounds) round(ctx context.Context) error {
	snap := r.v.snapshot()
	live := map[string]bool{}
	releasedSeen := map[uint32]uint64{} // released moves this round tried to settle, by revision
	for s, e := range snap.moves {
		live[fmt.Sprintf("%s@%d", e.Key, e.Revision)] = true
		var rec store.MoveRecord
		if json.Unmarshal(e.Value, &rec) == nil && rec.State == store.MoveReleased {
			releasedSeen[s] = e.Revision
		}
		if err := r.settleMove(ctx, snap, s, e); err != nil {
			r.log.Warn("hand-off", "shard", s, "err", err)
		}
	}
	for k := range r.firstSeen { // forget moves that are gone or moved on
		if !live[k] {
			delete(r.firstSeen, k)
		}
	}
	snap = r.v.snapshot()
	now := r.cfg.Clock.Monotonic()
	rebalance := !r.cfg.NoRebalance && now-r.lastRebalance >= r.cfg.RebalanceEvery
	in := snap.input(r.cfg.MaxMoves, rebalance, r.cfg.Tolerance)
	for i := range in.Shards {
		// Only a release settleMove saw and could not settle is the planner's to place; one that
		// arrived since is settled (to the node it was meant for) next round.
		if s := uint32(i); in.Shards[i].Released && (releasedSeen[s] == 0 || releasedSeen[s] != snap.moves[s].Revision) {
			in.Shards[i].Released = false
		}
	}
	r.reportStuck(in)
	plan := MakePlan(in)
	if rebalance {
		r.lastRebalance = now
	}
	assigned := map[uint32]bool{}
	inGrace := now-r.reachable < r.cfg.NodeGrace
	for s, node := range plan.Failover {
		cur := snap.shards[s]
		released := in.Shards[s].Released
		// A session is certainly dead when its node holds a live lease under another one (it
		// restarted): no grace for it (nor, with leaders changing often, a failover deferred for
		// ever — the nemesis found shards of a restarted node's old session left unowned).
		live, alive := snap.nodes[cur.Owner.Owner]
		restarted := alive && live.Session != cur.Owner.Session
		if inGrace && !released && cur.Owner.Owner != "" && !restarted {
			if !r.deferred {
				r.deferred = true
				r.log.Info("failover deferred: the control plane has been reachable for less than a lease; its owner may renew yet",
					logkey.Shard, s, "owner", cur.Owner.Owner, "session", cur.Owner.Session, "grace_left", r.cfg.NodeGrace-(now-r.reachable))
			}
			continue
		}
		to := store.Assignment{Owner: node, Session: snap.nodes[node].Session}
		got, rev, err := assign(ctx, r.st, r.t, r.epoch, s, cur.Owner, cur.Revision, to, released)
		if err != nil {
			r.log.Warn("failover assignment", logkey.Shard, s, "to", node, logkey.Token, cur.Revision, logkey.CASResult, casResult(err), logkey.Err, err)
			continue
		}
		assigned[s] = true
		r.v.applyShard(store.AssignmentEvent{Shard: s, Revision: rev, Assignment: got})
		if released { // its owner had released it in a hand-off: that move is settled now
			if e, ok := snap.moves[s]; ok {
				if err := r.finishMove(ctx, e, node, "failover"); err != nil {
					r.log.Warn("hand-off", "shard", s, "err", err)
				}
			}
		}
		switch {
		case released:
			r.cfg.metrics.Handoffs.WithLabelValues("ok").Inc()
			r.log.Info("hand-off complete", logkey.Shard, s, "from", cur.Owner.Owner, "to", node, "result", "ok", "previous_token", cur.Revision,
				logkey.Token, rev, logkey.CurrentRevision, rev, logkey.CASResult, "ok", "grant", got.Grant)
		case cur.Revision != 0 && cur.Owner.Owner != "":
			r.cfg.metrics.Failovers.Inc()
			r.log.Info("failover: shard reassigned", logkey.Shard, s, "from", cur.Owner.Owner, "from_session", cur.Owner.Session,
				"to", node, "session", to.Session, "previous_token", cur.Revision, logkey.Token, rev, logkey.CurrentRevision, rev,
				logkey.CASResult, "ok", "grant", got.Grant)
		default:
			r.log.Debug("shard assigned", "shard", s, "to", node, "token", rev)
		}
	}
	if !inGrace {
		r.deferred = false
	}
	r.trackUnowned(snap, in, assigned)
	for _, m := range plan.Moves {
		cur := snap.shards[m.Shard]
		rec := store.MoveRecord{From: m.From, FromSession: cur.Owner.Session, FromGrant: cur.Owner.Grant, To: m.To,
			State: store.MoveRequested, Reason: m.Reason}
		b, _ := json.Marshal(rec)
		if err := r.t.check(ctx); err != nil {
			return err
		}
		if _, err := r.st.ControlCreate(ctx, store.MoveKey(m.Shard), b, 0); err != nil {
			if !errors.Is(err, store.ErrConflict) {
				return err
			}
			continue
		}
		r.log.Info("hand-off requested", "shard", m.Shard, "from", m.From, "to", m.To, "reason", m.Reason, "token", cur.Revision)
	}
	if len(plan.Moves) > 0 {
		r.log.Info("placement", "moves", len(plan.Moves), "imbalance_before", fmt.Sprintf("%.2f", plan.Before),
			"imbalance_after", fmt.Sprintf("%.2f", plan.After))
	}
	return nil
}

// casResult names the outcome of a failed compare-and-set for the logs (logkey.CASResult).
func casResult(err error) string {
	if errors.Is(err, store.ErrConflict) {
		return "conflict"
	}
	return "error"
}

// trackUnowned updates tickfence_shards_unowned and tickfence_shard_unowned_max_seconds: a shard
// has no live owner if it was never granted, its grant names a session without a live node lease,
// or its owner released it in a hand-off — unless this round has just granted it.
func (r *rounds) trackUnowned(snap snapshot, in Input, assigned map[uint32]bool) {
	now := r.cfg.Clock.Monotonic()
	n, oldest := 0, time.Duration(0)
	for i, sh := range snap.shards {
		s := uint32(i)
		owned := sh.Revision != 0 && sh.Owner.Owner != "" && snap.nodes[sh.Owner.Owner].Session == sh.Owner.Session &&
			!in.Shards[i].Released
		if owned || assigned[s] {
			delete(r.unowned, s)
			continue
		}
		at, ok := r.unowned[s]
		if !ok {
			at = now
			r.unowned[s] = at
		}
		n++
		oldest = max(oldest, now-at)
	}
	r.cfg.metrics.ShardsUnowned.Set(float64(n))
	r.cfg.metrics.ShardUnownedMaxAge.Set(oldest.Seconds())
}

// reportStuck logs, once each time it starts, that a leaving node cannot hand its shards off
// because every other live node is drained.
func (r *rounds) reportStuck(in Input) {
	now := map[string]bool{}
	for _, w := range StuckLeaving(in) {
		now[w.Node] = true
		if !r.stuck[w.Node] {
			r.log.Warn("leaving node cannot hand off: every other live node is drained (undrain one)", "node", w.Node,
				"shards", w.Shards, "drained", w.Drained)
		}
	}
	r.stuck = now
}

// settleMove drives one move.<S> forward.
func (r *rounds) settleMove(ctx context.Context, snap snapshot, s uint32, e store.Entry) error {
	var rec store.MoveRecord
	if err := json.Unmarshal(e.Value, &rec); err != nil {
		return r.deleteMove(ctx, e)
	}
	cur := snap.shards[s]
	fromLive := snap.nodes[rec.From].Session == rec.FromSession
	age := r.seen(e.Key, e.Revision)
	switch rec.State {
	case store.MoveDone:
		if age > 2*time.Second { // kept a moment so the new owner can read when the old one stopped
			return r.deleteMove(ctx, e)
		}
		return nil
	case store.MoveRequested:
		switch {
		case cur.Revision == 0 || !movedFrom(cur.Owner, rec) || !fromLive:
			// The owner changed or died: failover or a later plan takes it from here.
			r.cfg.metrics.Handoffs.WithLabelValues("aborted").Inc()
			r.log.Info("hand-off aborted", "shard", s, "from", rec.From, "to", rec.To, "owner", cur.Owner.Owner)
			return r.deleteMove(ctx, e)
		case age < r.cfg.HandOffTimeout:
			return nil // waiting for the old owner to release
		}
		rec.Result = "timeout"
	case store.MoveReleased:
		if cur.Revision == 0 || !movedFrom(cur.Owner, rec) {
			// Granted again since (a failover, or back to its source): the owner got it by a grant of its own;
			// handing it on from there now would be a move without a hand-off.
			r.cfg.metrics.Handoffs.WithLabelValues("aborted").Inc()
			r.log.Info("hand-off superseded: the shard was granted elsewhere after its release", "shard", s,
				"from", rec.From, "to", rec.To, "owner", cur.Owner.Owner)
			return r.deleteMove(ctx, e)
		}
		rec.Result = "ok"
	default:
		return r.deleteMove(ctx, e)
	}
	target, regrant := r.moveTarget(snap, rec, rec.State == store.MoveReleased && fromLive)
	if target == "" {
		if rec.State == store.MoveReleased {
			return nil // no live node at all: failover places it once one joins
		}
		// Timed out with nowhere else to go: the old owner never released and still runs it.
		r.cfg.metrics.Handoffs.WithLabelValues("aborted").Inc()
		r.log.Info("hand-off abandoned: no eligible node to take it; it stays with its owner", "shard", s, "from", rec.From, "to", rec.To)
		return r.deleteMove(ctx, e)
	}
	to := store.Assignment{Owner: target, Session: snap.nodes[target].Session}
	got, rev, err := assign(ctx, r.st, r.t, r.epoch, s, cur.Owner, cur.Revision, to, regrant)
	if err != nil {
		return err
	}
	r.v.applyShard(store.AssignmentEvent{Shard: s, Revision: rev, Assignment: got})
	r.cfg.metrics.Handoffs.WithLabelValues(rec.Result).Inc()
	r.log.Info("hand-off complete", logkey.Shard, s, "from", rec.From, "to", target, "result", rec.Result, "previous_token", cur.Revision,
		logkey.Token, rev, logkey.CurrentRevision, rev, logkey.CASResult, "ok", "grant", got.Grant)
	return r.finishMove(ctx, e, target, rec.Result)
}

// moveTarget picks the new owner of a moving shard: the node asked for if it can take it, else the
// least loaded other node that is neither drained nor leaving. A released shard must get an owner
// whatever happens (backToSource): then its source, with a new grant (regrant), and failing that a
// drained node.
func (r *rounds) moveTarget(snap snapshot, rec store.MoveRecord, backToSource bool) (target string, regrant bool) {
	in := snap.input(0, false, 0)
	undrained := false // another node could take it without being drained
	for _, n := range in.Nodes {
		undrained = undrained || n.ID != rec.From && !n.Drained && !n.Leaving
	}
	if n, ok := snap.nodes[rec.To]; ok && !n.Leaving && rec.To != rec.From && (!snap.drained[rec.To] || !undrained) {
		return rec.To, false
	}
	loads := map[string]float64{}
	sl := ShardLoads(in)
	for i, sh := range in.Shards {
		loads[sh.Owner.Owner] += sl[i]
	}
	best := func(ok func(NodeState) bool) string {
		target, min := "", -1.0
		for _, n := range in.Nodes {
			if n.ID == rec.From || !ok(n) {
				continue
			}
			if l := loads[n.ID] / n.Weight; min < 0 || l < min {
				min, target = l, n.ID
			}
		}
		return target
	}
	if t := best(func(n NodeState) bool { return !n.Drained && !n.Leaving }); t != "" || !backToSource {
		return t, false
	}
	if n := snap.nodes[rec.From]; !n.Leaving {
		return rec.From, true
	}
	if t := best(func(n NodeState) bool { return !n.Leaving }); t != "" {
		return t, false
	}
	return rec.From, true // leaving, but the only live node: it flushes and releases it on exit
}

// finishMove marks a move done, naming the owner it ended with (compare-on-revision).
func (r *rounds) finishMove(ctx context.Context, e store.Entry, to, result string) error {
	var rec store.MoveRecord
	_ = json.Unmarshal(e.Value, &rec)
	rec.State, rec.To, rec.Result = store.MoveDone, to, result
	b, _ := json.Marshal(rec)
	if err := r.t.check(ctx); err != nil {
		return err
	}
	mrev, err := r.st.ControlUpdate(ctx, e.Key, b, e.Revision, 0)
	if err == nil {
		r.v.applyControl(store.Entry{Key: e.Key, Value: b, Revision: mrev}) // not settled twice
	}
	if errors.Is(err, store.ErrConflict) {
		err = nil
	}
	return err
}

// deleteMove removes a settled or abandoned move.<S> (compare-and-delete). If it changed meanwhile
// the next round looks at it again.
func (r *rounds) deleteMove(ctx context.Context, e store.Entry) error {
	if err := r.t.check(ctx); err != nil {
		return err
	}
	err := r.st.ControlDelete(ctx, e.Key, e.Revision)
	if err == nil {
		r.v.applyControl(store.Entry{Key: e.Key, Revision: e.Revision + 1, Deleted: true})
	}
	if errors.Is(err, store.ErrConflict) {
		return nil
	}
	return err
}
