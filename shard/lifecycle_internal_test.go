package shard

import (
	"context"
	"testing"
	"time"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/memstore"
)

type optKind struct {
	name string
	opts actor.KindOptions
}

func (k optKind) Name() string                                 { return k.name }
func (k optKind) KindOptions() actor.KindOptions               { return k.opts }
func (optKind) New(string, actor.Command) (actor.Logic, error) { return nil, nil }
func (optKind) Restore(string, []byte) (actor.Logic, error)    { return nil, nil }

// Issue 35: a kind's options resolve against the node's; its exactly-once windows (5 minutes of
// sessions and request IDs) are counted in ticks of its own rate; bad options refuse the host.
func TestKindOptionsResolve(t *testing.T) {
	st := memstore.New()
	if _, err := st.Bootstrap(context.Background(), store.Cluster{Shards: 4, Partitions: 1, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	e, err := actor.NewEngine(actor.EngineConfig{Rate: 20, Manual: true})
	if err != nil {
		t.Fatal(err)
	}
	kinds, _ := actor.NewKinds(optKind{name: "plain"}, optKind{name: "slow", opts: actor.KindOptions{TickRate: 1, CheckpointEvery: 3, IdleCheckpoint: 60, Passivate: time.Minute}})
	h, err := New(context.Background(), Config{Node: "n", Session: "s", Store: st, Kinds: kinds, Engine: e, CheckpointEvery: 20})
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := kinds.Get("plain")
	slow, _ := kinds.Get("slow")
	p, s := h.optsOf(plain), h.optsOf(slow)
	if p.sched != e.Base() || p.checkpointEvery != 20 || p.idleCheckpoint != 0 || p.passivate != 0 || p.ttl.session != 6000 {
		t.Fatalf("a kind without options: %+v, want the node's (20 Hz: 5 min = 6000 ticks)", *p)
	}
	if s.sched.Rate() != 1 || s.checkpointEvery != 3 || s.idleCheckpoint != 60 || s.passivate != time.Minute || s.ttl.session != 300 || s.ttl.request != 300 {
		t.Fatalf("a 1 Hz kind: %+v, want its own (5 min = 300 ticks)", *s)
	}
	if h.optsOf(nil) != h.life.def {
		t.Fatal("a tombstone of an unknown kind does not get the node's options")
	}
	bad, _ := actor.NewKinds(optKind{name: "bad", opts: actor.KindOptions{TickRate: 5000}})
	if _, err := New(context.Background(), Config{Node: "n", Session: "s", Store: st, Kinds: bad, Engine: e}); err == nil {
		t.Fatal("a kind with a rate of 5000 Hz accepted")
	}
}
