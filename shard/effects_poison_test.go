package shard_test

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/memstore"
)

// fxbomb emits an effect on "emit" and panics on "boom".
type fxbomb struct{}

func (fxbomb) Name() string                                   { return "fxbomb" }
func (fxbomb) New(string, actor.Command) (actor.Logic, error) { return &fxbombState{}, nil }
func (fxbomb) Restore(_ string, b []byte) (actor.Logic, error) {
	s := &fxbombState{}
	return s, msgpack.Unmarshal(b, s)
}

type fxbombState struct {
	emitterState
}

func (s *fxbombState) Handle(tick uint64, c actor.Command) (any, error) {
	if c.Type == "boom" {
		panic("boom")
	}
	return s.emitterState.Handle(tick, c)
}

// TestPoisonedInstanceStillDeliversAcknowledgedEffects: a command that emitted an effect is
// acknowledged once its write is stored. If the instance panicked (poison) while that write was
// in flight, the write still lands and the command is answered ok — but the effect is never
// published: sendEffects skips a dead instance, and nothing reloads a poisoned instance while
// the node keeps the shard.
func TestPoisonedInstanceStillDeliversAcknowledgedEffects(t *testing.T) {
	mem := memstore.New()
	pub := newSink()
	n := effectsNode(t, mem, "n1", pub)
	const s = 3
	n.grant(s)
	id := idIn(s, 11)
	mustOK(t, n.send(id, "c1", map[string]any{"type": "create", "kind": "fxbomb"}), "create")
	frozen := n.freeze.arm(id)
	emitted := n.submit(id, "e1", mustBody(t, map[string]any{"type": "emit", "what": "30 gold"}))
	<-frozen // the emit's write is on its way (a slow store)
	boom := n.submit(id, "b1", mustBody(t, map[string]any{"type": "boom"}))
	select {
	case <-boom: // answered internal: the instance is poisoned
	case <-time.After(5 * time.Second):
		t.Fatal("boom not answered")
	}
	n.freeze.release()
	select {
	case b := <-emitted:
		t.Logf("emit answered: %s", b)
	case <-time.After(5 * time.Second):
		t.Fatal("emit not answered")
	}
	rec, _ := load(t, mem, id)
	t.Logf("stored outbox: %d effects", len(rec.Fx))
	time.Sleep(500 * time.Millisecond)
	if len(rec.Fx) == 1 && len(pub.keys()) == 0 {
		t.Fatalf("effect %s of an acknowledged command is stored but never published (instance poisoned, shard still held)", rec.Fx[0].Key)
	}
}

// poisonedWithEffects creates an fxbomb instance on n with the effects stream down (pub failing),
// has it emit one effect per what in one write that the store holds back, makes its code panic
// while the write is on its way, then lets the write land: the emits are acknowledged, their
// effects stored, their publishes failing, and the instance poisoned. It returns the stored record.
func poisonedWithEffects(t *testing.T, n *node, mem *memstore.Store, pub interface{ fail(bool) }, id string, whats ...string) store.Record {
	t.Helper()
	mustOK(t, n.send(id, "c1", map[string]any{"type": "create", "kind": "fxbomb"}), "create")
	pub.fail(true)
	frozen := n.freeze.arm(id)
	var emitted []<-chan []byte
	for i, what := range whats { // submitted at once: applied in the same tick, stored in one write
		emitted = append(emitted, n.submit(id, fmt.Sprintf("e%d", i), mustBody(t, map[string]any{"type": "emit", "what": what})))
	}
	<-frozen
	answered(t, n.submit(id, "b1", mustBody(t, map[string]any{"type": "boom"})), "boom")
	n.freeze.release()
	for _, c := range emitted {
		answered(t, c, "emit")
	}
	rec, _ := load(t, mem, id)
	if len(rec.Fx) != len(whats) {
		t.Fatalf("%d effects stored, want %d", len(rec.Fx), len(whats))
	}
	return rec
}

func answered(t *testing.T, c <-chan []byte, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s not answered", what)
	}
}

// allPublished waits until pub has want effects, failing after 5 s.
func allPublished(t *testing.T, pub *sink, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(pub.keys()) < want {
		if time.Now().After(deadline) {
			t.Fatalf("the stream is back, but %d of the %d stored effects were published again by the poisoned instance", len(pub.keys()), want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestPoisonedInstanceRetriesAFailedEffectPublish: a poisoned instance no longer ticks, and a
// failed publish was retried only from a tick: the effect of an acknowledged command then waited,
// stored, until the shard moved to another node. It is retried on its own now.
func TestPoisonedInstanceRetriesAFailedEffectPublish(t *testing.T) {
	mem := memstore.New()
	pub := newSink()
	n := effectsNode(t, mem, "n1", pub)
	n.grant(3)
	poisonedWithEffects(t, n, mem, pub, idIn(3, 12), "30 gold")
	time.Sleep(300 * time.Millisecond) // the first publish fails
	if got := pub.keys(); len(got) != 0 {
		t.Fatalf("published %v while the stream was down", got)
	}
	pub.fail(false)
	allPublished(t, pub, 1)
}

// staggered fails each publish while failing is set, answering every second failure 30 ms after
// the one before (the failures of one instance's effects arrive a moment apart).
type staggered struct {
	*sink
	n atomic.Int64
}

func (s *staggered) Publish(inst string, e store.Effect, done func(error)) {
	s.mu.Lock()
	failing := s.failing
	s.mu.Unlock()
	if !failing {
		s.sink.Publish(inst, e, done)
		return
	}
	delay := time.Duration(s.n.Add(1)%2) * 30 * time.Millisecond
	time.AfterFunc(delay, func() { done(errors.New("effects stream unavailable")) })
}

// TestPoisonedInstanceRetriesEveryFailedEffect: two effects whose publishes fail a moment apart
// (the second moves the retry time later than the retry the first scheduled) are both retried
// until the stream takes them.
func TestPoisonedInstanceRetriesEveryFailedEffect(t *testing.T) {
	mem := memstore.New()
	pub := &staggered{sink: newSink()}
	n := effectsNode(t, mem, "n1", pub)
	n.grant(3)
	poisonedWithEffects(t, n, mem, pub, idIn(3, 13), "30 gold", "a sword")
	time.Sleep(1500 * time.Millisecond) // a retry or two fail too
	pub.fail(false)
	allPublished(t, pub.sink, 2)
}

// TestPoisonedInstanceRetriesAPublishThatFailedBeforeIt: a publish that failed while the instance
// was healthy waits for a tick's retry a second later; the instance panicked within that second
// and never ticked again, so nothing retried it (a review found it).
func TestPoisonedInstanceRetriesAPublishThatFailedBeforeIt(t *testing.T) {
	mem := memstore.New()
	pub := newSink()
	n := effectsNode(t, mem, "n1", pub)
	n.grant(3)
	id := idIn(3, 14)
	mustOK(t, n.send(id, "c1", map[string]any{"type": "create", "kind": "fxbomb"}), "create")
	pub.fail(true)
	mustOK(t, n.send(id, "e1", map[string]any{"type": "emit", "what": "30 gold"}), "emit")
	time.Sleep(100 * time.Millisecond) // its publish fails; a tick would retry it a second later
	answered(t, n.submit(id, "b1", mustBody(t, map[string]any{"type": "boom"})), "boom")
	pub.fail(false)
	allPublished(t, pub, 1)
}
