package shard_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/shard"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/memstore"
)

// emitter is a kind whose "emit" command emits one effect carrying its "what".
type emitter struct{}

func (emitter) Name() string { return "emitter" }
func (emitter) New(string, actor.Command) (actor.Logic, error) {
	return &emitterState{}, nil
}
func (emitter) Restore(_ string, b []byte) (actor.Logic, error) {
	s := &emitterState{}
	return s, msgpack.Unmarshal(b, s)
}

type emitterState struct {
	N int `msgpack:"n"`
	actor.Effects
}

func (s *emitterState) Tick(uint64) {}
func (s *emitterState) Handle(_ uint64, c actor.Command) (any, error) {
	var a struct {
		What string `msgpack:"what"`
	}
	if err := c.Decode(&a); err != nil {
		return nil, err
	}
	switch c.Type {
	case "emit":
		// The outbox refuses a bad effect at the call: the game refuses the command before it
		// changes anything (bad_request: answered at once, nothing stored).
		if err := s.Emit("grant", []byte(a.What)); err != nil {
			return nil, &actor.Rejected{Code: wire.CodeBadRequest, Message: err.Error()}
		}
		s.N++
	case "emit-unchecked":
		s.N++
		_ = s.Emit("loot drop", []byte(a.What)) // a game that ignores the error: its choice
	}
	return s.N, nil
}
func (s *emitterState) MarshalState() ([]byte, error) { return msgpack.Marshal(s) }

// sink is an EffectPublisher: it keeps what it is given, or fails every publish while failing.
type sink struct {
	mu      sync.Mutex
	got     map[string][]byte // key → payload
	order   []string
	failing bool
}

func newSink() *sink { return &sink{got: map[string][]byte{}} }

func (s *sink) Publish(_ string, e store.Effect, done func(error)) {
	s.mu.Lock()
	if s.failing {
		s.mu.Unlock()
		go done(errors.New("effects stream unavailable"))
		return
	}
	if _, dup := s.got[e.Key]; !dup {
		s.order = append(s.order, e.Key)
	}
	s.got[e.Key] = e.Payload
	s.mu.Unlock()
	go done(nil)
}

func (s *sink) keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.order...)
}

func (s *sink) fail(on bool) {
	s.mu.Lock()
	s.failing = on
	s.mu.Unlock()
}

func effectsNode(t *testing.T, st store.Store, name string, pub shard.EffectPublisher) *node {
	return newNode(t, st, name, nodeOpt{effects: func(prometheus.Registerer) shard.EffectPublisher { return pub }})
}

// TestEffectLeavesOnlyOnceItsWriteIsAccepted: an effect whose write the store refused never
// leaves; the retransmitted command's effect leaves once its write is stored, under a key of the
// instance, the epoch and a sequence number; once the stream acknowledged it, a later write
// drops it from the record.
func TestEffectLeavesOnlyOnceItsWriteIsAccepted(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		st := &refusing{Store: b.open(t)}
		pub := newSink()
		n := effectsNode(t, st, "n1", pub)
		const s = 3
		n.grant(s)
		id := idIn(s, 7)
		mustOK(t, n.send(id, "c1", map[string]any{"type": "create", "kind": "emitter"}), "create")
		st.arm(id)
		wantCode(t, n.send(id, "e1", map[string]any{"type": "emit", "what": "30 gold"}), wire.CodeRetry, "emit whose write was refused")
		time.Sleep(100 * time.Millisecond) // a publish, if one were made, would have happened by now
		if k := pub.keys(); len(k) != 0 {
			t.Fatalf("effects published for a refused write: %v", k)
		}
		mustOK(t, sendRetrying(n, id, "e1", map[string]any{"type": "emit", "what": "30 gold"}), "emit retransmitted")
		waitFor(t, "the effect published", func() bool { return len(pub.keys()) == 1 })
		key := pub.keys()[0]
		rec, _ := load(t, st, id)
		base := rec.FxSeq - 1 // where this instance's sequence started (store.FxSeqBase)
		if want := store.EffectKey(id, 1, base+1); key != want || string(pub.got[key]) != "30 gold" || base == 0 || base%store.FxSeqBase(1) != 0 {
			t.Fatalf("published %q = %q, want %q = %q (a sequence starting at a base)", key, pub.got[key], want, "30 gold")
		}
		waitFor(t, "the delivered effect dropped from the record", func() bool {
			rec, _ := load(t, st, id)
			return len(rec.Fx) == 0 && rec.FxSeq == base+1
		})
		mustOK(t, n.send(id, "e2", map[string]any{"type": "emit", "what": "a sword"}), "emit")
		waitFor(t, "the second effect", func() bool { return len(pub.keys()) == 2 })
		if k := pub.keys()[1]; k != store.EffectKey(id, 1, base+2) {
			t.Fatalf("second effect key %q, want the next sequence number", k)
		}
	})
}

// TestNewOwnerDeliversWhatTheOldOneCouldNot: the owner stores an effect but its publishes fail
// (the stream is down, then the owner dies); the next owner loads the record and delivers it.
// A zombie's effect — made after the shard moved — is refused with its write and never leaves.
func TestNewOwnerDeliversWhatTheOldOneCouldNot(t *testing.T) {
	mem := memstore.New()
	deadPub, livePub := newSink(), newSink()
	deadPub.fail(true)
	a := effectsNode(t, mem, "a", deadPub)
	const s = 5
	a.grant(s)
	id := idIn(s, 2)
	mustOK(t, a.send(id, "c1", map[string]any{"type": "create", "kind": "emitter"}), "create")
	mustOK(t, a.send(id, "e1", map[string]any{"type": "emit", "what": "loot"}), "emit (stored, not delivered)")
	rec, _ := load(t, mem, id)
	if len(rec.Fx) != 1 {
		t.Fatalf("record outbox holds %d effects, want 1", len(rec.Fx))
	}
	stored := rec.Fx[0].Key
	b := effectsNode(t, mem, "b", livePub)
	b.grant(s) // a is not told: from now on it is a zombie
	waitFor(t, "the new owner delivers the stored effect", func() bool { return len(livePub.keys()) == 1 })
	r := a.send(id, "z1", map[string]any{"type": "emit", "what": "zombie loot"})
	if r.OK {
		t.Fatalf("the zombie's command was acknowledged: %+v", r)
	}
	deadPub.fail(false) // whatever the zombie still holds could now leave, if it were let
	time.Sleep(200 * time.Millisecond)
	for _, k := range append(livePub.keys(), deadPub.keys()...) {
		if p := string(livePub.got[k]) + string(deadPub.got[k]); p == "zombie loot" {
			t.Fatalf("the zombie's effect %s left", k)
		}
	}
	if k := livePub.keys(); len(k) != 1 || k[0] != stored {
		t.Fatalf("delivered by the new owner: %v, want only the stored effect", k)
	}
}

// TestFullOutboxHoldsCommandsWithBusy: while the effects stream is unavailable the outbox fills
// to its bound; then commands are answered busy (nothing applied), ticks go on, and once the
// stream is back the outbox drains and commands are taken again.
func TestFullOutboxHoldsCommandsWithBusy(t *testing.T) {
	mem := memstore.New()
	pub := newSink()
	pub.fail(true)
	n := effectsNode(t, mem, "n1", pub)
	const s = 1
	n.grant(s)
	id := idIn(s, 9)
	mustOK(t, n.send(id, "c1", map[string]any{"type": "create", "kind": "emitter"}), "create")
	for i := 0; i < store.MaxOutbox; i++ {
		mustOK(t, n.send(id, fmt.Sprintf("e%d", i), map[string]any{"type": "emit", "what": "x"}), "emit")
	}
	r := n.send(id, "over", map[string]any{"type": "emit", "what": "x"})
	if r.OK || r.Error.Code != wire.CodeBusy {
		t.Fatalf("a command with a full outbox: %+v, want busy", r)
	}
	// A retransmission of a command already applied and stored gets its first answer, not busy
	// ("without effect" would be false: issue 34).
	mustOK(t, n.send(id, fmt.Sprintf("e%d", store.MaxOutbox-1), map[string]any{"type": "emit", "what": "x"}), "a stored command retransmitted while the outbox is full")
	ticks := n.engine.Ticks()
	waitFor(t, "ticks go on", func() bool { return n.engine.Ticks() > ticks+10 })
	pub.fail(false)
	waitFor(t, "the outbox drains", func() bool { return len(pub.keys()) == store.MaxOutbox })
	mustOK(t, sendRetrying(n, id, "over", map[string]any{"type": "emit", "what": "x"}), "the held command, retried")
	waitFor(t, "its effect too", func() bool { return len(pub.keys()) == store.MaxOutbox+1 })
	if _, cs := load(t, mem, id); cs == nil {
		t.Fatal("no record")
	}
	_ = context.Background()
}

// TestEffectOverItsLimitIsRefusedWhole: an effect over MaxEffectBytes is refused at the call
// (Emit returns the error), never stored or published in part; a game that returns it refuses the
// command, and one that ignores it is counted and logged by the node.
func TestEffectOverItsLimitIsRefusedWhole(t *testing.T) {
	mem := memstore.New()
	pub := newSink()
	n := effectsNode(t, mem, "n1", pub)
	const s = 2
	n.grant(s)
	id := idIn(s, 4)
	mustOK(t, n.send(id, "c1", map[string]any{"type": "create", "kind": "emitter"}), "create")
	huge := string(make([]byte, actor.MaxEffectBytes+1))
	r := n.send(id, "e1", map[string]any{"type": "emit", "what": huge})
	wantCode(t, r, wire.CodeBadRequest, "emit of an oversized effect")
	if !strings.Contains(r.Error.Message, "invalid effect") || !strings.Contains(r.Error.Message, "over the 4096-byte limit") {
		t.Fatalf("the game's refusal does not say why: %q", r.Error.Message)
	}
	if got := testutil.ToFloat64(n.metrics.EffectsRefused); got != 1 {
		t.Fatalf("effects refused: %v, want 1", got)
	}
	mustOK(t, n.send(id, "e2", map[string]any{"type": "emit", "what": "fits"}), "emit")
	waitFor(t, "the fitting effect", func() bool { return len(pub.keys()) == 1 })
	if rec, cs := load(t, mem, id); cs.N != 1 || rec.FxSeq%store.FxSeqBase(1) != 1 || string(pub.got[pub.keys()[0]]) != "fits" {
		t.Fatalf("n = %d, fx_seq %d, published %q; want only the fitting command and its effect", cs.N, rec.FxSeq, pub.got[pub.keys()[0]])
	}
	mustOK(t, n.send(id, "e3", map[string]any{"type": "emit-unchecked", "what": "sword"}), "a game that ignores Emit's error")
	if got := testutil.ToFloat64(n.metrics.EffectsRefused); got != 2 {
		t.Fatalf("effects refused: %v, want 2", got)
	}
	if len(pub.keys()) != 1 {
		t.Fatalf("published %v", pub.keys())
	}
}
