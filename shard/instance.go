package shard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
)

// maxMailbox bounds the commands waiting for one instance's next tick.
const maxMailbox = 1024

// Words for taking things out of service, one per idea:
//
//   - haltTicks: an instance's ticks stop (the engine drops it); its pending writes still flush
//     (a graceful hand-off).
//   - retire: an instance is out of service on this node: ticks stop and it returns every command
//     it had not answered, for the caller to answer (retireAll: a shard's instances, answered with
//     one code). Its stored state stays; another grant loads it again.
//   - poison: retire because the game's code panicked in it; the tick's commands are answered
//     instance_failed, and it stays out of service on this node (failed) until an operator
//     reloads it (shardRun.reload). An instance that cannot be loaded (its state does not
//     restore, its kind is unknown) is kept failed the same way (shardRun.failedInstance).
//   - giveUpLocked: retire without a flush when a write cannot be made.
//   - stop (shardRun): a shard is out of service for good under this grant (lost, released,
//     moved); pause (shardRun, Host.Pause): the node self-fenced, nothing ticks until a rotation
//     re-validates the token; Host.Abandon: a dead session drops everything without writing.
//
// instance is the single owner of one instance's memory. Everything below mu is touched only under
// it; the engine never runs two ticks of one instance at once.
type instance struct {
	sh    *shardRun
	grant store.Grant // the token it was registered under; a new token means a new instance
	id    string
	kind  actor.Kind

	mu         sync.Mutex
	logic      actor.Logic
	rec        store.Record // tick, kind and request window as of the last tick (state lives in logic)
	acked      store.Record // the last record the store acknowledged
	lastWrite  uint64       // tick of the last record handed to the store
	forceWrite bool
	mailbox    []Command
	spare      []Command
	inflight   *write // the one write in flight
	pending    *write // the next one, coalesced while one is in flight
	handle     *actor.Handle
	dead       bool
	expiring   bool      // the tombstone's delete marker is being written
	endedSeen  time.Time // when this node ended the instance or loaded its tombstone (local clock)
	resumeFrom time.Time // set on a shard received by a graceful move: report the pause at the first tick
	firstTick  time.Time // when it first ticked under this grant
	pauseSeen  bool      // the hand-off pause was reported
	failed     error     // the last write failed: its outcome may be unknown, so no more writes under this token
	poisoned   bool      // the game's code panicked in it: what it holds in memory is never stored
	fail       *failure  // why the game's code failed in it: set with poisoned, answered instance_failed
	reloading  bool      // failed, and an operator's reload of it is under way
	fxRetrying bool      // poisoned: a retry of failed effect publishes is scheduled
	isolate    int       // how many commands at the mailbox's head are applied one write each (sortTooLargeLocked)
	// tooLarge: commands refused too_large, back at the mailbox's head, by Command.Key, to be
	// answered with the refusal remembered as their first answer (apply).
	tooLarge  map[string]refusal
	taking    []Command // during a tick: the commands not applied yet (see tickBody)
	collected []answer  // during a tick: the answers waiting for its write
	// fx is the state of the stored effects this owner published: fxSending while the stream
	// has not answered, fxDelivered once it acknowledged (the next write drops them from the
	// record). fxRetry: after a failed publish, nothing is sent again before then.
	fx      map[string]uint8
	fxRetry time.Time
	pl      presence // its players besides the record's (players.go)
	// reverts counts how often it went back to its stored state under this grant (revertLocked);
	// unstored, the ticks of frames not yet said stored. Both for its frames' stamps (publish).
	reverts  uint64
	unstored unstoredFrames

	// Lifecycle (lifecycle.go): the kind's options, when a command, an acknowledgement or a
	// watcher last showed up, and passivation.
	opts        *kindOpts
	lastActive  time.Time
	lastCheck   uint64 // tick of the last idle checkpoint skipped (kindOpts.idleCheckpoint)
	lastState   []byte // the state of the last write handed to the store
	passivating bool   // idle: this tick's write is marked passive, and once stored it unloads
	unloaded    bool   // passivated: out of service here, its shard indexes it (shardRun.passive)
	resched     bool   // its kind changed to one of another rate: reschedule after the tick
	soon        bool   // woken: its first tick is in the next bucket (actor.Schedule.AddSoon)
}

const (
	fxSending   = 1
	fxDelivered = 2
)

// write is one fenced write and the answers that wait for it.
type write struct {
	sent    time.Time
	rec     store.Record
	end     bool // a fenced delete marker instead of a record
	answers []answer
}

type answer struct {
	c      Command
	reply  []byte
	result string
}

// failure is why an instance is out of service on this node: the game's code failed in it.
type failure struct {
	cause  string // store.FailedInstance's causes: panic, restore, unknown_kind, bad_record, invalid_effect
	reason string
	at     time.Time
}

// maxReason bounds a failure's reason as answers and the node's lease report carry it.
const maxReason = 512

func newFailure(cause, reason string) *failure {
	if len(reason) > maxReason {
		cut := maxReason
		for cut > 0 && !utf8.RuneStart(reason[cut]) { // never half a character
			cut--
		}
		reason = reason[:cut] + "…"
	}
	return &failure{cause: cause, reason: reason, at: time.Now()}
}

// failMessageLocked is what a command to the failed instance is answered (instance_failed).
func (in *instance) failMessageLocked() string {
	return fmt.Sprintf("instance %s failed on node %s (%s: %s); nothing of this command was applied. It stays out of service until an operator reloads it "+
		"(tickctl instance reload %s) once the game is fixed; a retransmission of a command its stored record holds still gets its first answer",
		in.id, in.sh.h.cfg.Node, in.fail.cause, in.fail.reason, in.id)
}

// failLocked takes the instance out of service because the game's code failed in it: nothing
// it holds in memory is stored any more, and every command is answered instance_failed.
func (in *instance) failLocked(f *failure) {
	in.dead, in.poisoned, in.fail = true, true, f
	in.sh.h.cfg.Engine.Remove(in.handle)
	in.sh.h.failures.Add(1)
	in.sh.h.cfg.metrics.InstanceFailures.WithLabelValues(f.cause).Inc()
}

// invalidEffect is what addEffects panics with when an Emitter of the game's own hands over an
// effect that breaks the limits (actor.Effects refuses one at the call): the instance fails as if
// the game's code had panicked, so that nothing of the command or tick that made it is stored and
// the command is not answered ok with its effect dropped.
type invalidEffect struct{ err error }

func newInstance(sh *shardRun, g store.Grant, id string, kind actor.Kind, logic actor.Logic, rec store.Record) *instance {
	in := &instance{sh: sh, grant: g, id: id, kind: kind, logic: logic, rec: rec, acked: rec, lastWrite: rec.Tick,
		opts: sh.h.optsOf(kind), lastActive: time.Now(), lastState: rec.State}
	in.rec.Create = nil    // kept in acked only: a revert to a placeholder makes the instance again
	in.rec.Passive = false // each write says whether it passivates (tickBody)
	if rec.Ended {
		in.endedSeen = time.Now()
	}
	return in
}

func (in *instance) schedule() {
	in.mu.Lock()
	defer in.mu.Unlock()
	switch {
	case in.dead:
	case in.sh.batch != nil: // the shard's instances tick together, so their records share a batch
		in.handle = in.opts.sched.AddInPhase(in, uint64(in.sh.id))
	case in.soon: // woken by a command that waits for its first tick
		in.handle = in.opts.sched.AddSoon(in)
	default:
		in.handle = in.opts.sched.Add(in)
	}
}

func (in *instance) enqueue(c Command) {
	in.mu.Lock()
	if c.AckOnly() && !in.dead {
		// At once, not through the mailbox (it may be full): the session drops the answers the
		// ack covers, in memory; the next write stores it. No one waits for an answer.
		in.rec.AckSession(c.Client, c.Ack)
		in.noteActiveLocked(c.Received)
		in.mu.Unlock()
		return
	}
	switch {
	case in.unloaded: // passivated just now: the shard wakes it
		in.mu.Unlock()
		in.sh.rerouteUnloaded(in, c)
		return
	case in.fail != nil:
		if c.AckOnly() {
			in.mu.Unlock()
			return // nothing to free that a write would store, no one to answer
		}
		// A retransmission of a command the stored record holds gets its first answer; any other
		// the failure (this attempt changed nothing).
		msg := in.failMessageLocked()
		var refused answer
		fp, first, ok := in.opts.ttl.remembered(&in.acked, c, in.rec.Tick, &refused)
		in.mu.Unlock()
		if ok && fp == c.Fingerprint {
			in.sh.h.answer(c, first, "duplicate")
			return
		}
		in.sh.h.answerErr(c, wire.CodeInstanceFailed, "%s", msg)
		return
	case in.dead:
		in.mu.Unlock()
		in.sh.h.answerErr(c, wire.CodeRetry, "instance %s is moving; retry with the same request id", in.id)
		return
	case in.expiring:
		in.mu.Unlock()
		in.sh.h.answerErr(c, wire.CodeRetry, "instance %s has ended and is being removed; retry with the same request id", in.id)
		return
	case len(in.mailbox) >= maxMailbox:
		in.mu.Unlock()
		in.sh.h.answerErr(c, wire.CodeBusy, "instance %s has %d commands waiting; retry with the same request after a backoff", in.id, maxMailbox)
		return
	}
	in.mailbox = append(in.mailbox, c)
	in.noteActiveLocked(c.Received)
	in.mu.Unlock()
}

// notePause reports the pause of a hand-off learned after the instance was loaded: at its first
// tick if it has not ticked yet, else from the first tick it made.
func (in *instance) notePause(stoppedAt time.Time) {
	in.mu.Lock()
	defer in.mu.Unlock()
	switch {
	case in.pauseSeen:
	case in.firstTick.IsZero():
		in.resumeFrom = stoppedAt
	default:
		in.pauseSeen = true
		in.sh.h.cfg.metrics.HandoffPause.Observe(in.firstTick.Sub(stoppedAt).Seconds())
	}
}

// retire takes the instance out of service and returns every command it had not answered.
func (in *instance) retire() []Command {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.dead = true
	in.sh.h.cfg.Engine.Remove(in.handle)
	cmds := in.mailbox
	in.mailbox = nil
	for _, w := range []*write{in.inflight, in.pending} {
		if w != nil {
			for _, a := range w.answers {
				cmds = append(cmds, a.c)
			}
			w.answers = nil
		}
	}
	return cmds
}

// Tick implements actor.Ticker: apply the commands that arrived, advance the game, persist.
func (in *instance) Tick(time.Time) {
	var w *write
	var failed, retry []Command
	var known []answer
	var frames []actor.Frame
	var refusedFrames, refusedFx []error
	failMsg := ""
	// Every tick is timed for the shard's tick CPU (its load report, which rebalancing plans
	// weigh): sampling one tick in 8 saved 1.5 % of the process at 5 000 demo dungeons, but made a
	// shard of few instances report noise.
	start := time.Now()
	in.mu.Lock()
	if in.firstTick.IsZero() {
		in.firstTick = start
		if !in.resumeFrom.IsZero() {
			in.pauseSeen = true
			in.sh.h.cfg.metrics.HandoffPause.Observe(start.Sub(in.resumeFrom).Seconds())
		}
	}
	in.considerPassivateLocked(start)
	func() {
		defer func() {
			if p := recover(); p != nil {
				failed, known, retry = in.poison(p)
			}
		}()
		w = in.tickLocked()
		if f, ok := in.logic.(actor.Framer); ok && !in.dead {
			frames = f.TakeFrames()
		}
		if r, ok := in.logic.(actor.RefusedFrames); ok && !in.dead {
			refusedFrames = r.TakeRefusedFrames()
		}
		if r, ok := in.logic.(actor.RefusedEffects); ok && !in.dead {
			refusedFx = r.TakeRefusedEffects()
		}
		in.dropEndedLogicLocked() // its final frames are taken
	}()
	var endTick uint64 // frames made in the tick it ended (players.go), which a tombstone does not count
	if len(in.pl.frames) > 0 {
		var end []actor.Frame
		end, endTick = in.takeEndFramesLocked()
		frames = append(end, frames...)
	}
	tick, outbox, resched := max(in.rec.Tick, endTick), len(in.acked.Fx) > 0, in.resched
	if in.fail != nil {
		failMsg = in.failMessageLocked()
	}
	stamp := in.frameStampLocked(tick, frames)
	in.mu.Unlock()
	in.noteRefused(tick, refusedFrames, refusedFx)
	if len(frames) > 0 || stamp.Notice {
		in.publish(stamp, frames)
	}
	if outbox { // those loaded with the record, and those whose publish failed
		in.sendEffects()
	}
	in.sh.cpu.Add(int64(time.Since(start)))
	for _, c := range failed {
		in.sh.h.answerErr(c, wire.CodeInstanceFailed, "%s", failMsg)
	}
	for _, a := range known {
		in.sh.h.answer(a.c, a.reply, a.result)
	}
	for _, c := range retry {
		// Its original may be in the write in flight: applied or not, that write says.
		in.sh.h.answerErr(c, wire.CodeUnknownOutcome, "instance %s failed on this node before the first answer of this retransmission was stored; retransmit the same request to learn whether it was applied", in.id)
	}
	if w != nil {
		in.sh.h.enqueueWrite(in, w)
	}
	if resched {
		in.reschedule()
	}
}

// frameStampLocked is the stamp of what this tick publishes: its grant and tick, the stored tick
// (the last record the store acknowledged) and reverts; Notice if it publishes no frame but owes
// a stored notice (unstoredFrames).
func (in *instance) frameStampLocked(tick uint64, frames []actor.Frame) Frame {
	st := Frame{Shard: in.grant.Shard, Instance: in.id, Epoch: in.grant.Epoch, Token: in.grant.Token, Tick: tick,
		Stored: in.acked.Tick, Reverts: in.reverts}
	if in.sh.h.cfg.Frames != nil && (len(frames) > 0 || !in.dead) {
		st.Notice = in.unstored.tick(tick, st.Stored, frames)
	}
	return st
}

// publish hands a tick's frames to the host's publisher, stamped (frameStampLocked), or its stored
// notice. A frame that breaks the limits (only a Framer of the game's own can hand one over:
// actor.Frames refuses it at the call) is refused whole, logged and counted: frames are display only.
func (in *instance) publish(stamp Frame, frames []actor.Frame) {
	h := in.sh.h
	if stamp.Notice && h.cfg.Frames != nil {
		h.cfg.Frames.Publish(stamp)
	}
	for i, f := range frames {
		if err := actor.ValidFrame(f); err != nil {
			h.cfg.metrics.FramesRefused.Inc()
			in.sh.log.Error("frame refused: the game's Framer handed over a frame that breaks the limits (actor.Frames.Publish would have returned this error)",
				"instance", in.id, "token", in.grant.Token, "tick", stamp.Tick, "err", err)
			continue
		}
		if h.cfg.Frames != nil {
			fr := stamp
			fr.Topic, fr.To, fr.Index, fr.Payload, fr.Notice = f.Topic, f.To, uint64(i), f.Payload, false
			h.cfg.Frames.Publish(fr)
		}
	}
}

// noteRefused logs and counts the frames and effects the game's outboxes refused at the call
// (Publish and Emit returned the error to the game): a game that ignored the error is still seen.
func (in *instance) noteRefused(tick uint64, frames, effects []error) {
	m := in.sh.h.cfg.metrics
	for _, err := range frames {
		m.FramesRefused.Inc()
		in.sh.log.Warn("frame refused at Publish (the game was given the error)", "instance", in.id, "tick", tick, "err", err)
	}
	for _, err := range effects {
		m.EffectsRefused.Inc()
		in.sh.log.Warn("effect refused at Emit (the game was given the error; nothing of it is stored)", "instance", in.id, "tick", tick, "err", err)
	}
}

// outboxFull reports whether an outbox is at its bound (store.MaxOutbox effects or
// store.MaxOutboxBytes of payload).
func outboxFull(fx []store.Effect) bool {
	if len(fx) >= store.MaxOutbox {
		return true
	}
	n := 0
	for _, e := range fx {
		n += len(e.Payload)
	}
	return n >= store.MaxOutboxBytes
}

// addEffects puts a tick's effects in the outbox, each with a key never used before
// (<id>:<epoch>:<seq>), and makes this tick write: an effect leaves only once the write holding
// it was accepted. One that breaks the limits (only an Emitter of the game's own can hand one
// over: actor.Effects refuses it at the call) fails the instance (invalidEffect): dropping it
// would answer ok a command whose effect never happens.
func (in *instance) addEffects(tick uint64, effs []actor.Effect) {
	if len(effs) == 0 {
		return
	}
	fx := in.rec.Fx[:len(in.rec.Fx):len(in.rec.Fx)] // appends never touch what a record holds
	for _, e := range effs {
		if err := actor.ValidEffect(e); err != nil {
			in.sh.h.cfg.metrics.EffectsRefused.Inc()
			panic(invalidEffect{err})
		}
		in.rec.FxSeq++
		fx = append(fx, store.Effect{Key: store.EffectKey(in.id, in.rec.FxEpoch, in.rec.FxSeq), Kind: e.Kind, Payload: e.Payload})
		in.sh.h.cfg.metrics.EffectsEmitted.Inc()
		in.forceWrite = true
	}
	in.rec.Fx = fx
}

// dropDelivered leaves out of the next record the effects the stream acknowledged.
func (in *instance) dropDelivered() {
	if len(in.fx) == 0 || len(in.rec.Fx) == 0 {
		return
	}
	var keep []store.Effect
	dropped := false
	for _, e := range in.rec.Fx {
		if in.fx[e.Key] == fxDelivered {
			dropped = true
			continue
		}
		keep = append(keep, e)
	}
	if dropped {
		in.rec.Fx = keep
	}
}

// forgetDelivered forgets delivered effects the acknowledged record no longer holds.
func (in *instance) forgetDelivered() {
	if len(in.fx) == 0 {
		return
	}
	held := make(map[string]bool, len(in.acked.Fx))
	for _, e := range in.acked.Fx {
		held[e.Key] = true
	}
	for k, st := range in.fx {
		if st == fxDelivered && !held[k] {
			delete(in.fx, k)
		}
	}
}

// sendEffects publishes the effects of the acknowledged record that are not sent yet: an effect
// leaves only once the write holding it was accepted, and a new owner sends what it loaded.
func (in *instance) sendEffects() {
	pub := in.sh.h.cfg.Effects
	if pub == nil {
		return
	}
	in.mu.Lock()
	// Not even a retired or poisoned instance holds them back: what its acknowledged record holds
	// was accepted, and publishing it from anyone is safe (the stream removes repeats).
	if len(in.acked.Fx) == 0 {
		in.mu.Unlock()
		return
	}
	if time.Now().Before(in.fxRetry) {
		if in.poisoned { // its publish failed before the panic: no tick will come to retry it
			in.retryEffectsLocked()
		}
		in.mu.Unlock()
		return
	}
	var send []store.Effect
	for _, e := range in.acked.Fx {
		if in.fx[e.Key] == 0 {
			if in.fx == nil {
				in.fx = map[string]uint8{}
			}
			in.fx[e.Key] = fxSending
			send = append(send, e)
		}
	}
	in.mu.Unlock()
	for _, e := range send {
		pub.Publish(in.id, e, func(err error) { in.effectSent(e.Key, err) })
	}
}

// sendEffectsOnce publishes, for an instance that does not tick (failed when it was loaded), the
// effects its stored record holds: they were accepted, and publishing them is safe from anyone.
// A failed publish is retried by the poisoned instance's own retry (retryEffectsLocked).
func (in *instance) sendEffectsOnce() {
	in.mu.Lock()
	send := in.fail != nil && len(in.acked.Fx) > 0
	in.mu.Unlock()
	if send {
		in.sh.h.spawn(in.sendEffects)
	}
}

// retryEffectsLocked schedules sendEffects for in.fxRetry: a poisoned instance no longer ticks,
// and ticks retry failed publishes, so it retries on its own while its shard runs here (a new
// owner would send what it loads). One retry is scheduled at a time; a failure after it was
// scheduled moves in.fxRetry later, and the retry then waits for that. Under in.mu.
func (in *instance) retryEffectsLocked() {
	if in.fxRetrying {
		return
	}
	in.fxRetrying = true
	time.AfterFunc(time.Until(in.fxRetry), func() {
		in.mu.Lock()
		in.fxRetrying = false
		if time.Now().Before(in.fxRetry) { // moved by a later failure: sendEffects would not send yet
			in.retryEffectsLocked()
			in.mu.Unlock()
			return
		}
		in.mu.Unlock()
		if in.sh.ctx.Err() == nil {
			in.sh.h.spawn(in.sendEffects)
		}
	})
}

func (in *instance) effectSent(key string, err error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if err != nil {
		delete(in.fx, key)
		in.fxRetry = time.Now().Add(time.Second)
		in.sh.h.cfg.metrics.EffectsFailed.Inc()
		if in.poisoned {
			in.retryEffectsLocked()
		}
		return
	}
	in.fx[key] = fxDelivered
	in.sh.h.cfg.metrics.EffectsPublished.Inc()
}

func (in *instance) tickLocked() *write {
	w := in.tickBody()
	in.taking, in.collected = nil, nil
	return w
}

// tickBody is one tick; while it runs, in.taking holds the commands not applied yet and
// in.collected the answers that wait for this tick's write, so that a panic of the game's code
// (poison) answers every one of them.
func (in *instance) tickBody() *write {
	if in.dead || in.expiring {
		return nil
	}
	ended := in.rec.Ended
	tick := in.rec.Tick
	if !ended {
		tick++ // a tombstone does not tick
	}
	var cmds []Command
	if len(in.mailbox) == 0 {
		in.isolate = 0
	}
	switch {
	case in.isolate == 0:
		cmds = in.mailbox
		in.mailbox, in.spare = in.spare[:0], cmds
	case in.inflight == nil && in.pending == nil:
		// After a write refused as too large: one command per write until those it held have
		// gone again (sortTooLargeLocked), so that only the one that makes it too large is refused.
		// Only once the write before is settled: a command waiting in the pending write would
		// come back with the offender's if its write were refused, and the two would go round
		// for ever.
		cmds = []Command{in.mailbox[0]}
		in.mailbox = append([]Command(nil), in.mailbox[1:]...)
		in.isolate--
	}
	if !in.rec.Ended && outboxFull(in.rec.Fx) {
		// The effects stream has not taken this instance's effects for a while: hold new
		// commands (which could make more) with busy; ticks go on.
		for i, c := range cmds {
			cmds[i] = Command{}
			// A retransmission of a command the stored record holds gets its first answer: busy
			// says "without effect", which it had.
			if first, result, ok := in.opts.ttl.storedAnswer(&in.acked, c, tick); ok {
				in.sh.h.answer(c, first, result)
				continue
			}
			in.sh.h.answerErr(c, wire.CodeBusy, "instance %s holds %d effects not yet delivered (the effects stream is unavailable?); retry later", in.id, len(in.rec.Fx))
		}
		cmds = cmds[:0]
	}
	if len(cmds) > 0 {
		in.passivating = false
	}
	var answers []answer
	for i, c := range cmds {
		in.taking = cmds[i:]
		a, now := in.apply(tick, c)
		cmds[i] = Command{}
		if now && a.result == wire.CodeUnknownInstance {
			in.sh.deny(in.grant, a.c, a.reply) // "has ended": confirmed before it is said
		} else if now {
			in.sh.h.answer(a.c, a.reply, a.result)
		} else {
			answers = append(answers, a)
			in.collected = answers
		}
	}
	in.taking = nil
	if in.rec.Ended {
		if len(answers) == 0 && !in.forceWrite {
			return in.expireLocked()
		}
		// The tombstone (or a retransmission's answer) is written like any record.
		in.forceWrite = false
		in.lastWrite = tick
		rec := in.rec.Capped() // appends to in.rec never touch what the write holds
		rec.State = nil
		w := &write{rec: rec, answers: answers}
		in.queue(w)
		return in.takeSendable(w)
	}
	if ended { // created again from its tombstone: this tick is its first
		tick++
	}
	in.presenceTickLocked(tick) // players heard from are seen, silent ones leave (players.go)
	in.logic.Tick(tick)
	in.rec.Tick = tick
	if e, ok := in.logic.(actor.Emitter); ok {
		in.addEffects(tick, e.TakeEffects())
	}
	if in.takeLifecycleLocked(tick, false); in.rec.Ended { // its Logic ended it in this tick
		return in.tombstoneWriteLocked(tick, answers)
	}
	if len(answers) == 0 && !in.forceWrite && !in.checkpointDue(tick) {
		return nil
	}
	in.dropDelivered()
	state, err := in.logic.MarshalState()
	if err != nil {
		panic(fmt.Sprintf("MarshalState: %v", err))
	}
	if len(answers) == 0 && !in.forceWrite && in.idleUnchangedLocked(tick, state) {
		return nil
	}
	in.forceWrite = false
	in.lastWrite = tick
	in.lastState = state
	rec := in.rec.Capped() // appends to in.rec never touch what the write holds
	rec.State = state
	rec.Passive = in.passivating
	w := &write{rec: rec, answers: answers}
	in.queue(w)
	return in.takeSendable(w)
}

// expireLocked removes a stored tombstone once it is older than the host's TombstoneTTL: a fenced
// delete marker, after which a retransmitted end gets unknown_instance.
func (in *instance) expireLocked() *write {
	// Measured on this node's clock from when it learned of the end, never against EndedAt (another
	// node's wall clock): a new owner keeps a tombstone at least as long as the one that wrote it.
	if !in.acked.Ended || in.pending != nil || in.inflight != nil || time.Since(in.endedSeen) < in.sh.h.cfg.TombstoneTTL {
		return nil
	}
	for _, e := range in.acked.Fx {
		if in.fx[e.Key] != fxDelivered {
			return nil // the delete marker would take an undelivered effect with it
		}
	}
	in.expiring = true
	w := &write{end: true}
	in.queue(w)
	return in.takeSendable(w)
}

// apply runs one command; now reports an answer that does not wait for a write.
func (in *instance) apply(tick uint64, c Command) (a answer, now bool) {
	a.c = c
	in.heardLocked(c.Sender.Player) // a command says its player is there (players.go)
	if fp, res, ok := in.opts.ttl.remembered(&in.rec, c, tick, &a); ok {
		if fp != c.Fingerprint {
			a.reply = wire.EncodeReply(wire.Reply{Error: wire.Errorf(wire.CodeRequestIDReused,
				"request %s was used for a different command", c.Key())})
			a.result = wire.CodeRequestIDReused
			// Final: said at once only if the stored record holds the other command, else with
			// the write that stores it (it may yet be dropped: a refused write, a panic).
			var refused answer
			sfp, _, stored := in.opts.ttl.remembered(&in.acked, c, tick, &refused)
			return a, stored && sfp == fp
		}
		// A retransmission: the first answer, once the record holding it is stored. Its client
		// is not silent: its session is not the next to be let go of.
		a.reply, a.result = res, "duplicate"
		if c.Client != "" {
			in.rec.TouchSession(c.Client, tick)
		}
		return a, false
	} else if r, ok := in.tooLarge[c.Key()]; ok && r.fingerprint == c.Fingerprint && a.reply == nil {
		// Refused too_large alone in its write: the refusal is its first answer, remembered as
		// an applied command's is, so that a retransmission gets it again and is never applied.
		delete(in.tooLarge, c.Key())
		a.reply, a.result = r.reply, wire.CodeTooLarge
		in.opts.ttl.remember(&in.rec, c, tick, r.reply)
		return a, false
	} else if a.result == wire.CodeAnswerForgotten {
		// Like a retransmission's first answer: said once the record that let its session go
		// is stored (until then the write that applied it may yet be undone).
		return a, false
	} else if a.reply != nil {
		return a, true // refused by its session (stale, or too many unacknowledged)
	}
	if in.rec.Ended {
		if c.Type != "create" {
			a.reply = wire.EncodeReply(wire.Reply{Error: wire.Errorf(wire.CodeUnknownInstance, "instance %s has ended", in.id)})
			a.result = wire.CodeUnknownInstance
			return a, in.acked.Ended // final: said at once only if the end is stored, else with its write
		}
		if !in.revive(c, &a) {
			return a, true
		}
	} else {
		switch c.Type {
		case "create":
			a.reply = wire.EncodeReply(wire.Reply{Error: wire.Errorf(wire.CodeExists, "instance %s already exists", in.id)})
			a.result = wire.CodeExists
		case "end":
			if !mayEnd(c, in.rec.Creator) {
				a.reply = wire.EncodeReply(wire.Reply{Error: wire.Errorf(wire.CodeForbidden,
					"instance %s: only its creator or a trusted sender (an operator, a trusted gateway) may end it", in.id)})
				a.result = wire.CodeForbidden
				break
			}
			// A tombstone, not a delete marker: the record keeps the request window, so a
			// retransmitted end gets this answer and never ends a later instance of the ID.
			in.rec.Ended, in.rec.EndedAt = true, time.Now().UnixMilli()
			in.endedSeen = time.Now()
			in.endPlayersLocked(tick) // every player in leaves (players.go)
			in.forceWrite = true      // the logic goes once this tick's frames are taken (dropEndedLogicLocked)
			a.reply = wire.EncodeReply(wire.Reply{OK: true, Result: map[string]any{"ended": in.id, "tick": in.rec.Tick}})
			a.result = "ok"
		default:
			res, err := in.handleLocked(tick, c) // Logic.Handle, and its players' joins (players.go)
			a.reply, a.result = wire.ReplyFor(res, err)
			var effs []actor.Effect
			if e, ok := in.logic.(actor.Emitter); ok {
				effs = e.TakeEffects() // now: an end later in this tick drops the logic
			}
			if a.result == wire.CodeBadRequest {
				in.takeLifecycleLocked(tick, true)
				return a, true // malformed: nothing changed, nothing to remember, store or emit
			}
			in.addEffects(tick, effs)
			in.takeLifecycleLocked(tick, false) // its labels; an end by its Logic ends the instance here
		}
	}
	in.opts.ttl.remember(&in.rec, c, tick, a.reply)
	return a, false
}

// remembered looks a command up in what the record remembers for exactly-once: the first answer
// and fingerprint of an applied one (ok), or, for a numbered command its session refuses, a's
// reply set to the refusal.
func (t ttls) remembered(rec *store.Record, c Command, tick uint64, a *answer) (fp uint64, res []byte, ok bool) {
	if c.Client == "" {
		q, ok := rec.FindRequest(c.ID)
		return q.Fingerprint, q.Result, ok
	}
	switch st, q := rec.CheckSession(c.Client, c.Seq, c.Ack, tick, t.session); st {
	case store.SessionNoRoom:
		a.reply = wire.EncodeReply(wire.Reply{Error: wire.Errorf(wire.CodeBusy,
			"instance has %d client sessions holding unacknowledged answers; retry after a backoff", store.MaxClientSessions)})
		a.result = wire.CodeBusy
	case store.SessionSenderFull:
		a.reply = wire.EncodeReply(wire.Reply{Error: wire.Errorf(wire.CodeRateLimited,
			"this sender has %d client sessions with this instance holding unacknowledged answers: acknowledge them (%s) or retry after a backoff",
			store.MaxSenderSessions, wire.HeaderAck)})
		a.result = wire.CodeRateLimited
	case store.SessionDuplicate:
		return q.Fingerprint, q.Result, true
	case store.SessionForgotten:
		a.reply = wire.EncodeReply(wire.Reply{Error: wire.Errorf(wire.CodeAnswerForgotten,
			"request %s was applied, but its answer is no longer kept: the instance let go of client %s's session, which held it, to make room for other clients while the client was silent; it is not applied again",
			c.Key(), c.Client)})
		a.result = wire.CodeAnswerForgotten
	case store.SessionStale:
		a.reply = wire.EncodeReply(wire.Reply{Error: wire.Errorf(wire.CodeRequestIDReused,
			"request %s is at or below the acknowledgement of client %s: it was answered already", c.Key(), c.Client)})
		a.result = wire.CodeRequestIDReused
	case store.SessionFull:
		a.reply = wire.EncodeReply(wire.Reply{Error: wire.Errorf(wire.CodeBadRequest,
			"client %s has %d unacknowledged commands to this instance: acknowledge answers (%s) before sending more",
			c.Client, store.MaxClientInFlight, wire.HeaderAck)})
		a.result = wire.CodeBadRequest
	}
	return 0, nil, false
}

// storedAnswer is the answer the stored record (acked) gives a command that was applied before:
// its first answer (a retransmission), or answer_forgotten if acked let its session go. ok is
// false if acked does not hold it applied (or holds another command under its ID).
func (t ttls) storedAnswer(acked *store.Record, c Command, tick uint64) (reply []byte, result string, ok bool) {
	var refused answer
	if fp, first, ok := t.remembered(acked, c, tick, &refused); ok && fp == c.Fingerprint {
		return first, "duplicate", true
	}
	if refused.result == wire.CodeAnswerForgotten {
		return refused.reply, refused.result, true
	}
	return nil, "", false
}

// retransmission: a's command was applied before (answered with its first answer, or with
// answer_forgotten): nothing of it is new.
func (a *answer) retransmission() bool {
	return a.result == "duplicate" || a.result == wire.CodeAnswerForgotten
}

// remember records an applied command and its first answer in the record, at instance tick.
func (t ttls) remember(rec *store.Record, c Command, tick uint64, reply []byte) {
	if c.Client == "" {
		rec.RememberRequest(store.Request{ID: c.ID, Fingerprint: c.Fingerprint, Result: reply, At: tick}, t.request)
		return
	}
	rec.RememberSession(c.Client, c.Ack, store.SeqResult{Seq: c.Seq, Fingerprint: c.Fingerprint, Result: reply}, tick, t.session)
}

// revive makes a new instance of an ended ID from a create command; false if the command is
// refused (a's reply says why). The tombstone's request window and tick carry on.
func (in *instance) revive(c Command, a *answer) bool {
	// While its tombstone lasts, an ID is its last creator's: only it, or a trusted sender, may
	// make it again (a player must not take over an ID the trusted side made, or another's).
	if !mayEnd(c, in.rec.Creator) {
		a.reply = wire.EncodeReply(wire.Reply{Error: wire.Errorf(wire.CodeForbidden,
			"instance %s has ended; only its creator or a trusted sender may create it again until its tombstone expires", in.id)})
		a.result = wire.CodeForbidden
		return false
	}
	var args struct {
		Kind string `msgpack:"kind"`
	}
	cmd := actor.Command{Type: c.Type, Body: c.Body, Sender: c.Sender}
	kinds := in.sh.h.cfg.Kinds
	if err := cmd.Decode(&args); err != nil || args.Kind == "" {
		a.reply = wire.EncodeReply(wire.Reply{Error: wire.Errorf(wire.CodeBadRequest, `create needs a string "kind" (one of %v)`, kinds.Names())})
		a.result = wire.CodeBadRequest
		return false
	}
	kind, ok := kinds.Get(args.Kind)
	if !ok {
		a.reply = wire.EncodeReply(wire.Reply{Error: wire.Errorf(wire.CodeBadRequest, "unknown kind %q (one of %v)", args.Kind, kinds.Names())})
		a.result = wire.CodeBadRequest
		return false
	}
	if err := actor.AuthorizeCreate(kind, in.id, cmd); err != nil {
		a.reply, a.result = wire.ReplyFor(nil, err)
		return false
	}
	labels, err := createLabels(cmd)
	if err != nil {
		a.reply = wire.EncodeReply(wire.Reply{Error: wire.Errorf(wire.CodeBadRequest, "%v", err)})
		a.result = wire.CodeBadRequest
		return false
	}
	logic, err := kind.New(in.id, cmd)
	if err != nil {
		a.reply, a.result = wire.ReplyFor(nil, err)
		return false
	}
	in.setKindLocked(kind)
	in.logic = logic
	in.rec.Kind, in.rec.Ended, in.rec.EndedAt, in.rec.Creator = args.Kind, false, 0, c.SenderKey
	in.rec.Labels = initialLabels(labels, logic)
	in.forceWrite = true
	a.reply = wire.EncodeReply(wire.Reply{OK: true, Result: map[string]any{"created": in.id, "kind": args.Kind}})
	a.result = "ok"
	return true
}

// mayEnd: c's sender is trusted, or the untrusted sender that created the instance.
func mayEnd(c Command, creator string) bool {
	return c.Sender.Trusted || creator != "" && c.SenderKey == creator
}

// queue makes w the pending write, merging the answers of a pending write it replaces.
func (in *instance) queue(w *write) {
	if in.pending != nil {
		w.answers = append(in.pending.answers, w.answers...)
	}
	in.pending = w
}

// takeSendable moves the pending write in flight if none is, and returns it to send.
func (in *instance) takeSendable(w *write) *write {
	// DESIGN 4: after any uncertainty nothing more is written under that token — the uncertain
	// write could land late over this one. The pending write waits; the rebuild answers it retry.
	if in.inflight != nil || in.pending != w || in.failed != nil || in.sh.uncertain(in.grant.Token) {
		return nil
	}
	in.inflight, in.pending = w, nil
	return w
}

// send hands the in-flight write to the store; written runs when it is settled.
func (in *instance) send(w *write) {
	h := in.sh.h
	if h.cfg.BeforeWrite != nil {
		h.cfg.BeforeWrite(in.sh.id, in.id)
	}
	w.sent = time.Now()
	if w.end {
		h.spawn(func() {
			_, err := h.cfg.Store.End(in.sh.ctx, in.grant, in.id)
			in.written(w, err)
		})
		return
	}
	if in.sh.batch != nil && !h.batchesOff.Load() {
		in.sh.batch.add(in, w)
		return
	}
	h.cfg.Store.WriteAsync(in.grant, in.id, w.rec, func(_ uint64, err error) { in.written(w, err) })
}

func (in *instance) written(w *write, err error) {
	h := in.sh.h
	h.cfg.metrics.StateWrite(writeResult(err))
	if err == nil {
		h.cfg.metrics.WriteSeconds.Observe(time.Since(w.sent).Seconds())
	}
	in.mu.Lock()
	answers := w.answers
	w.answers = nil
	if in.inflight == w {
		in.inflight = nil
	}
	refused := store.Refused(err) // a definite refusal: nothing stored, the token still good
	if err != nil && !refused {
		in.failed = err
		in.sh.markUncertain(in.grant.Token)
	}
	if in.dead && err != nil {
		// Out of service (stopped, rebuilt under a rotated token, or stopped for a hand-off): a
		// rejection here is the fence doing its job. Commands still attached had no effect.
		in.mu.Unlock()
		code, what := writeErrCode(err)
		for _, a := range answers {
			h.answerWriteErr(a.c, err, code, "write of instance %s %s: %v", in.id, what, err)
		}
		in.logWrite(slog.LevelInfo, "write of an instance out of service here rejected", answers, err)
		return
	}
	var next *write
	var known []answer // too large: retransmissions the stored record answers
	wasEnded := in.acked.Ended
	unload := false
	if err == nil {
		if !w.end {
			in.acked = w.rec
			in.forgetDelivered()
		}
		if !in.dead {
			next = in.takeSendable(in.pending)
		}
		unload = in.unloadLocked(w)
	} else if refused && !in.dead {
		answers = in.revertLocked(answers)
		if w.end {
			in.expiring = false // the delete marker was not stored: a later tick sends it again
		}
		if errors.Is(err, store.ErrTooLarge) {
			answers, known = in.sortTooLargeLocked(answers)
			in.refuseTooLargeLocked(answers, err)
		}
	}
	in.mu.Unlock()

	switch {
	case err == nil:
		for _, a := range answers {
			h.answer(a.c, a.reply, a.result)
		}
		in.sendEffects()
		if w.end {
			for _, c := range in.retire() {
				h.answerErr(c, wire.CodeRetry, "instance %s was removed; retry with the same request id", in.id)
			}
			in.sh.remove(in)
			in.sh.log.Info("tombstone of an ended instance removed", "instance", in.id, "token", in.grant.Token)
		} else if w.rec.Ended && !wasEnded {
			in.sh.log.Info("instance ended", "instance", in.id, "token", in.grant.Token, "tick", w.rec.Tick)
		}
		if next != nil {
			h.enqueueWrite(in, next)
		}
		if unload {
			in.sh.passivate(in)
		}
	case errors.Is(err, store.ErrTooLarge):
		for _, a := range known {
			h.answer(a.c, a.reply, a.result)
		}
		in.logWrite(slog.LevelError, "record too large: instance reverted to its last stored state", answers, err)
	case refused:
		// Nothing was stored and the token is still ours: undo and go on, no rotation.
		for _, a := range answers {
			h.answerWriteErr(a.c, err, wire.CodeRetry, "the store refused the write of instance %s, nothing was applied (%v); retry with the same request id", in.id, err)
		}
		in.logWrite(slog.LevelError, "write refused by the store: instance reverted to its last stored state", answers, err)
	default:
		code, what := writeErrCode(err)
		for _, a := range answers {
			h.answerWriteErr(a.c, err, code, "write of instance %s %s: %v", in.id, what, err)
		}
		if errors.Is(err, store.ErrStaleOwner) {
			in.logWrite(slog.LevelWarn, "write rejected by the fence", answers, err)
		} else {
			in.logWrite(slog.LevelWarn, "write outcome unknown: the shard's token is rotated", answers, err)
		}
		// Not on the acknowledgement path: settling it may read from the store.
		h.spawn(func() { in.sh.writeFailed(in, err) })
	}
}

// writeErrCode is the answer to the commands of a write that failed with err: retry where it
// certainly stored nothing (the store refused it, or the fence rejected it), unknown_outcome where
// it may have landed (DESIGN 4: an uncertain write); what says which, for the message.
func writeErrCode(err error) (code, what string) {
	if store.Refused(err) || errors.Is(err, store.ErrStaleOwner) || errors.Is(err, errShardUncertain) {
		return wire.CodeRetry, "was not stored (retry with the same request id)"
	}
	return wire.CodeUnknownOutcome, "may or may not have been stored (retransmit the same request to learn which)"
}

// refusal is the too_large answer of a command (tooLarge).
type refusal struct {
	fingerprint uint64
	reply       []byte
}

// refuseTooLargeLocked puts the commands that made a write too large, alone in it
// (sortTooLargeLocked's offenders), back at the mailbox's head with their refusal, to be
// remembered as their first answer and said with the write that stores it (apply).
func (in *instance) refuseTooLargeLocked(offenders []answer, err error) {
	if len(offenders) == 0 {
		return
	}
	if in.tooLarge == nil {
		in.tooLarge = map[string]refusal{}
	}
	cmds := make([]Command, 0, len(offenders)+len(in.mailbox))
	for _, a := range offenders {
		in.tooLarge[a.c.Key()] = refusal{a.c.Fingerprint, wire.EncodeReply(wire.Reply{Error: wire.Errorf(wire.CodeTooLarge,
			"the instance's record would be too large (%v); the command was undone: do not retry it (a new request may send it again)", err)})}
		cmds = append(cmds, a.c)
	}
	in.mailbox = append(cmds, in.mailbox...)
}

// sortTooLargeLocked sorts the answers of a write the store refused as too large (the instance
// is reverted already) so that only the command that made it too large is refused: a
// retransmission the stored record holds gets its first answer (known), and when the write held
// more than one command, the others go back to the head of the mailbox to be applied again one
// write each (isolate), so that the offender's write holds it alone and only it is answered
// too_large. What it returns as offenders is the one command of a write that held only one.
func (in *instance) sortTooLargeLocked(answers []answer) (offenders, known []answer) {
	var again []answer
	for _, a := range answers {
		if a.result == wire.CodeTooLarge {
			// Its refusal, remembered, did not fit either: said now, unremembered (a
			// retransmission of it may be refused the same way again).
			known = append(known, a)
			continue
		}
		if a.retransmission() {
			if first, result, ok := in.opts.ttl.storedAnswer(&in.acked, a.c, in.rec.Tick); ok {
				a.reply, a.result = first, result
				known = append(known, a)
				continue
			}
		}
		again = append(again, a) // its original was undone too, or it is new: apply it again
	}
	if len(again) <= 1 {
		return again, known // alone in its write: it is the offender
	}
	cmds := make([]Command, 0, len(again)+len(in.mailbox))
	for _, a := range again {
		cmds = append(cmds, a.c)
	}
	in.mailbox = append(cmds, in.mailbox...)
	in.isolate += len(again)
	return nil, known
}

// revertLocked restores the last acknowledged record after a write the store refused outright;
// it returns every answer that was waiting, none of which took effect.
func (in *instance) revertLocked(answers []answer) []answer {
	if in.pending != nil {
		answers = append(answers, in.pending.answers...)
		in.pending = nil
	}
	var logic actor.Logic
	var err error
	switch {
	case in.acked.Ended:
	case len(in.acked.State) == 0: // a Create placeholder: its initial state was never stored
		logic, err = in.kind.New(in.id, actor.Command{Type: "create", Body: in.acked.Create})
		in.forceWrite = true
	default:
		logic, err = in.kind.Restore(in.id, in.acked.State)
	}
	tick := in.rec.Tick
	in.reverts++               // its frames after the stored tick were undone (wire.HeaderReverts)
	in.rec = in.acked.Capped() // what the acknowledged record holds stays as it is
	in.rec.Tick, in.rec.Create, in.rec.Passive = tick, nil, false
	in.passivating = false
	in.logic = logic
	if err != nil { // cannot go back: take it out of service here, as a panicking instance is
		in.sh.log.Error("instance cannot be reverted to its last stored state; stopped on this node until reloaded",
			"instance", in.id, "token", in.grant.Token, "err", err)
		in.failLocked(newFailure("restore", fmt.Sprintf("its kind could not Restore its last stored state: %v", err)))
	}
	return answers
}

// poison stops an instance whose game code panicked; its stored state stays as it was.
func (in *instance) poison(p any) (failed []Command, known []answer, retry []Command) {
	f := newFailure("panic", fmt.Sprintf("the game's code panicked: %v", p))
	if ie, ok := p.(invalidEffect); ok {
		f = newFailure("invalid_effect", fmt.Sprintf("the game's Emitter handed over an effect that breaks the limits (%v); nothing of it was stored", ie.err))
		in.sh.log.Error("instance failed: invalid effect; stopped on this node until reloaded", "instance", in.id, "token", in.grant.Token,
			"tick", in.rec.Tick, "err", ie.err)
	} else {
		in.sh.log.Error("instance panicked; stopped on this node until reloaded", "instance", in.id, "token", in.grant.Token,
			"tick", in.rec.Tick, "panic", p, "stack", string(debug.Stack()))
	}
	in.failLocked(f)
	failed = in.mailbox
	in.mailbox = nil
	for _, c := range in.taking { // the one that panicked and those after it
		if c.Instance != "" {
			failed = append(failed, c)
		}
	}
	// Applied in memory only (this tick's, and earlier ticks' whose write waited behind the one
	// in flight): never written, and never will be. A retransmission among them is no new
	// command: it gets its first answer if the stored record holds it, else retry (its original
	// is in flight, or was refused).
	waiting := in.collected
	if in.pending != nil {
		waiting = append(waiting, in.pending.answers...)
		in.pending = nil
	}
	acked := in.acked
	for _, a := range waiting {
		if !a.retransmission() {
			failed = append(failed, a.c)
			continue
		}
		if first, result, ok := in.opts.ttl.storedAnswer(&acked, a.c, in.rec.Tick); ok {
			a.reply, a.result = first, result // as stored: the record in memory may have forgotten it and applied it again
			known = append(known, a)
		} else {
			retry = append(retry, a.c)
		}
	}
	in.taking, in.collected = nil, nil
	return failed, known, retry
}

// haltTicks makes the instance skip every tick from now on (one already running completes).
func (in *instance) haltTicks() {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.dead = true
	in.sh.h.cfg.Engine.Remove(in.handle)
}

// giveUpLocked takes the instance out of service without a flush: the commands waiting and those
// of the pending (unsent) write are answered retry with the message (its %s is the instance);
// the write in flight answers its own when it settles. It unlocks in.mu.
func (in *instance) giveUpLocked(msg string) {
	in.dead = true
	cmds := in.mailbox
	in.mailbox = nil
	if in.pending != nil {
		for _, a := range in.pending.answers {
			cmds = append(cmds, a.c)
		}
		in.pending = nil
	}
	in.mu.Unlock()
	for _, c := range cmds {
		in.sh.h.answerErr(c, wire.CodeRetry, msg, in.id)
	}
}

// flush stops ticking, waits for the write in flight, and writes the latest state synchronously.
func (in *instance) flush(ctx context.Context) error {
	if err := in.awaitInflight(ctx); err != nil {
		return err
	}
	f, err := in.takeFinalLocked() // unlocks in.mu
	for _, c := range f.cmds {
		in.sh.h.answerErr(c, f.code, f.why, f.args...)
	}
	if err != nil {
		return err
	}
	return in.writeFinal(ctx, f)
}

// awaitInflight waits until no write of the instance is in flight and returns holding in.mu, or
// gives the instance up when ctx ends first (then in.mu is released).
func (in *instance) awaitInflight(ctx context.Context) error {
	for {
		in.mu.Lock()
		if in.inflight == nil {
			return nil
		}
		in.mu.Unlock()
		select {
		case <-ctx.Done():
			// Out of service without a flush: what has not been sent is answered retry (the write
			// in flight answers its own commands when it settles).
			in.mu.Lock()
			in.sh.h.cfg.Engine.Remove(in.handle)
			in.giveUpLocked("instance %s could not be flushed in time; retry with the same request id")
			return fmt.Errorf("flush %s: %w", in.id, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

// finalWrite is what a flush still has to do once the instance stopped ticking: the commands to
// answer at once (code, why), and the write (a record, or the tombstone's delete marker) whose
// outcome answers the rest.
type finalWrite struct {
	cmds      []Command
	code, why string
	args      []any
	answers   []answer
	rec       store.Record
	end, put  bool
}

// takeFinalLocked takes the instance out of service and decides its last write; it releases in.mu.
func (in *instance) takeFinalLocked() (finalWrite, error) {
	if in.failed == nil && in.sh.uncertain(in.grant.Token) {
		in.failed = errShardUncertain
	}
	if in.failed != nil {
		// A write of this instance may still land: writing again under the same token could be
		// overtaken by it. Give up the flush; the owner takes the shard back under a new token.
		err := in.failed
		in.giveUpLocked("instance %s cannot be flushed; retry with the same request id") // unlocks
		return finalWrite{}, fmt.Errorf("flush %s: an earlier write's outcome is unknown: %w", in.id, err)
	}
	defer in.mu.Unlock()
	in.dead = true
	in.sh.h.cfg.Engine.Remove(in.handle)
	f := finalWrite{cmds: in.mailbox, code: wire.CodeRetry, why: "node %s is shutting down; retry with the same request id",
		args: []any{in.sh.h.cfg.Node}, rec: in.rec}
	in.mailbox = nil
	if in.poisoned {
		// Its commands since the last stored record were answered (poison); its memory may be
		// half-changed by the panic, and stored nothing of it must be: its stored state stays.
		return f, nil
	}
	var w *write
	if in.pending != nil {
		w, in.pending = in.pending, nil
		f.answers = w.answers
	}
	f.end = in.expiring && w != nil // else the delete marker is already stored
	f.put = !in.expiring && (w != nil || f.rec.Tick > in.lastWrite || in.forceWrite)
	if f.put && !f.rec.Ended {
		state, err := in.logic.MarshalState()
		if err != nil {
			for _, a := range f.answers {
				f.cmds = append(f.cmds, a.c)
			}
			f.code, f.why, f.args = wire.CodeInternal, "instance %s: its state cannot be encoded: %v", []any{in.id, err}
			return f, fmt.Errorf("flush %s: %w", in.id, err)
		}
		f.rec.State = state
	}
	return f, nil
}

// writeFinal makes the flush's last write and answers the commands that waited for it.
func (in *instance) writeFinal(ctx context.Context, f finalWrite) error {
	var err error
	switch {
	case f.end:
		_, err = in.sh.h.cfg.Store.End(ctx, in.grant, in.id)
	case f.put:
		_, err = in.sh.h.cfg.Store.Write(ctx, in.grant, in.id, f.rec)
	}
	if f.end || f.put {
		in.sh.h.cfg.metrics.StateWrite(writeResult(err))
	}
	for _, a := range f.answers {
		if err == nil {
			in.sh.h.answer(a.c, a.reply, a.result)
		} else {
			in.sh.h.answerErr(a.c, wire.CodeRetry, "final write failed: %v", err)
		}
	}
	if err != nil {
		return fmt.Errorf("flush %s: %w", in.id, err)
	}
	return nil
}
