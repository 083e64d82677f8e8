package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tickfence/tickfence/shard"
	"github.com/tickfence/tickfence/store"
)

// Effects, delivered exactly once (DESIGN 8, issue 12.4). Every applied add of a ledger emits one
// effect carrying its op ID; each node life publishes through its own effectPublisher to one fake
// effects stream, whose faults come from the seed like the store's; the checks at the end of a run
// map the stream back to operations and to the accepted records of the store's history.

// effectStream is the fake tickfence-effects stream: it stores an effect once per key (a
// duplicate window that never ends, as JetStream's Nats-Msg-Id dedup within its window) and
// counts every publish of a key that reaches it, so republishes show. Its faults, decided by its
// own seeded generator (the effect traffic does not shift the nemesis's decisions), are a publish
// refused at once (the publisher's queue full), one that fails (nothing stored), one stored whose
// acknowledgement is lost (the owner hears an error and sends it again), one lost in flight that
// lands later or never (after the owner heard a timeout), slow publishes, a reconnect that cuts
// every publish of a node in flight, and outages during which every publish fails.
type effectStream struct {
	c *cluster

	mu      sync.Mutex
	rng     *rand.Rand
	faults  bool
	outages [][2]time.Time // [from, to): every publish fails
	stored  map[string]*storedEffect
	order   []string            // stored keys, in stream order
	first   map[string]effectID // what the first publish of each key carried
	// conflicts: publishes of a key that carried another effect than its first publish.
	conflicts []string
	counts    map[string]uint64
	publishes int // Publish calls of live publishers
	failed    int // publishes their owner heard fail

	wg sync.WaitGroup // every publish still in flight, and late landings
}

// effectID is what an effect is: its instance, kind and payload (the op ID).
type effectID struct{ instance, kind, payload string }

func (e effectID) String() string { return fmt.Sprintf("%s %s %q", e.instance, e.kind, e.payload) }

type storedEffect struct {
	effectID
	seq int    // stream sequence
	by  string // the publisher whose publish stored it
	raw int    // publishes of the key that reached the stream (the first included)
}

var (
	errFxQueueFull   = errors.New("nemesis effects: publisher queue full")
	errFxUnavailable = errors.New("nemesis effects: stream unavailable, nothing stored")
	errFxTimeout     = errors.New("nemesis effects: no acknowledgement in time (the publish may have been stored)")
	errFxReconnect   = errors.New("nemesis effects: connection lost with the publish in flight")
)

func newEffectStream(c *cluster) *effectStream {
	return &effectStream{c: c, rng: rand.New(rand.NewPCG(c.seed, 0x656666656374)), stored: map[string]*storedEffect{},
		first: map[string]effectID{}, counts: map[string]uint64{}}
}

// planOutages decides, from the seed, up to two windows of the fault phase in which the stream
// takes nothing (outboxes grow; acknowledged effects wait in the records).
func (s *effectStream) planOutages(start time.Time, chaos time.Duration) {
	s.mu.Lock()
	s.faults = true
	for range s.rng.IntN(3) {
		from := start.Add(s.durLocked(max(chaos-time.Second, time.Millisecond)))
		s.outages = append(s.outages, [2]time.Time{from, from.Add(300*time.Millisecond + s.durLocked(4*time.Second))})
	}
	outages := slices.Clone(s.outages)
	s.mu.Unlock()
	for _, o := range outages {
		s.c.net.Logf("effects: stream outage planned at +%v for %v", o[0].Sub(start), o[1].Sub(o[0]))
	}
}

// outage adds a window [from, from+d) in which the stream takes nothing (during the fault phase).
func (s *effectStream) outage(from time.Time, d time.Duration) {
	s.mu.Lock()
	if s.faults {
		s.outages = append(s.outages, [2]time.Time{from, from.Add(d)})
	}
	s.mu.Unlock()
	s.c.net.Logf("effects: stream outage until +%v from now", time.Until(from.Add(d)).Round(time.Millisecond))
}

// heal stops new faults: from now on every publish is stored and acknowledged (late landings
// already decided still land).
func (s *effectStream) heal() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = false
}

func (s *effectStream) outageLocked(now time.Time) bool {
	for _, o := range s.outages {
		if !now.Before(o[0]) && now.Before(o[1]) {
			return true
		}
	}
	return false
}

func (s *effectStream) durLocked(max time.Duration) time.Duration {
	return time.Duration(s.rng.Int64N(int64(max))) + time.Microsecond
}

// landLocked is a publish reaching the stream: stored if its key is new, else a duplicate.
func (s *effectStream) landLocked(j *fxPublish, by string) {
	id := effectID{j.instance, j.e.Kind, string(j.e.Payload)}
	se := s.stored[j.e.Key]
	if se == nil {
		s.order = append(s.order, j.e.Key)
		se = &storedEffect{effectID: id, seq: len(s.order), by: by}
		s.stored[j.e.Key] = se
	} else if se.effectID != id {
		s.conflicts = append(s.conflicts, fmt.Sprintf("stream sequence %d holds %s = %s (stored by %s); a publish by %s of the same key carried %s, and the duplicate window dropped it",
			se.seq, j.e.Key, se.effectID, se.by, by, id))
	}
	se.raw++
}

// effectPublisher is one node life's connection to the stream (shard.EffectPublisher). It lives
// and dies with its process: a frozen process sends nothing (its publishes wait for the thaw)
// and hears nothing (acknowledgements wait too), while what it sent before the freeze is on the
// wire and reaches the stream; a killed one sends nothing more and hears nothing, and what it had
// on the wire lands as decided.
type effectPublisher struct {
	s    *effectStream
	name string

	// guarded by s.mu
	thaw     chan struct{} // non-nil while frozen
	killed   bool
	inflight map[*fxPublish]bool // on the wire, not yet landed
}

var _ shard.EffectPublisher = (*effectPublisher)(nil)

// fxPublish is one publish and its fate, decided when it is made.
type fxPublish struct {
	instance string
	e        store.Effect
	done     func(error)

	outcome   fxOutcome
	sendDelay time.Duration // on the wire before it lands
	ackDelay  time.Duration // from landing (or the loss) to the owner hearing
	late      time.Duration // fxLostInFlight: lands this much after the owner heard (0: never)
	cutLands  bool          // cut by a reconnect before it landed: it lands anyway
	cut       bool          // guarded by s.mu
}

type fxOutcome uint8

const (
	fxOK           fxOutcome = iota
	fxFail                   // nothing stored, an error
	fxAckLost                // stored, the owner hears an error
	fxLostInFlight           // the owner hears a timeout; it lands later or never
)

func (s *effectStream) publisher(name string) *effectPublisher {
	return &effectPublisher{s: s, name: name, inflight: map[*fxPublish]bool{}}
}

// Publish implements shard.EffectPublisher; it never blocks.
func (p *effectPublisher) Publish(instance string, e store.Effect, done func(error)) {
	s := p.s
	s.mu.Lock()
	if p.killed {
		s.counts["fx_publish_after_kill"]++
		s.mu.Unlock()
		return
	}
	s.publishes++
	id := effectID{instance, e.Kind, string(e.Payload)}
	if f, seen := s.first[e.Key]; !seen {
		s.first[e.Key] = id
	} else if f != id {
		s.conflicts = append(s.conflicts, fmt.Sprintf("%s published key %s carrying %s; an earlier publish of the key carried %s", p.name, e.Key, id, f))
	}
	j := &fxPublish{instance: instance, e: e, done: done, sendDelay: s.durLocked(3 * time.Millisecond), ackDelay: s.durLocked(2 * time.Millisecond)}
	now := time.Now()
	var logMsg, reconnect string
	switch {
	case !s.faults:
	case s.outageLocked(now):
		j.outcome = fxFail
		s.counts["fx_outage_fail"]++
		if s.rng.IntN(2) == 0 { // no responders at once, or a timeout
			j.ackDelay = s.durLocked(time.Second)
		}
	default:
		r := s.rng.Float64()
		switch {
		case r < 0.02:
			s.counts["fx_queue_full"]++
			s.failed++
			s.mu.Unlock()
			s.c.net.Logf("effects: %s: publish of %s refused at once (queue full)", p.name, e.Key)
			done(errFxQueueFull) // on the caller's goroutine, as natscmd's publisher does
			return
		case r < 0.08:
			j.outcome = fxFail
			s.counts["fx_fail"]++
			logMsg = "fails, nothing stored"
		case r < 0.14:
			j.outcome = fxAckLost
			s.counts["fx_ack_lost"]++
			logMsg = "is stored, its acknowledgement lost"
		case r < 0.18:
			j.outcome = fxLostInFlight
			j.ackDelay = s.durLocked(time.Second)
			if s.rng.IntN(5) < 3 {
				j.late = s.durLocked(1500 * time.Millisecond)
				s.counts["fx_lost_lands_later"]++
				logMsg = fmt.Sprintf("is lost in flight (times out after %v, lands %v after that)", j.ackDelay, j.late)
			} else {
				s.counts["fx_lost_never"]++
				logMsg = fmt.Sprintf("is lost in flight (times out after %v, never lands)", j.ackDelay)
			}
		}
		if s.rng.Float64() < 0.25 {
			s.counts["fx_slow"]++
			j.sendDelay, j.ackDelay = s.durLocked(300*time.Millisecond), j.ackDelay+s.durLocked(200*time.Millisecond)
		}
		j.cutLands = s.rng.IntN(2) == 0
		if s.rng.Float64() < 0.01 {
			s.counts["fx_reconnect"]++
			for w := range p.inflight {
				w.cut = true
			}
			reconnect = fmt.Sprintf("effects: %s reconnects: %d publishes in flight cut", p.name, len(p.inflight))
		}
	}
	s.wg.Add(1)
	s.mu.Unlock()
	if reconnect != "" {
		s.c.net.Logf("%s", reconnect)
	}
	if logMsg != "" {
		s.c.net.Logf("effects: %s: publish of %s (%s) %s", p.name, e.Key, e.Payload, logMsg)
	}
	go p.run(j)
}

func (p *effectPublisher) run(j *fxPublish) {
	s := p.s
	defer s.wg.Done()
	if !p.waitThaw() { // a frozen process sends nothing; killed meanwhile, it never did
		s.count("fx_unsent_killed")
		return
	}
	s.mu.Lock()
	p.inflight[j] = true
	s.mu.Unlock()
	time.Sleep(j.sendDelay)
	s.mu.Lock()
	delete(p.inflight, j)
	cut := j.cut
	if (j.outcome == fxOK || j.outcome == fxAckLost) && (!cut || j.cutLands) {
		s.landLocked(j, p.name)
	}
	if j.outcome == fxLostInFlight && j.late > 0 {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			time.Sleep(j.ackDelay + j.late)
			s.mu.Lock()
			s.landLocked(j, p.name+" (landing late)")
			s.mu.Unlock()
		}()
	}
	s.mu.Unlock()
	time.Sleep(j.ackDelay)
	if !p.waitThaw() { // a frozen process hears nothing until it thaws; a killed one never
		return
	}
	var err error
	switch {
	case cut:
		err = errFxReconnect
	case j.outcome == fxFail:
		err = errFxUnavailable
	case j.outcome == fxAckLost || j.outcome == fxLostInFlight:
		err = errFxTimeout
	}
	if err != nil {
		s.mu.Lock()
		s.failed++
		s.mu.Unlock()
	}
	j.done(err)
}

func (s *effectStream) count(kind string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counts[kind]++
}

// waitThaw blocks while the publisher's process is frozen; false once it is killed.
func (p *effectPublisher) waitThaw() bool {
	s := p.s
	for {
		s.mu.Lock()
		ch, killed := p.thaw, p.killed
		s.mu.Unlock()
		if killed {
			return false
		}
		if ch == nil {
			return true
		}
		<-ch
	}
}

func (p *effectPublisher) freeze() {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	if p.thaw == nil && !p.killed {
		p.thaw = make(chan struct{})
	}
}

func (p *effectPublisher) unfreeze() {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	if p.thaw != nil {
		close(p.thaw)
		p.thaw = nil
	}
}

func (p *effectPublisher) kill() {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	p.killed = true
	if p.thaw != nil {
		close(p.thaw)
		p.thaw = nil
	}
}

// EffectCounts sums up a run's effects.
type EffectCounts struct {
	Emitted     int // effects the games emitted (the nodes' tickfence_effects_emitted_total; undone ones too)
	Publishes   int // publishes the owners made
	Failed      int // publishes their owner heard fail
	Raw         int // publishes that reached the stream
	Stored      int // distinct keys the stream stored
	Republished int // publishes that reached the stream for a key it held already
	// Ops sent before the final epoch went live (so a restore may have rolled them back):
	// acknowledged ones with no effect in the stream, and ones with effects made in two epochs.
	CutLost, CutTwice int
}

func (e EffectCounts) String() string {
	return fmt.Sprintf("effects: %d emitted, %d publishes (%d failed), %d reached the stream, %d stored, %d republished; across restores %d acknowledged ops without an effect, %d with effects in two epochs",
		e.Emitted, e.Publishes, e.Failed, e.Raw, e.Stored, e.Republished, e.CutLost, e.CutTwice)
}

func (e *EffectCounts) add(o EffectCounts) {
	e.Emitted += o.Emitted
	e.Publishes += o.Publishes
	e.Failed += o.Failed
	e.Raw += o.Raw
	e.Stored += o.Stored
	e.Republished += o.Republished
	e.CutLost += o.CutLost
	e.CutTwice += o.CutTwice
}

// effectCounts counts the run's effects (call once every publish has settled).
func (c *cluster) effectCounts() EffectCounts {
	s := c.fx
	s.mu.Lock()
	n := EffectCounts{Publishes: s.publishes, Failed: s.failed, Stored: len(s.stored)}
	for _, se := range s.stored {
		n.Raw += se.raw
	}
	s.mu.Unlock()
	n.Republished = n.Raw - n.Stored
	c.mu.Lock()
	regs := slices.Clone(c.regs)
	c.mu.Unlock()
	for _, reg := range regs {
		fams, _ := reg.Gather()
		for _, f := range fams {
			if f.GetName() == "tickfence_effects_emitted_total" {
				for _, m := range f.GetMetric() {
					n.Emitted += int(m.GetCounter().GetValue())
				}
			}
		}
	}
	return n
}

func (s *effectStream) faultCounts() map[string]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]uint64, len(s.counts))
	for k, v := range s.counts {
		out[k] = v
	}
	return out
}

// undelivered names effects that the latest records of the live epoch hold and the stream does
// not ("" once every outbox is drained or all it holds is in the stream).
func (c *cluster) undelivered() string {
	ctx := context.Background()
	epoch := c.epochNow()
	var held []store.Effect
	for s := range c.cfg.Shards {
		ids, err := c.mem.Instances(ctx, epoch, s)
		if err != nil {
			continue
		}
		for _, id := range ids {
			if rec, _, err := c.mem.Load(ctx, epoch, s, id); err == nil {
				held = append(held, rec.Fx...)
			}
		}
	}
	var missing []string
	n := 0
	c.fx.mu.Lock()
	for _, e := range held {
		if c.fx.stored[e.Key] == nil {
			n++
			if len(missing) < 5 {
				missing = append(missing, fmt.Sprintf("%s (op %s)", e.Key, e.Payload))
			}
		}
	}
	c.fx.mu.Unlock()
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%d effects held by records of epoch %d are not in the stream, e.g. %s", n, epoch, strings.Join(missing, ", "))
}

// awaitEffects waits until every outbox of the live epoch is delivered, reporting what is not
// within bound.
func (c *cluster) awaitEffects(bound time.Duration) {
	deadline := time.Now().Add(bound)
	for {
		why := c.undelivered()
		if why == "" {
			c.net.Logf("settled: every stored effect is in the stream")
			return
		}
		if time.Now().After(deadline) {
			c.violate("effects (liveness): %v after the clients stopped: %s", bound, why)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// heldEffect is an effect as the accepted records of the store's history hold it.
type heldEffect struct {
	effectID
	epoch      uint64 // of the first accepted record that held it
	rev        uint64
	stateKnown bool // that record's state is readable
	applied    bool // and it holds the effect's op
}

// checkEffects checks the stream against the store's history and the clients' operations (run it
// once every process is stopped and every publish settled):
//
//   - only accepted effects leave: every effect in the stream is held, with the same kind and
//     payload, by a record the store accepted (a zombie's, a refused or an undone command's
//     effect never leaves), and that record applied its op;
//   - keys are unique: no two publishes, and no two accepted records, carry different effects
//     under one key (the duplicate window would drop the second);
//   - none is lost: every effect an accepted record of the live epoch held is in the stream, and
//     so is the effect of every op its instances' last states applied;
//   - exactly once: an op has at most one effect per epoch (a restore that rolled it back may
//     apply it again in a later one), and an op owed by the live epoch (first sent after it went
//     live) and acknowledged has exactly one.
func (c *cluster) checkEffects() (cutLost, cutTwice int) {
	v := &effectViolations{c: c, n: map[string]int{}}
	defer v.flush()
	final, finalGen := c.audit.current()
	accepted := map[string]*heldEffect{}
	var acceptedOrder []string
	inFinal := map[string]bool{}
	lastState := map[string]store.Record{} // per instance, its last accepted record with a state in the final epoch
	var lastStateOrder []string
	for _, epoch := range c.audit.liveEpochs() {
		for _, m := range c.mem.History(store.DataBucket(epoch, 0)) {
			kind, rest, _ := strings.Cut(m.Key, ".")
			if kind != "inst" || m.Deleted {
				continue
			}
			_, id, _ := strings.Cut(rest, ".")
			rec, err := store.DecodeRecord(m.Value)
			if err != nil {
				continue // the history check reports it
			}
			if epoch == final && len(rec.State) > 0 && rec.Blob == nil {
				if _, seen := lastState[id]; !seen {
					lastStateOrder = append(lastStateOrder, id)
				}
				lastState[id] = rec
			}
			var ops []string
			decoded := false
			for _, fx := range rec.Fx {
				eid := effectID{id, fx.Kind, string(fx.Payload)}
				if epoch == final {
					inFinal[fx.Key] = true
				}
				h := accepted[fx.Key]
				if h != nil {
					if h.effectID != eid {
						v.report("key-reused-records", "effects (unique keys): key %s is held as %s by revision %d (epoch %d) and as %s by %s revision %d (epoch %d): one key, two effects",
							fx.Key, h.effectID, h.rev, h.epoch, eid, m.Key, m.Seq, epoch)
					}
					continue
				}
				h = &heldEffect{effectID: eid, epoch: epoch, rev: m.Seq}
				if len(rec.State) > 0 && rec.Blob == nil {
					if !decoded {
						l, err := decodeLedger(rec.State)
						decoded, ops = err == nil, l.Ops
					}
					h.stateKnown = decoded
					h.applied = slices.Contains(ops, eid.payload)
				}
				accepted[fx.Key] = h
				acceptedOrder = append(acceptedOrder, fx.Key)
			}
		}
	}

	s := c.fx
	s.mu.Lock()
	order := slices.Clone(s.order)
	stored := make(map[string]storedEffect, len(s.stored))
	for k, v := range s.stored {
		stored[k] = *v
	}
	conflicts := slices.Clone(s.conflicts)
	s.mu.Unlock()
	for _, msg := range conflicts {
		v.report("key-reused", "effects (unique keys): %s", msg)
	}

	c.mu.Lock()
	insts := slices.Clone(c.insts)
	c.mu.Unlock()
	// An op's instance is the life it was sent to; op IDs are unique across lives and IDs.
	sentTo := map[string]*inst{}
	for _, in := range insts {
		for _, o := range in.ops {
			sentTo[o.id] = in
		}
	}
	type opKey struct{ inst, op string }
	effectsOf := map[opKey][]string{} // stream keys per op, in stream order
	for _, key := range order {
		se := stored[key]
		id, _, _, ok := store.ParseEffectKey(key)
		if !ok || id != se.instance {
			v.report("bad-key", "effects (unique keys): stream key %s (published for %s by %s) is not <instance>:<epoch>:<seq> of its instance", key, se.instance, se.by)
		}
		h := accepted[key]
		switch {
		case h == nil:
			v.report("not-accepted", "effects (only accepted effects leave): %s = %s (stream sequence %d, published by %s) left, but no record the store accepted ever held it: a refused, undone or zombie write's effect left",
				key, se.effectID, se.seq, se.by)
		case h.effectID != se.effectID:
			v.report("not-as-accepted", "effects (only accepted effects leave): %s in the stream is %s (published by %s), but the accepted record holding the key (revision %d, epoch %d) has %s",
				key, se.effectID, se.by, h.rev, h.epoch, h.effectID)
		case h.stateKnown && !h.applied:
			v.report("not-applied", "effects (only accepted effects leave): %s = %s left with %s revision %d (epoch %d), whose state does not hold op %s",
				key, se.effectID, store.InstanceKey(store.ShardOf(se.instance, c.cfg.Shards), se.instance), h.rev, h.epoch, se.payload)
		}
		if in := sentTo[se.payload]; se.kind != effectKind || in == nil || in.id != se.instance {
			v.report("not-sent", "effects (only accepted effects leave): %s = %s is no op a client sent to %s", key, se.effectID, se.instance)
			continue
		}
		effectsOf[opKey{se.instance, se.payload}] = append(effectsOf[opKey{se.instance, se.payload}], key)
	}

	// None lost: every effect the live epoch's accepted records held.
	var lost []string
	for _, key := range acceptedOrder {
		if _, ok := stored[key]; inFinal[key] && !ok {
			lost = append(lost, fmt.Sprintf("%s = %s", key, accepted[key].effectID))
		}
	}
	if len(lost) > 0 {
		v.report("lost", "effects (none lost): %d effects held by accepted records of epoch %d never reached the stream (lost), e.g. %s",
			len(lost), final, strings.Join(lost[:min(len(lost), 5)], ", "))
	}
	// ... and the effect of every op the instances' last states applied.
	for _, id := range lastStateOrder {
		l, err := decodeLedger(lastState[id].State)
		if err != nil {
			continue
		}
		for i, op := range l.Ops {
			if len(effectsOf[opKey{id, op}]) == 0 {
				v.report("lost-op", "effects (none lost): op %s sits at position %d of %s's last state in epoch %d, and no effect of it is in the stream (lost)", op, i, id, final)
			}
		}
	}

	for _, in := range insts {
		for _, op := range in.ops {
			keys := effectsOf[opKey{in.id, op.id}]
			perEpoch := map[uint64][]string{}
			var epochs []uint64
			for _, k := range keys {
				_, e, _, _ := store.ParseEffectKey(k)
				if perEpoch[e] == nil {
					epochs = append(epochs, e)
				}
				perEpoch[e] = append(perEpoch[e], k)
			}
			for _, e := range epochs {
				if ks := perEpoch[e]; len(ks) > 1 {
					v.report("twice", "effects (exactly once): op %s of %s has %d effects made in epoch %d: %s (applied more than once)", op.id, in.id, len(ks), e, strings.Join(ks, ", "))
				}
			}
			if op.gen < finalGen { // a restore may have rolled it back and let it apply again
				if len(epochs) > 1 {
					cutTwice++
				}
				if len(keys) == 0 && op.ok {
					cutLost++
				}
				continue
			}
			switch {
			case len(keys) > 1:
				v.report("owed-twice", "effects (exactly once): op %s of %s, first sent in the live epoch %d, has effects %s", op.id, in.id, final, strings.Join(keys, ", "))
			case len(keys) == 0 && op.ok:
				v.report("owed-lost", "effects (none lost): acknowledged op %s of %s (position %d) has no effect in the stream (lost)", op.id, in.id, op.pos)
			}
		}
	}
	return cutLost, cutTwice
}

// effectViolations reports the first few violations of each kind of the effects check, and how
// many more there were: one broken rule usually breaks it for many effects.
type effectViolations struct {
	c     *cluster
	n     map[string]int
	kinds []string
}

const effectViolationsShown = 5

func (v *effectViolations) report(kind, format string, args ...any) {
	if v.n[kind] == 0 {
		v.kinds = append(v.kinds, kind)
	}
	v.n[kind]++
	if v.n[kind] <= effectViolationsShown {
		v.c.violate(format, args...)
		return
	}
	v.c.net.Logf("VIOLATION (not reported again): "+format, args...)
}

func (v *effectViolations) flush() {
	for _, k := range v.kinds {
		if n := v.n[k]; n > effectViolationsShown {
			v.c.violate("effects: %d more violations of the kind %q (in the event log)", n-effectViolationsShown, k)
		}
	}
}
