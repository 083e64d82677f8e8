package shard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/internal/logkey"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
)

type runState int

const (
	loading    runState = iota // loading and registering under sh.grant
	running                    // ticking
	rebuilding                 // rotating the token, then loading again
	paused                     // the node self-fenced: nothing ticks until a rotation re-validates it
	handingOff                 // flushing for a graceful move; then stopped
	stopped                    // lost or released: never runs again (a new grant makes a new shardRun)
)

// shardRun is one grant of one shard to this session, through its rotations.
type shardRun struct {
	h   *Host
	id  uint32
	log *slog.Logger

	mu        sync.Mutex
	grant     store.Grant
	state     runState
	insts     map[string]*instance
	passive   map[string]struct{}  // passivated instances (lifecycle.go): woken by a command or a watcher
	creating  map[string][]Command // commands that arrived while their instance is being created or woken
	stopServe func()
	ctx       context.Context
	cancel    context.CancelFunc
	// resumeFrom is when the previous owner stopped ticking, for a shard received by a graceful
	// move: each instance's first tick here reports the pause.
	resumeFrom time.Time
	started    time.Time // when this grant started here

	// uncertainToken is a token under which a write of this shard failed or has an unknown
	// outcome: no write is sent under it any more (DESIGN 4); the rebuild rotates away from it.
	uncertainToken atomic.Uint64

	batch *batcher // the shard's batches, with the batch write strategy (nil: single writes)

	cpu    atomic.Int64 // nanoseconds spent ticking this shard's instances since the last report
	cpuAvg float64      // smoothed tick CPU (s/s), under mu
}

func newShardRun(h *Host, g store.Grant) *shardRun {
	ctx, cancel := context.WithCancel(h.ctx)
	sh := &shardRun{h: h, id: g.Shard, grant: g, state: loading, insts: map[string]*instance{},
		creating: map[string][]Command{}, ctx: ctx, cancel: cancel, started: time.Now(),
		log: h.log.With("shard", g.Shard, "epoch", g.Epoch)}
	if h.batches {
		sh.batch = &batcher{sh: sh, bw: h.bw}
	}
	return sh
}

var errShardUncertain = errors.New("another write of the shard under this token has an unknown outcome")

// markUncertain records that a write under token may still land: nothing more is sent under it.
// Tokens only grow, so a late failure under an older token never clears a newer mark.
func (sh *shardRun) markUncertain(token uint64) {
	for {
		cur := sh.uncertainToken.Load()
		if cur >= token || sh.uncertainToken.CompareAndSwap(cur, token) {
			return
		}
	}
}

func (sh *shardRun) uncertain(token uint64) bool { return sh.uncertainToken.Load() == token }

// retry runs f with backoff until it succeeds, returns a permanent error, or the shard stops.
func (sh *shardRun) retry(what string, f func() error, permanent func(error) bool) error {
	backoff := 10 * time.Millisecond
	for {
		err := f()
		if err == nil || permanent(err) {
			return err
		}
		sh.log.Warn("retrying", "op", what, "err", err, "backoff", backoff)
		select {
		case <-sh.ctx.Done():
			return sh.ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// load reads every instance of the shard, registers it under g, and starts ticking.
func (sh *shardRun) load(g store.Grant) {
	st := sh.h.cfg.Store
	start := time.Now()
	var ids []string
	err := sh.retry("list instances", func() (err error) {
		ids, err = st.Instances(sh.ctx, g.Epoch, g.Shard)
		return err
	}, func(error) bool { return false })
	if err != nil {
		return // stopped meanwhile
	}
	loaded := make([]*instance, len(ids))
	passive := make([]bool, len(ids))
	sem := make(chan struct{}, sh.h.cfg.LoadParallelism)
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			loaded[i], passive[i] = sh.loadInstance(g, id, true)
		}()
	}
	wg.Wait()
	sh.mu.Lock()
	if sh.state != loading || sh.grant.Token != g.Token { // stopped, handed off or rebuilt meanwhile
		sh.mu.Unlock()
		return
	}
	if sh.h.isPaused() {
		// Registered under g, but the node self-fenced meanwhile: resume rotates before loading.
		sh.state = paused
		sh.mu.Unlock()
		return
	}
	resumeFrom := sh.resumeFrom
	sh.resumeFrom = time.Time{}
	for _, in := range loaded {
		if in != nil {
			in.resumeFrom = resumeFrom
			sh.insts[in.id] = in
		}
	}
	sh.passive = map[string]struct{}{}
	for i, p := range passive {
		if p {
			sh.passive[ids[i]] = struct{}{}
		}
	}
	n := len(sh.insts)
	sh.state = running
	needServe := sh.stopServe == nil && sh.h.cfg.Commands != nil
	sh.mu.Unlock()
	sh.h.cfg.metrics.Instances.Add(float64(n))
	for _, in := range loaded {
		if in != nil {
			in.schedule()
			in.sendEffectsOnce()
		}
	}
	if needServe {
		stop, err := sh.h.cfg.Commands.Serve(sh.id, sh.submit)
		if err != nil {
			sh.stop("subscribe failed", "err", err)
			return
		}
		sh.mu.Lock()
		if sh.state == stopped {
			sh.mu.Unlock()
			stop()
			return
		}
		sh.stopServe = stop
		sh.mu.Unlock()
	}
	sh.log.Debug("shard running", "token", g.Token, "instances", n, "took", time.Since(start).Round(time.Millisecond))
}

// handedOffLate notes a graceful move whose record reached this node after the grant it led to
// (the move and the assignment are watched apart): the pause is reported all the same, at the
// first tick of each instance.
func (sh *shardRun) handedOffLate(stoppedAt time.Time) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.started.Before(stoppedAt) {
		return // started before that owner stopped: not the grant this move made
	}
	if sh.state == loading || sh.state == rebuilding {
		sh.resumeFrom = stoppedAt
	}
	for _, in := range sh.insts {
		in.notePause(stoppedAt)
	}
}

// loadOne loads and registers one instance; nil if it is gone or unusable (logged).
func (sh *shardRun) loadOne(g store.Grant, id string) *instance {
	in, _ := sh.loadInstance(g, id, false)
	return in
}

// loadInstance is loadOne; with mayStayPassive, the last write of a passivated instance
// (staysPassive) is neither registered nor loaded: passive reports it, and the shard indexes it
// until a command or a watcher wakes it (loadOne then).
func (sh *shardRun) loadInstance(g store.Grant, id string, mayStayPassive bool) (_ *instance, passive bool) {
	st := sh.h.cfg.Store
	var rec store.Record
	var rev uint64
	err := sh.retry("load "+id, func() error {
		var err error
		if rec, rev, err = st.Load(sh.ctx, g.Epoch, g.Shard, id); err != nil {
			if errors.Is(err, store.ErrNotFound) && sh.listed(g, id) {
				// Load may be served by a lagging replica; the listing covers every instance,
				// so one it still lists exists: load again (else an acknowledged create is lost).
				return fmt.Errorf("load %s: listed but not found (lagging read): %w", id, errLaggingLoad)
			}
			return err
		}
		if passive = mayStayPassive && sh.staysPassive(rec); passive {
			return nil
		}
		_, err = st.Register(sh.ctx, g, id, rec, rev)
		return err // ErrConflict: the load was not current (a lagging replica); load again
	}, func(err error) bool {
		// Unreadable (a malformed record, a missing blob) is not retried here: one such record
		// must not keep the shard's other instances out of service. It is logged below.
		return errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrBadRecord) || errors.Is(err, store.ErrBlobMissing)
	})
	switch {
	case err == nil && passive:
		return nil, true
	case errors.Is(err, store.ErrNotFound):
		return nil, false
	case errors.Is(err, store.ErrBadRecord) || errors.Is(err, store.ErrBlobMissing):
		// Served as failed, not left out: its commands would be told it does not exist.
		sh.log.Error("instance not loaded: its record cannot be read; it answers instance_failed until reloaded", "instance", id, "token", g.Token, "revision", rev, "err", err)
		return sh.failedInstance(g, id, nil, store.Record{}, "bad_record", fmt.Sprintf("its stored record cannot be read (revision %d): %v", rev, err)), false
	case err != nil:
		sh.log.Error("instance not loaded", "instance", id, "token", g.Token, "revision", rev, "err", err)
		return nil, false // the shard stopped meanwhile
	}
	rec.Token = g.Token
	if rec.FxEpoch != g.Epoch {
		// A placeholder (its life starts here), or a record of an earlier epoch (a restore: this
		// epoch's revisions started again at 1, so a base of the earlier epoch could meet one a
		// new life of this ID takes here), or one written before FxEpoch: its effect keys go on
		// from a base of this epoch (store.FxSeqBase). What its outbox holds keeps its keys. A
		// tombstone too: a life made again from it goes on from its sequence.
		rec.FxSeq, rec.FxEpoch = store.FxSeqBase(rev), g.Epoch
	}
	kind, ok := sh.h.cfg.Kinds.Get(rec.Kind)
	if rec.Ended { // a tombstone: it answers retransmissions until it expires, or is created again
		return newInstance(sh, g, id, kind, nil, rec), false
	}
	if !ok {
		sh.log.Error("instance of unknown kind not loaded; it answers instance_failed until reloaded", "instance", id, "kind", rec.Kind, "known", sh.h.cfg.Kinds.Names())
		return sh.failedInstance(g, id, nil, rec, "unknown_kind", fmt.Sprintf("its record is of unknown kind %q (this node knows %v)", rec.Kind, sh.h.cfg.Kinds.Names())), false
	}
	logic, err := restore(kind, id, rec)
	if err != nil {
		sh.log.Error("instance state unreadable, not loaded; it answers instance_failed until reloaded", "instance", id, "revision", rev, "err", err)
		return sh.failedInstance(g, id, kind, rec, "restore", fmt.Sprintf("its kind %s could not Restore its stored state (revision %d): %v", rec.Kind, rev, err)), false
	}
	in := newInstance(sh, g, id, kind, logic, rec)
	if len(rec.State) == 0 {
		in.lastWrite = 0
		in.forceWrite = true
	}
	return in, false
}

var errLaggingLoad = errors.New("read lags behind the listing")

// restore makes an instance's logic from its record: Restore of its state, or, for a record
// whose initial state was never written, New from the same create. A panic of the game's code
// there is an error (the load goes on with the shard's other instances).
func restore(kind actor.Kind, id string, rec store.Record) (logic actor.Logic, err error) {
	defer func() {
		if p := recover(); p != nil {
			logic, err = nil, fmt.Errorf("panic: %v", p)
		}
	}()
	if len(rec.State) == 0 { // created, but its initial state was never written: the same create again
		return kind.New(id, actor.Command{Type: "create", Body: rec.Create})
	}
	return kind.Restore(id, rec.State)
}

// failedInstance is an instance that could not be loaded (its record unreadable, its kind
// unknown, its state not restored): it is served all the same, out of service, so that its
// commands are answered instance_failed with the reason — not unknown_instance, and a create not
// answered retry for ever — and a retransmission of a command its record holds gets its first
// answer. It writes nothing; an operator's reload (tickctl instance reload) loads it again.
func (sh *shardRun) failedInstance(g store.Grant, id string, kind actor.Kind, rec store.Record, cause, reason string) *instance {
	in := newInstance(sh, g, id, kind, nil, rec)
	in.failLocked(newFailure(cause, reason)) // not shared yet: no lock needed
	return in
}

// reload loads a failed instance again (an operator's request, Host.Reload): once no write of it
// is in flight, it is loaded and registered as a new owner's would be, and replaces the failed one.
// What the failed one held in memory is dropped: the command whose handling panicked was never
// stored, so nothing of it is applied twice; a retransmission of it applies it once.
func (sh *shardRun) reload(ctx context.Context, id string) (map[string]any, *wire.Error) {
	sh.mu.Lock()
	state, g, in := sh.state, sh.grant, sh.insts[id]
	sh.mu.Unlock()
	switch {
	case state == stopped:
		return nil, wire.Errorf(wire.CodeNotOwner, "node %s no longer owns shard %d", sh.h.cfg.Node, sh.id)
	case state != running:
		return nil, wire.Errorf(wire.CodeRetry, "shard %d is loading, paused or moving; retry", sh.id)
	case in == nil:
		return nil, wire.Errorf(wire.CodeUnknownInstance, "no instance %s on shard %d of node %s", id, sh.id, sh.h.cfg.Node)
	}
	in.mu.Lock()
	switch {
	case in.fail == nil:
		tick := in.rec.Tick
		in.mu.Unlock()
		return map[string]any{"instance": id, "reloaded": false, "tick": tick, "node": sh.h.cfg.Node}, nil
	case in.reloading:
		in.mu.Unlock()
		return nil, wire.Errorf(wire.CodeRetry, "a reload of instance %s is under way; retry", id)
	}
	in.reloading = true
	in.mu.Unlock()
	tick, failedAgain, werr := sh.reloadFrom(ctx, g, in)
	if werr != nil || failedAgain != "" {
		in.mu.Lock()
		in.reloading = false // a later reload may try again (on the new one, if it replaced in)
		in.mu.Unlock()
	}
	if werr != nil {
		return nil, werr
	}
	if failedAgain != "" {
		return nil, wire.Errorf(wire.CodeInstanceFailed, "reloaded, and it failed again: %s", failedAgain)
	}
	sh.log.Info("failed instance reloaded from its stored state", "instance", id, "token", g.Token, "tick", tick)
	return map[string]any{"instance": id, "reloaded": true, "tick": tick, "node": sh.h.cfg.Node}, nil
}

// reloadFrom waits until no write of the failed instance in is in flight, loads it again under g
// and puts the new one in its place (scheduled if it runs), even if it failed again (then with
// the new reason, returned as failedAgain). tick is the loaded record's.
func (sh *shardRun) reloadFrom(ctx context.Context, g store.Grant, in *instance) (tick uint64, failedAgain string, _ *wire.Error) {
	// A write of the instance still in flight could land after the load, and the reloaded
	// instance would write over it: wait until it is settled (its commands then answered).
	for {
		in.mu.Lock()
		inflight, uncertain := in.inflight != nil, in.failed != nil || sh.uncertain(in.grant.Token)
		in.mu.Unlock()
		if uncertain {
			// DESIGN 4: never reload under a token with a write of unknown outcome: the shard is
			// being rebuilt (rotated), which loads the instance again anyway.
			return 0, "", wire.Errorf(wire.CodeRetry, "shard %d is being rebuilt after an uncertain write; retry", sh.id)
		}
		if !inflight {
			break
		}
		select {
		case <-ctx.Done():
			return 0, "", wire.Errorf(wire.CodeRetry, "instance %s still has a write in flight; retry", in.id)
		case <-time.After(time.Millisecond):
		}
	}
	fresh := sh.loadOne(g, in.id)
	if fresh == nil {
		if sh.ctx.Err() != nil {
			return 0, "", wire.Errorf(wire.CodeNotOwner, "node %s no longer owns shard %d", sh.h.cfg.Node, sh.id)
		}
		return 0, "", wire.Errorf(wire.CodeUnknownInstance, "instance %s is no longer stored", in.id)
	}
	// Not shared yet: read without its lock.
	tick = fresh.rec.Tick
	if fresh.fail != nil {
		failedAgain = fresh.failMessageLocked()
	}
	sh.mu.Lock()
	if sh.state != running || sh.grant.Token != g.Token || sh.insts[in.id] != in {
		sh.mu.Unlock()
		fresh.retire()
		return 0, "", wire.Errorf(wire.CodeRetry, "shard %d changed while instance %s was reloaded; retry", sh.id, in.id)
	}
	sh.insts[in.id] = fresh
	sh.mu.Unlock()
	for _, c := range in.retire() { // none: a failed instance answers at once; for safety
		sh.h.answerErr(c, wire.CodeRetry, "instance %s was reloaded; retry with the same request id", in.id)
	}
	fresh.schedule()
	fresh.sendEffectsOnce()
	return tick, failedAgain, nil
}

// listed reports whether the shard's listing, which covers every instance written before it,
// still holds id (true when it cannot tell, so the caller retries).
func (sh *shardRun) listed(g store.Grant, id string) bool {
	ids, err := sh.h.cfg.Store.Instances(sh.ctx, g.Epoch, g.Shard)
	if err != nil {
		return true
	}
	return slices.Contains(ids, id)
}

// observe handles a revision of shard.<S> that still names this session.
func (sh *shardRun) observe(rev uint64) {
	sh.mu.Lock()
	if rev <= sh.grant.Token || sh.state != running { // our own rotations are at or below the grant
		sh.mu.Unlock()
		return
	}
	// A newer revision with our own value that we did not see acknowledged (a rotation whose ack
	// was lost): adopt it. Our writes under the old token are fenced by it.
	sh.mu.Unlock()
	sh.rebuild("adopted a newer revision of the shard key", rev)
}

// writeFailed sorts a failed write: stale owner stops the shard, unknown outcome rebuilds it.
func (sh *shardRun) writeFailed(in *instance, err error) {
	switch {
	case errors.Is(err, store.ErrStaleOwner):
		sh.mu.Lock()
		ours := in.grant.Token < sh.grant.Token
		sh.mu.Unlock()
		if ours { // a write that raced our own rotation: expected, the shard is being rebuilt
			return
		}
		// The store says whom it met: if that is this session at a newer revision (a rotation
		// whose ack was lost), adopt it without a read. Anyone else: the key may have come back
		// to this session since, so read the latest from the stream leader before stopping — a
		// lagging replica could show an older owner, and stopping a shard that names this
		// session would leave it unserved (DESIGN 4).
		var stale *store.StaleOwnerError
		if errors.As(err, &stale) && stale.HolderKnown && !stale.Sealed &&
			stale.Holder.Holds(in.grant.Assignment) && stale.Revision > in.grant.Token {
			sh.rebuild("shard key rewritten with this session's value", stale.Revision)
			return
		}
		a, rev, rerr := sh.h.cfg.Store.LatestAssignment(sh.ctx, in.grant.Epoch, sh.id)
		if rerr != nil && !errors.Is(rerr, store.ErrNotFound) {
			// Cannot tell whose it is now: the rotation settles it (adopt, or stop if lost).
			sh.rebuild("stale-owner rejection, owner unknown: "+rerr.Error(), 0)
			return
		}
		if rerr == nil && a.Holds(in.grant.Assignment) && rev > in.grant.Token {
			// Still ours, at a revision someone else wrote with our own value: adopt it. Our
			// writes under the old token are fenced by it, so nothing stale can land later.
			sh.rebuild("shard key rewritten with this session's value", rev)
			return
		}
		met := uint64(0)
		if stale != nil {
			met = stale.Revision
		}
		sh.stop("stale_owner", logkey.Instance, in.id, logkey.CurrentRevision, rev, "store_met_revision", met,
			logkey.CASResult, writeResult(err), "new_owner", a.Owner, "new_session", a.Session, "read_err", rerr, logkey.Err, err)
	default:
		sh.rebuild("write outcome unknown: "+err.Error(), 0)
	}
}

// rebuild rotates the token (unless adopt names a revision already made) and reloads the shard
// from the store under the new token. Single-flight: a shard that is not running ignores it.
func (sh *shardRun) rebuild(cause string, adopt uint64) {
	sh.mu.Lock()
	if sh.state != running && sh.state != paused {
		sh.mu.Unlock()
		return
	}
	sh.state = rebuilding
	old := sh.grant
	insts := sh.insts
	sh.insts = map[string]*instance{}
	sh.mu.Unlock()
	sh.retireAll(insts, wire.CodeRetry, "shard %d is being rebuilt after an uncertain write; retry with the same request id", sh.id)
	sh.log.Warn("rebuilding shard", logkey.Token, old.Token, logkey.CurrentRevision, max(adopt, sh.h.fenceOf(sh.id).rev.Load()),
		"cause", cause, "adopt", adopt)
	sh.h.spawn(func() { sh.rotateAndLoad(old, adopt) })
}

// rotateAndLoad rotates away from old (or adopts a revision already made) and loads the shard
// under the new token. The shard is rebuilding.
func (sh *shardRun) rotateAndLoad(old store.Grant, adopt uint64) {
	g, ok := sh.rotate(old, adopt)
	if !ok {
		return
	}
	sh.h.cfg.metrics.Rotations.Inc()
	sh.mu.Lock()
	if sh.state != rebuilding { // stopped or handed off meanwhile
		sh.mu.Unlock()
		return
	}
	sh.grant = g
	sh.state = loading
	sh.mu.Unlock()
	sh.h.applied(g.Shard, g.Token) // its own watch event must not start it again unrotated
	sh.h.noteToken(g.Shard, g.Token)
	cas := "ok"
	if adopt > old.Token {
		cas = "adopted"
	}
	sh.log.Info("token rotated", logkey.Token, old.Token, logkey.CurrentRevision, g.Token, logkey.CASResult, cas)
	sh.load(g)
}

// rotate makes every write under old fail the fence. On an unknown or failed outcome it re-reads
// shard.<S>: still ours at a newer revision, adopt it; still ours at old, try again; else stop.
func (sh *shardRun) rotate(old store.Grant, adopt uint64) (store.Grant, bool) {
	st := sh.h.cfg.Store
	if adopt > old.Token {
		g := old
		g.Token = adopt
		if a, rev, err := st.LatestAssignment(sh.ctx, old.Epoch, old.Shard); err == nil && rev == adopt && a.Holds(old.Assignment) {
			g.Assignment = a // a rotation must rewrite the value byte for byte, grant included
		}
		return g, true
	}
	var g store.Grant
	err := sh.retry("rotate token", func() error {
		var err error
		if g, err = st.Rotate(sh.ctx, old); err == nil {
			return nil
		}
		// Read back from the stream leader (DESIGN 4), never from a replica that may lag.
		a, rev, rerr := st.LatestAssignment(sh.ctx, old.Epoch, old.Shard)
		switch {
		case rerr != nil && !errors.Is(rerr, store.ErrNotFound):
			return rerr // cannot tell yet
		case rerr == nil && a.Holds(old.Assignment) && rev > old.Token:
			g = old
			g.Token, g.Assignment = rev, a // our rotation landed (its answer was lost), or a new grant to us
			return nil
		case rerr == nil && a.Holds(old.Assignment) && rev == old.Token:
			return err // nothing happened; rotate again
		default:
			return errLost
		}
	}, func(err error) bool { return errors.Is(err, errLost) })
	if err != nil {
		if !errors.Is(err, errLost) && sh.ctx.Err() != nil {
			// Given up because the host is closing (a shutdown while the store could not be
			// reached), not because another owner has the shard.
			sh.stop("shutdown", "rotation", "not settled")
			return store.Grant{}, false
		}
		sh.stop("stale_owner", logkey.CASResult, "lost", logkey.Err, err)
		return store.Grant{}, false
	}
	return g, true
}

var errLost = errors.New("the shard is assigned to someone else")

// retireAll retires instances and answers every command they still held.
func (sh *shardRun) retireAll(insts map[string]*instance, code, format string, args ...any) {
	for _, in := range insts {
		for _, c := range in.retire() {
			sh.h.answerErr(c, code, format, args...)
		}
	}
	sh.h.cfg.metrics.Instances.Sub(float64(len(insts)))
}

// stop takes the shard out of service at once, for good.
func (sh *shardRun) stop(reason string, attrs ...any) {
	sh.mu.Lock()
	if sh.state == stopped {
		sh.mu.Unlock()
		return
	}
	sh.state = stopped
	insts := sh.insts
	sh.insts = nil
	stopServe := sh.stopServe
	token := sh.grant.Token
	creating := sh.creating
	sh.creating = nil
	sh.mu.Unlock()
	sh.cancel()
	if stopServe != nil {
		stopServe()
	}
	sh.retireAll(insts, wire.CodeNotOwner, "shard %d moved away from node %s", sh.id, sh.h.cfg.Node)
	for _, waiting := range creating {
		for _, c := range waiting {
			sh.h.answerErr(c, wire.CodeNotOwner, "shard %d moved away from node %s", sh.id, sh.h.cfg.Node)
		}
	}
	sh.h.forget(sh)
	sh.h.cfg.metrics.ShardStops.WithLabelValues(reason).Inc()
	level := slog.LevelInfo
	if reason == "stale_owner" {
		level = slog.LevelError
	}
	sh.log.Log(context.Background(), level, "shard stopped: its actors no longer tick",
		append([]any{"reason", reason, logkey.Token, token, "instances", len(insts)}, attrs...)...)
}

// submit routes a command to its instance's mailbox, or creates the instance.
func (sh *shardRun) submit(c Command) {
	if c.SenderKey == "" {
		c.Sender.Trusted = true // from within the process or the trusted account (DESIGN 9)
	}
	if c.Operator { // an operator's request to this node, not a command: no admission, no game
		sh.operate(c)
		return
	}
	if c.Heartbeat { // costs nothing, answers nothing: no admission (players.go)
		sh.heartbeat(c)
		return
	}
	if c.Interest { // a watcher's: no answer, no admission (it costs nothing unless it wakes one)
		sh.interest(c)
		return
	}
	// An acknowledgement alone costs the instance nothing and frees its client's session:
	// admission control never refuses one.
	if !c.AckOnly() && !sh.h.admit(&c) {
		return
	}
	sh.mu.Lock()
	switch sh.state {
	case stopped:
		sh.mu.Unlock()
		sh.h.answerErr(c, wire.CodeNotOwner, "node %s no longer owns shard %d", sh.h.cfg.Node, sh.id)
		return
	case loading, rebuilding, paused, handingOff:
		sh.mu.Unlock()
		sh.h.answerErr(c, wire.CodeRetry, "shard %d is loading, paused or moving; retry with the same request id", sh.id)
		return
	}
	if in := sh.insts[c.Instance]; in != nil {
		sh.mu.Unlock()
		in.enqueue(c)
		return
	}
	if waiting, ok := sh.creating[c.Instance]; ok {
		sh.creating[c.Instance] = append(waiting, c)
		sh.mu.Unlock()
		return
	}
	if c.AckOnly() {
		sh.mu.Unlock()
		return // an acknowledgement alone of an instance not here: nothing to free, no one to answer
	}
	if _, ok := sh.passive[c.Instance]; ok {
		sh.wakeLocked(c.Instance, &c, "command") // unlocks sh.mu
		return
	}
	if c.Type != "create" {
		g := sh.grant
		sh.mu.Unlock()
		sh.deny(g, c, wire.EncodeReply(wire.Reply{Error: wire.Errorf(wire.CodeUnknownInstance, "no instance %s (create it first)", c.Instance)}))
		return
	}
	sh.creating[c.Instance] = nil
	g := sh.grant
	sh.mu.Unlock()
	sh.h.spawn(func() { sh.create(g, c) })
}

// deny answers unknown_instance (reply) for an instance this shard did not have, or had ended,
// under grant g. That answer is definite and no write fences it, so it is given only once two
// reads that reflect every acknowledged write (DESIGN 4) show, after the command arrived, that
// the cluster is still in g's epoch and shard.<S> still holds g's token for this session, which
// is still the shard's grant. Otherwise this session may be a zombie (its shard moved on, or a
// restore sealed its epoch) whose successor has the instance: it answers not_owner, which clients
// retry; a shard the read shows someone else holds is stopped, and a newer revision naming this
// session is adopted. At most maxDenying checks run at once; beyond that a command gets busy.
// It takes no lock of the shard or its instances: a tick calls it under the instance's lock.
func (sh *shardRun) deny(g store.Grant, c Command, reply []byte) {
	h := sh.h
	if h.denying.Add(1) > maxDenying {
		h.denying.Add(-1)
		h.answerErr(c, wire.CodeBusy, "node %s is checking too many commands for unknown instances; retry after a backoff", h.cfg.Node)
		return
	}
	if !h.spawn(func() {
		defer h.denying.Add(-1)
		ctx, cancel := context.WithTimeout(sh.ctx, denyTimeout)
		defer cancel()
		ce, err := h.cfg.Store.LatestControl(ctx, store.ClusterKey)
		var cl store.Cluster
		if err == nil {
			err = json.Unmarshal(ce.Value, &cl)
		}
		var a store.Assignment
		var rev uint64
		if err == nil && cl.Epoch == g.Epoch {
			a, rev, err = h.cfg.Store.LatestAssignment(ctx, g.Epoch, g.Shard)
		}
		sh.mu.Lock()
		cur, state := sh.grant, sh.state
		sh.mu.Unlock()
		why := ""
		switch {
		case err != nil && !errors.Is(err, store.ErrNotFound):
			h.answerErr(c, wire.CodeRetry, "node %s could not confirm that instance %s does not exist: %v", h.cfg.Node, c.Instance, err)
			return
		case cl.Epoch != g.Epoch:
			why = fmt.Sprintf("the cluster is in epoch %d, this shard in %d", cl.Epoch, g.Epoch)
		case err != nil || !a.Holds(g.Assignment):
			why = fmt.Sprintf("shard.%d is at revision %d, held by %q session %q", g.Shard, rev, a.Owner, a.Session)
			if cur.Token == g.Token {
				sh.stop("stale_owner", logkey.CurrentRevision, rev, "new_owner", a.Owner, "new_session", a.Session, "noticed_by", "unknown instance check")
			}
		case rev != g.Token || cur.Token != g.Token || state == stopped:
			// Still this session's, at another revision: a rotation of its own under way, or
			// one it missed (adopted now). Either way the map looked at may be outdated.
			h.answerErr(c, wire.CodeRetry, "shard %d is changing token; retry with the same request", g.Shard)
			if rev > cur.Token && cur.Token == g.Token {
				sh.observe(rev)
			}
			return
		}
		if why != "" {
			sh.log.Warn("not denying an instance: this session may no longer own its shard", logkey.Instance, c.Instance,
				logkey.Token, g.Token, logkey.CurrentRevision, rev, logkey.RequestID, c.Key(), "why", why)
			h.answerErr(c, wire.CodeNotOwner, "node %s may no longer own shard %d (%s); retry", h.cfg.Node, g.Shard, why)
			return
		}
		h.answer(c, reply, wire.CodeUnknownInstance)
	}) {
		h.denying.Add(-1)
		h.answerErr(c, wire.CodeNotOwner, "node %s is closing", h.cfg.Node)
	}
}

// maxDenying bounds the unknown-instance checks (two store reads each) running at once on a host.
const maxDenying = 256

// denyTimeout bounds one unknown-instance check.
const denyTimeout = 5 * time.Second

// create makes a new instance: KV Create of a stateless record, then a fenced write of its
// initial state (DESIGN 4). If it exists already, it is loaded and registered instead.
func (sh *shardRun) create(g store.Grant, c Command) {
	var in *instance
	defer func() { sh.finishCreate(g, c.Instance, in) }()
	var args struct {
		Kind string `msgpack:"kind"`
	}
	cmd := actor.Command{Type: c.Type, Body: c.Body, Sender: c.Sender}
	if err := cmd.Decode(&args); err != nil || args.Kind == "" {
		sh.h.answerErr(c, wire.CodeBadRequest, `create needs a string "kind" (one of %v)`, sh.h.cfg.Kinds.Names())
		return
	}
	kind, ok := sh.h.cfg.Kinds.Get(args.Kind)
	if !ok {
		sh.h.answerErr(c, wire.CodeBadRequest, "unknown kind %q (one of %v)", args.Kind, sh.h.cfg.Kinds.Names())
		return
	}
	if err := actor.AuthorizeCreate(kind, c.Instance, cmd); err != nil {
		reply, code := wire.ReplyFor(nil, err)
		sh.h.answer(c, reply, code)
		return
	}
	labels, err := createLabels(cmd)
	if err != nil {
		sh.h.answerErr(c, wire.CodeBadRequest, "%v", err)
		return
	}
	logic, err := kind.New(c.Instance, cmd)
	if err != nil {
		reply, code := wire.ReplyFor(nil, err)
		sh.h.answer(c, reply, code)
		return
	}
	state, err := logic.MarshalState()
	if err != nil {
		sh.h.answerErr(c, wire.CodeInternal, "encode initial state: %v", err)
		return
	}
	st := sh.h.cfg.Store
	reply := wire.EncodeReply(wire.Reply{OK: true, Result: map[string]any{"created": c.Instance, "kind": args.Kind}})
	// The placeholder holds the create command and its answer: if the initial write below is
	// uncertain, the rebuild makes the instance from the same command, and a retransmission gets
	// this answer, never already_exists.
	rec := store.Record{Kind: args.Kind, Create: c.Body, Creator: c.SenderKey, Labels: initialLabels(labels, logic)}
	sh.h.optsOf(kind).ttl.remember(&rec, c, 0, reply)
	createRev, err := st.Create(sh.ctx, g, c.Instance, rec)
	if errors.Is(err, store.ErrConflict) {
		// It exists, perhaps missing from a lagging listing: never overwrite, load it.
		if in = sh.loadOne(g, c.Instance); in == nil {
			sh.h.answerErr(c, wire.CodeRetry, "instance %s exists but could not be loaded", c.Instance)
			return
		}
		in.enqueue(c) // answers with the first result, or already_exists
		return
	} else if err != nil {
		code, what := writeErrCode(err) // a placeholder whose write may have landed is a create that may have
		sh.h.answerErr(c, code, "create %s: its placeholder %s: %v", c.Instance, what, err)
		return
	}
	rec.State, rec.Create = state, nil
	rec.FxSeq, rec.FxEpoch = store.FxSeqBase(createRev), g.Epoch
	if sh.uncertain(g.Token) {
		// The placeholder is stored: the rebuild under way loads it, and the create stands.
		sh.h.answerErr(c, wire.CodeUnknownOutcome, "shard %d is being rebuilt after an uncertain write; retransmit the same request to learn the create's outcome", sh.id)
		return
	}
	if sh.h.cfg.BeforeWrite != nil {
		sh.h.cfg.BeforeWrite(sh.id, c.Instance)
	}
	_, err = st.Write(sh.ctx, g, c.Instance, rec)
	sh.h.cfg.metrics.StateWrite(writeResult(err))
	if err != nil {
		code := wire.CodeRetry
		if errors.Is(err, store.ErrTooLarge) {
			code = wire.CodeTooLarge
		}
		if store.Refused(err) { // nothing stored, the token still good
			in = sh.undoPlaceholder(g, c, code, err)
			return
		}
		// The placeholder, which holds the create and its answer, is stored: whatever became of
		// this write, the create took effect unless something undoes it. A retransmission learns.
		sh.h.answerErr(c, wire.CodeUnknownOutcome, "initial write of %s: %v; retransmit the same request to learn the create's outcome", c.Instance, err)
		sh.markUncertain(g.Token)
		probe := &instance{id: c.Instance, grant: g}
		sh.writeFailed(probe, err)
		return
	}
	rec.Token = g.Token
	in = newInstance(sh, g, c.Instance, kind, logic, rec)
	sh.h.answer(c, reply, "ok")
}

// undoPlaceholder answers a create whose initial write the store refused outright. The create
// must then have had no effect, so its placeholder is removed by a fenced delete marker; if the
// store refuses that too, the placeholder is served as a load would (its next tick writes the
// initial state again, and a retransmission gets the create's answer). An unknown outcome of the
// delete rebuilds the shard, as any.
func (sh *shardRun) undoPlaceholder(g store.Grant, c Command, code string, cause error) *instance {
	_, err := sh.h.cfg.Store.End(sh.ctx, g, c.Instance)
	sh.h.cfg.metrics.StateWrite(writeResult(err))
	switch {
	case err == nil:
		sh.h.answerErr(c, code, "initial write of %s refused by the store, the create was undone: %v", c.Instance, cause)
		return nil
	case store.Refused(err):
		// The placeholder stays and is served: the create took effect (a retransmission gets
		// its answer), so neither retry nor too_large ("no effect") may be said.
		sh.h.answerErr(c, wire.CodeUnknownOutcome, "initial write of %s refused by the store (%v) and its placeholder could not be removed: "+
			"retransmit the same request to learn the create's outcome", c.Instance, cause)
		return sh.loadOne(g, c.Instance)
	}
	sh.h.answerErr(c, wire.CodeUnknownOutcome, "initial write of %s refused by the store, and its undo's outcome is unknown (%v): retransmit the same request to learn the create's outcome", c.Instance, err)
	sh.markUncertain(g.Token)
	sh.writeFailed(&instance{id: c.Instance, grant: g}, err)
	return nil
}

// finishCreate adds a created instance to the shard and replays the commands that waited for it.
func (sh *shardRun) finishCreate(g store.Grant, id string, in *instance) {
	sh.mu.Lock()
	waiting := sh.creating[id]
	delete(sh.creating, id)
	added := in != nil && sh.state == running && sh.grant.Token == g.Token && sh.insts[id] == nil
	if added {
		sh.insts[id] = in
	}
	sh.mu.Unlock()
	if added {
		sh.h.cfg.metrics.Instances.Inc()
		in.schedule()
	} else if in != nil {
		for _, c := range in.retire() { // loaded for nothing (the shard moved or was rebuilt)
			sh.h.answerErr(c, wire.CodeRetry, "shard %d changed while %s was created; retry with the same request id", sh.id, id)
		}
	}
	for _, c := range waiting {
		sh.submit(c)
	}
}

// remove forgets an ended instance.
func (sh *shardRun) remove(in *instance) {
	sh.mu.Lock()
	removed := sh.insts[in.id] == in
	if removed {
		delete(sh.insts, in.id)
	}
	sh.mu.Unlock()
	if removed {
		sh.h.cfg.metrics.Instances.Dec()
	}
}

// flushAndRelease writes every instance's latest state, then releases the shard key.
func (sh *shardRun) flushAndRelease(ctx context.Context) error {
	return sh.flushThen(ctx, "shutdown", func(g store.Grant, _ time.Time) error {
		return sh.h.cfg.Store.ReleaseShard(ctx, g)
	})
}

// flushThen stops ticking after the current tick, writes every instance's latest state under the
// grant's token, and then runs release (which hands the shard on). The shard is stopped for good.
func (sh *shardRun) flushThen(ctx context.Context, reason string, release func(g store.Grant, stoppedAt time.Time) error) error {
	sh.mu.Lock()
	for sh.state == loading || sh.state == rebuilding {
		// A rotation or load in flight settles first: handing on sh.grant while a rotation may
		// still land would release an old token and leave the key naming this session.
		sh.mu.Unlock()
		select {
		case <-ctx.Done():
			return fmt.Errorf("hand off shard %d: still loading: %w", sh.id, ctx.Err())
		case <-time.After(time.Millisecond):
		}
		sh.mu.Lock()
	}
	if sh.state == stopped || sh.state == handingOff {
		sh.mu.Unlock()
		return nil
	}
	if sh.state != running {
		// Paused (self-fenced): nothing ticks and the pause took every instance out of service,
		// so there is nothing to flush. Stop it and hand it on.
		g := sh.grant
		sh.mu.Unlock()
		sh.stop(reason)
		return release(g, time.Now())
	}
	sh.state = handingOff
	insts := sh.insts
	sh.insts = map[string]*instance{}
	stopServe := sh.stopServe
	g := sh.grant
	sh.mu.Unlock()
	if stopServe != nil {
		stopServe()
	}
	var errs []error
	for _, in := range insts {
		in.haltTicks()
	}
	stoppedAt := time.Now()
	for _, in := range insts {
		if err := in.flush(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	sh.h.cfg.metrics.Instances.Sub(float64(len(insts)))
	if len(errs) == 0 {
		if err := release(g, stoppedAt); err != nil {
			errs = append(errs, err)
		}
	}
	sh.mu.Lock()
	sh.state = stopped
	sh.mu.Unlock()
	sh.cancel()
	sh.h.forget(sh)
	sh.h.cfg.metrics.ShardStops.WithLabelValues(reason).Inc()
	sh.log.Debug("shard flushed", "reason", reason, "token", g.Token, "instances", len(insts), "errors", len(errs))
	return errors.Join(errs...)
}

// pause takes a running shard out of service until resume: its instances stop ticking and their
// commands are answered retry. Nothing is written.
func (sh *shardRun) pause() {
	sh.mu.Lock()
	if sh.state != running {
		sh.mu.Unlock()
		return
	}
	sh.state = paused
	insts := sh.insts
	sh.insts = map[string]*instance{}
	sh.mu.Unlock()
	sh.retireAll(insts, wire.CodeRetry, "node %s is re-validating its lease; retry with the same request id", sh.h.cfg.Node)
}

func writeResult(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, store.ErrStaleOwner):
		return "stale_owner"
	case errors.Is(err, store.ErrConflict):
		return "conflict"
	case store.Refused(err):
		return "refused"
	default:
		return "error"
	}
}
