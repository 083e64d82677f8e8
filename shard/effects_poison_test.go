package shard_test

import (
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tickfence/tickfence/actor"
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
