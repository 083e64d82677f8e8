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

	"github.com/tickfence/tickfence/internal/lease"
	"github.com/tickfence/tickfence/internal/metrics"
	"github.com/tickfence/tickfence/store"
)

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
	// RebalanceEvery spaces out load-based rebalancing (default 1s).
	RebalanceEvery time.Duration
	// MaxMoves bounds graceful moves under way at once (default 8). Failover is exempt.
	MaxMoves int
	// HandOffTimeout: a move not released by its old owner within it is reassigned anyway.
	HandOffTimeout time.Duration
	// Tolerance: no load-based move while the busiest node is within this factor of the mean.
	Tolerance float64
	// NoRebalance turns off load-based moves (drains, shutdowns and failover still happen).
	NoRebalance bool
	Logger      *slog.Logger
	Metrics     *metrics.Node
	Clock       lease.Clock
}

func (c *Config) defaults() error {
	if c.Store == nil || c.Node == "" || c.Session == "" || c.Metrics == nil {
		return errors.New("coordinator: store, node, session and metrics are required")
	}
	if c.TTL == 0 {
		c.TTL = 2 * time.Second
	}
	if c.Margin == 0 {
		c.Margin = 500 * time.Millisecond
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
	if c.Tolerance == 0 {
		c.Tolerance = 0.25
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
			OnFenced:       func() { cfg.Metrics.SelfFenced.Inc(); stepDown() },
			ObserveRenewal: func(d time.Duration) { cfg.Metrics.LeaseRenewal.Observe(d.Seconds()) }})
		if err != nil {
			stepDown()
			if !errors.Is(err, store.ErrConflict) {
				log.Warn("leader election", "err", err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(cfg.Round):
			}
			continue
		}
		log.Info("became coordinator leader", "leader_revision", l.Revision())
		cfg.Metrics.CoordinatorLeader.Set(1)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := l.Run(lctx); err != nil {
				log.Warn("coordinator lease lost", "err", err)
			}
			stepDown()
		}()
		for {
			err = lead(lctx, cfg, log)
			if !errors.Is(err, errEpochChanged) || lctx.Err() != nil {
				break
			}
			log.Info("new epoch: rebuilding the view from its buckets")
		}
		stepDown()
		wg.Wait()
		cfg.Metrics.CoordinatorLeader.Set(0)
		if ctx.Err() != nil {
			rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if rerr := l.Release(rctx); rerr != nil {
				log.Warn("leader lease not released", "err", rerr)
			}
			cancel()
			log.Info("stepped down: shutting down")
			return nil
		}
		log.Warn("stepped down as coordinator leader", "err", err)
	}
	return nil
}

// errEpochChanged: a restore started a new epoch (DESIGN 6); the view is rebuilt from its buckets.
var errEpochChanged = errors.New("cluster epoch changed")

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

// lead runs placement rounds until ctx ends (stepping down).
func lead(ctx context.Context, cfg Config, log *slog.Logger) error {
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
		return err
	}
	shardCh, err := st.WatchAssignments(epochCtx, cl.Epoch)
	if err != nil {
		return err
	}
	// The watches replay current values first; reading them directly as well means the first
	// round sees everything even before the replay is through.
	entries, err := st.ControlList(ctx, ">")
	if err != nil {
		return err
	}
	for _, e := range entries {
		v.applyControl(e)
	}
	for s := uint32(0); s < cl.Shards; s++ {
		a, rev, err := st.Assignment(ctx, cl.Epoch, s)
		if err == nil {
			v.applyShard(store.AssignmentEvent{Shard: s, Revision: rev, Assignment: a})
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
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
	}()
	go func() {
		defer wg.Done()
		for ev := range shardCh {
			v.applyShard(ev)
		}
	}()
	r := &rounds{cfg: cfg, log: log, st: st, epoch: cl.Epoch, v: v, firstSeen: map[string]time.Duration{},
		lastRebalance: cfg.Clock.Monotonic()}
	t := time.NewTicker(cfg.Round)
	defer t.Stop()
	for {
		if err := r.round(epochCtx); err != nil && epochCtx.Err() == nil {
			log.Warn("placement round failed", "err", err)
		}
		select {
		case <-epochCtx.Done():
			if errors.Is(context.Cause(epochCtx), errEpochChanged) {
				return errEpochChanged
			}
			return ctx.Err()
		case <-t.C:
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
	firstSeen     map[string]time.Duration // move key@revision → when this leader first saw it (monotonic)
	lastRebalance time.Duration
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
	for s, e := range snap.moves {
		live[fmt.Sprintf("%s@%d", e.Key, e.Revision)] = true
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
	plan := MakePlan(snap.input(r.cfg.MaxMoves, rebalance, r.cfg.Tolerance))
	if rebalance {
		r.lastRebalance = now
	}
	for s, node := range plan.Failover {
		cur := snap.shards[s]
		to := store.Assignment{Owner: node, Session: snap.nodes[node].Session}
		rev, err := assign(ctx, r.st, r.epoch, s, cur.Owner, cur.Revision, to)
		if err != nil {
			r.log.Warn("failover assignment", "shard", s, "to", node, "err", err)
			continue
		}
		r.v.applyShard(store.AssignmentEvent{Shard: s, Revision: rev, Assignment: to})
		if cur.Revision != 0 && cur.Owner.Owner != "" {
			r.cfg.Metrics.Failovers.Inc()
			r.log.Info("failover: shard reassigned", "shard", s, "from", cur.Owner.Owner, "from_session", cur.Owner.Session,
				"to", node, "session", to.Session, "token", rev)
		} else {
			r.log.Debug("shard assigned", "shard", s, "to", node, "token", rev)
		}
	}
	for _, m := range plan.Moves {
		cur := snap.shards[m.Shard]
		rec := store.MoveRecord{From: m.From, FromSession: cur.Owner.Session, To: m.To, State: store.MoveRequested, Reason: m.Reason}
		b, _ := json.Marshal(rec)
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

// settleMove drives one move.<S> forward.
func (r *rounds) settleMove(ctx context.Context, snap snapshot, s uint32, e store.Entry) error {
	var rec store.MoveRecord
	if err := json.Unmarshal(e.Value, &rec); err != nil {
		return r.deleteMove(ctx, e)
	}
	cur := snap.shards[s]
	from := store.Assignment{Owner: rec.From, Session: rec.FromSession}
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
		case cur.Owner != from || !fromLive:
			// The owner changed or died: failover or a later plan takes it from here.
			r.cfg.Metrics.Handoffs.WithLabelValues("aborted").Inc()
			r.log.Info("hand-off aborted", "shard", s, "from", rec.From, "to", rec.To, "owner", cur.Owner.Owner)
			return r.deleteMove(ctx, e)
		case age < r.cfg.HandOffTimeout:
			return nil // waiting for the old owner to release
		}
		rec.Result = "timeout"
	case store.MoveReleased:
		rec.Result = "ok"
	default:
		return r.deleteMove(ctx, e)
	}
	// Assign the new owner: the one asked for if it can take it, else the best other node.
	target := rec.To
	if n, ok := snap.nodes[target]; !ok || n.Leaving || target == rec.From {
		target = ""
		in := snap.input(0, false, 0)
		best := -1.0
		loads := map[string]float64{}
		sl := ShardLoads(in)
		for i, sh := range in.Shards {
			loads[sh.Owner.Owner] += sl[i]
		}
		for _, n := range in.Nodes {
			if n.ID == rec.From || n.Drained || n.Leaving {
				continue
			}
			if l := loads[n.ID] / n.Weight; best < 0 || l < best {
				best, target = l, n.ID
			}
		}
		if target == "" {
			return nil // nowhere to go yet
		}
	}
	to := store.Assignment{Owner: target, Session: snap.nodes[target].Session}
	rev, err := assign(ctx, r.st, r.epoch, s, cur.Owner, cur.Revision, to)
	if err != nil {
		return err
	}
	r.v.applyShard(store.AssignmentEvent{Shard: s, Revision: rev, Assignment: to})
	r.cfg.Metrics.Handoffs.WithLabelValues(rec.Result).Inc()
	r.log.Info("hand-off complete", "shard", s, "from", rec.From, "to", target, "result", rec.Result, "token", rev)
	rec.State, rec.To = store.MoveDone, target
	b, _ := json.Marshal(rec)
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
	err := r.st.ControlDelete(ctx, e.Key, e.Revision)
	if err == nil {
		r.v.applyControl(store.Entry{Key: e.Key, Revision: e.Revision + 1, Deleted: true})
	}
	if errors.Is(err, store.ErrConflict) {
		return nil
	}
	return err
}
