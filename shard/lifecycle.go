package shard

import (
	"bytes"
	"fmt"
	"maps"
	"time"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/store"
)

// kindOpts are a kind's options (actor.KindOptions) resolved against the node's: the schedule
// its instances tick on, its checkpoint policy, its passivation, and the exactly-once windows in
// ticks of its rate.
type kindOpts struct {
	sched           *actor.Schedule
	checkpointEvery uint64
	idleCheckpoint  uint64        // 0: an unchanged state is written every checkpointEvery too
	passivate       time.Duration // 0: never
	ttl             ttls
}

// ttls are store.ClientSessionTTL and store.RequestTTL in ticks of one rate.
type ttls struct{ session, request uint64 }

// hostLife is the host's view of its kinds' options.
type hostLife struct {
	def   *kindOpts            // the node's: instances of a kind without options, and tombstones of unknown kinds
	kinds map[string]*kindOpts // by kind name
}

// initLife resolves every registered kind's options (actor.KindOptioner) against the node's.
func (h *Host) initLife() error {
	e := h.cfg.Engine
	h.life.def = &kindOpts{sched: e.Base(), checkpointEvery: h.cfg.CheckpointEvery, ttl: ttls{h.sessionTTL, h.requestTTL}}
	h.life.kinds = map[string]*kindOpts{}
	for _, name := range h.cfg.Kinds.Names() {
		kind, _ := h.cfg.Kinds.Get(name)
		o := actor.OptionsOf(kind)
		if err := o.Validate(); err != nil {
			return fmt.Errorf("shard host: kind %s: KindOptions: %w", name, err)
		}
		ko := *h.life.def
		if o.TickRate > 0 {
			s, err := e.Schedule(o.TickRate)
			if err != nil {
				return fmt.Errorf("shard host: kind %s: %w", name, err)
			}
			ko.sched = s
			ko.ttl = ttls{store.TTLTicks(store.ClientSessionTTL, s.Period()), store.TTLTicks(store.RequestTTL, s.Period())}
		}
		if o.CheckpointEvery > 0 {
			ko.checkpointEvery = o.CheckpointEvery
		}
		if o.IdleCheckpoint > ko.checkpointEvery {
			ko.idleCheckpoint = o.IdleCheckpoint
		}
		ko.passivate = o.Passivate
		h.life.kinds[name] = &ko
	}
	h.cfg.metrics.Life.CountPassive(func() uint64 { return uint64(h.Passive()) })
	return nil
}

// optsOf is the options of a kind (the node's for nil: a tombstone whose kind is not known here).
func (h *Host) optsOf(kind actor.Kind) *kindOpts {
	if kind != nil {
		if o := h.life.kinds[kind.Name()]; o != nil {
			return o
		}
	}
	return h.life.def
}

// Passive counts the passivated instances of the shards running here.
func (h *Host) Passive() int {
	n := 0
	for _, sh := range h.all() {
		sh.mu.Lock()
		if sh.state == running {
			n += len(sh.passive)
		}
		sh.mu.Unlock()
	}
	return n
}

// setKindLocked gives the instance a kind (a new one when it is created again from its
// tombstone): its options, and a move to its rate's schedule at the end of the tick if that
// differs (reschedule).
func (in *instance) setKindLocked(kind actor.Kind) {
	in.kind = kind
	o := in.sh.h.optsOf(kind)
	if o.sched != in.opts.sched {
		in.resched = true
	}
	in.opts = o
}

// reschedule moves the instance to its kind's schedule after a tick that changed its kind.
func (in *instance) reschedule() {
	in.mu.Lock()
	defer in.mu.Unlock()
	if !in.resched {
		return
	}
	in.resched = false
	if in.dead || in.handle == nil {
		return
	}
	in.sh.h.cfg.Engine.Remove(in.handle)
	if in.sh.batch != nil {
		in.handle = in.opts.sched.AddInPhase(in, uint64(in.sh.id))
	} else {
		in.handle = in.opts.sched.Add(in)
	}
}

// takeLifecycleLocked takes what the Logic asked of its lifecycle in the Handle or Tick that just
// ran — label changes, an end — and applies it (discard: the command was malformed, so nothing
// of it may change the instance).
func (in *instance) takeLifecycleLocked(tick uint64, discard bool) {
	if l, ok := in.logic.(actor.Labeler); ok {
		if ch := l.TakeLabels(); !discard {
			in.applyLabelsLocked(tick, ch)
		}
	}
	if e, ok := in.logic.(actor.Ender); ok && e.TakeEnd() && !discard && !in.rec.Ended {
		// As an end command does (apply): a tombstone that keeps the request window. The logic
		// stays until the tick's frames are taken (dropEndedLogicLocked).
		in.rec.Ended, in.rec.EndedAt = true, time.Now().UnixMilli()
		in.endedSeen = time.Now()
		in.forceWrite = true
		in.passivating = false
		in.sh.h.cfg.metrics.Life.EndedByLogic.Inc()
		in.sh.log.Debug("instance ended by its logic", "instance", in.id, "token", in.grant.Token, "tick", tick)
	}
}

// applyLabelsLocked applies the Logic's label changes to the record (a new map: a record in
// flight keeps its own). A change past actor.MaxLabels, or one that ValidLabel refuses (only a
// Labeler of the game's own hands one over: actor.Lifecycle refuses it at the call), is dropped
// and logged.
func (in *instance) applyLabelsLocked(tick uint64, changes []actor.LabelChange) {
	if len(changes) == 0 {
		return
	}
	m := maps.Clone(in.rec.Labels)
	if m == nil {
		m = map[string]string{}
	}
	for _, c := range changes {
		if c.Delete {
			delete(m, c.Key)
			continue
		}
		_, had := m[c.Key]
		if err := actor.ValidLabel(c.Key, c.Value); err != nil || !had && len(m) >= actor.MaxLabels {
			if err == nil {
				err = fmt.Errorf("%w: the instance has %d labels already", actor.ErrInvalidLabel, len(m))
			}
			in.sh.log.Warn("label refused", "instance", in.id, "tick", tick, "err", err)
			continue
		}
		m[c.Key] = c.Value
	}
	if len(m) == 0 {
		m = nil
	}
	if !maps.Equal(m, in.rec.Labels) {
		in.rec.Labels = m
		in.forceWrite = true
	}
}

// createLabels reads the labels of a create command ({"labels":{"mode":"heroic"}}): nil if it
// has none; an error (for a bad_request) if they are not a map of strings within the limits.
func createLabels(cmd actor.Command) (map[string]string, error) {
	var args struct {
		Labels map[string]string `msgpack:"labels"`
	}
	if err := cmd.Decode(&args); err != nil {
		return nil, fmt.Errorf(`create: "labels" must be a map of strings to strings: %w`, err)
	}
	if err := actor.ValidLabels(args.Labels); err != nil {
		return nil, fmt.Errorf("create: %w", err)
	}
	if len(args.Labels) == 0 {
		return nil, nil
	}
	return args.Labels, nil
}

// initialLabels are a new instance's labels: its create command's, then what its Logic set in
// Kind.New (actor.Labeler).
func initialLabels(create map[string]string, logic actor.Logic) map[string]string {
	l, ok := logic.(actor.Labeler)
	if !ok {
		return create
	}
	changes := l.TakeLabels()
	if len(changes) == 0 {
		return create
	}
	m := maps.Clone(create)
	if m == nil {
		m = map[string]string{}
	}
	for _, c := range changes {
		_, had := m[c.Key]
		switch {
		case c.Delete:
			delete(m, c.Key)
		case actor.ValidLabel(c.Key, c.Value) == nil && (had || len(m) < actor.MaxLabels):
			m[c.Key] = c.Value
		}
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

// dropEndedLogicLocked lets go of an ended instance's logic once its last tick's frames are
// taken (they are published: the final frame).
func (in *instance) dropEndedLogicLocked() {
	if in.rec.Ended && in.logic != nil {
		in.logic = nil
	}
}

// tombstoneWriteLocked is the write of a tombstone at tick (the Logic ended the instance in it).
func (in *instance) tombstoneWriteLocked(tick uint64, answers []answer) *write {
	in.forceWrite = false
	in.lastWrite = tick
	rec := in.rec.Capped() // appends to in.rec never touch what the write holds
	rec.State = nil
	w := &write{rec: rec, answers: answers}
	in.queue(w)
	return in.takeSendable(w)
}

// checkpointDue reports whether an instance with nothing to store is written (or, with an idle
// checkpoint, its state compared) at tick.
func (in *instance) checkpointDue(tick uint64) bool {
	return tick-max(in.lastWrite, in.lastCheck) >= in.opts.checkpointEvery
}

// idleUnchangedLocked reports a checkpoint that the kind's idle checkpoint skips: its state is
// the last written one byte for byte, its outbox is empty, and the last write is less than
// idleCheckpoint ticks old. The next comparison is checkpointEvery ticks later.
func (in *instance) idleUnchangedLocked(tick uint64, state []byte) bool {
	if in.opts.idleCheckpoint == 0 || tick-in.lastWrite >= in.opts.idleCheckpoint || len(in.rec.Fx) > 0 ||
		in.passivating || !bytes.Equal(state, in.lastState) {
		return false
	}
	in.lastCheck = tick
	return true
}

// noteActiveLocked: a command, an acknowledgement or a watcher's interest arrived at.
func (in *instance) noteActiveLocked(at time.Time) {
	if at.IsZero() { // submitted without its arrival time
		at = time.Now()
	}
	if at.After(in.lastActive) {
		in.lastActive = at
	}
	in.passivating = false
}

// considerPassivateLocked starts the passivation of an instance idle for its kind's Passivate:
// this tick writes its state marked passive, and once that write is stored with nothing having
// arrived meanwhile, the instance is unloaded (unloadLocked).
func (in *instance) considerPassivateLocked(now time.Time) {
	p := in.opts.passivate
	if p <= 0 || in.passivating || in.dead || in.expiring || in.rec.Ended || in.fail != nil || in.failed != nil ||
		len(in.mailbox) > 0 || in.isolate > 0 || len(in.tooLarge) > 0 || len(in.rec.Fx) > 0 || len(in.acked.Fx) > 0 ||
		in.pending != nil || in.inflight != nil || now.Sub(in.lastActive) < p || in.resched {
		return
	}
	in.passivating = true
	in.forceWrite = true
}

// unloadLocked unloads an instance whose passivation write w was just stored, if nothing
// arrived since: it no longer ticks and lets go of its memory; the shard keeps only its ID
// (shardRun.passivate) until a command or a watcher wakes it (shardRun.wake, which loads it from
// the store). It reports whether it unloaded.
func (in *instance) unloadLocked(w *write) bool {
	if w.end || !w.rec.Passive || !in.passivating || in.dead || in.expiring || in.fail != nil || in.failed != nil ||
		len(in.mailbox) > 0 || in.pending != nil || in.inflight != nil || in.rec.Ended || len(in.rec.Fx) > 0 ||
		in.sh.uncertain(in.grant.Token) {
		return false
	}
	in.dead, in.unloaded, in.passivating = true, true, false
	in.sh.h.cfg.Engine.Remove(in.handle)
	// What a passive instance needs is in the store: its memory goes (the engine may hold the
	// instance itself a while, until its phase bucket is compacted).
	in.logic, in.mailbox, in.spare, in.lastState, in.fx = nil, nil, nil, nil, nil
	in.rec = store.Record{Tick: in.rec.Tick, Kind: in.rec.Kind}
	in.acked = store.Record{Tick: in.acked.Tick, Kind: in.acked.Kind}
	return true
}

// passivate moves an unloaded instance from the shard's instances to its passive index.
func (sh *shardRun) passivate(in *instance) {
	sh.mu.Lock()
	moved := sh.state == running && sh.insts[in.id] == in
	if moved {
		delete(sh.insts, in.id)
		if sh.passive == nil {
			sh.passive = map[string]struct{}{}
		}
		sh.passive[in.id] = struct{}{}
	}
	sh.mu.Unlock()
	if moved {
		sh.h.cfg.metrics.Instances.Dec()
		sh.h.cfg.metrics.Life.Passivations.Inc()
		sh.log.Debug("instance passivated", "instance", in.id, "token", in.grant.Token, "tick", in.acked.Tick)
	}
}

// rerouteUnloaded hands a command that reached an instance just unloaded back to the shard, which
// wakes it.
func (sh *shardRun) rerouteUnloaded(in *instance, c Command) {
	sh.passivate(in)
	sh.submit(c)
}

// wakeLocked takes id out of the passive index and loads it (c, if not nil, waits for it as a
// command for an instance being created does). It releases sh.mu.
func (sh *shardRun) wakeLocked(id string, c *Command, by string) {
	delete(sh.passive, id)
	var waiting []Command
	from := time.Now()
	if c != nil {
		waiting = append(waiting, *c)
		from = c.Received
	}
	sh.creating[id] = waiting
	g := sh.grant
	sh.mu.Unlock()
	sh.h.spawn(func() { sh.wake(g, id, from, by) })
}

// wake loads a passivated instance from the store (registering it under g, as a new owner
// does) and puts it back in service; the commands that arrived meanwhile are then applied.
func (sh *shardRun) wake(g store.Grant, id string, from time.Time, by string) {
	in := sh.loadOne(g, id)
	if in != nil {
		in.lastActive, in.soon = time.Now(), true // not shared yet
	}
	sh.finishCreate(g, id, in)
	if in != nil {
		l := sh.h.cfg.metrics.Life
		l.Wakes.WithLabelValues(by).Inc()
		l.WakeSeconds.Observe(time.Since(from).Seconds())
		sh.log.Debug("passivated instance woken", "instance", id, "by", by, "took", time.Since(from))
	}
}

// interest is a watcher's interest in an instance (Command.Interest): a loaded instance counts
// as watched for now; a passivated one is woken.
func (sh *shardRun) interest(c Command) {
	for range 2 {
		sh.mu.Lock()
		if sh.state != running {
			sh.mu.Unlock()
			return
		}
		if in := sh.insts[c.Instance]; in != nil {
			sh.mu.Unlock()
			in.mu.Lock()
			unloaded := in.unloaded
			if !unloaded {
				in.noteActiveLocked(c.Received)
			}
			in.mu.Unlock()
			if !unloaded {
				return
			}
			sh.passivate(in) // unloaded meanwhile: index it, then wake it
			continue
		}
		if _, ok := sh.passive[c.Instance]; ok {
			sh.wakeLocked(c.Instance, nil, "watch")
			return
		}
		sh.mu.Unlock()
		return
	}
}

// staysPassive reports a record an owner may leave unloaded when it loads its shard: the last
// write of a passivated instance of a kind that passivates, with nothing to publish.
func (sh *shardRun) staysPassive(rec store.Record) bool {
	if !rec.Passive || rec.Ended || len(rec.Fx) > 0 {
		return false
	}
	kind, ok := sh.h.cfg.Kinds.Get(rec.Kind)
	return ok && sh.h.optsOf(kind).passivate > 0
}
