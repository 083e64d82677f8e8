package shard_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/actor/dungeon"
	"github.com/tickfence/tickfence/shard"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/memstore"
)

// fragile is a counter whose faults the test sets per instance: "handle" makes its "boom"
// command panic (fixed, "boom" adds 100), "tick" makes its Tick panic, "restore" makes Restore
// fail.
type fragile struct{}

var fragileFaults sync.Map // instance ID → "handle", "tick" or "restore"

func fault(id, what string) bool {
	v, _ := fragileFaults.Load(id)
	return v == what
}

func (fragile) Name() string { return "fragile" }
func (fragile) New(id string, _ actor.Command) (actor.Logic, error) {
	return &fragileState{id: id}, nil
}
func (fragile) Restore(id string, b []byte) (actor.Logic, error) {
	if fault(id, "restore") {
		return nil, errors.New("state schema v2 is not readable by this build")
	}
	s := &fragileState{id: id}
	return s, msgpack.Unmarshal(b, &s.counterState)
}

type fragileState struct {
	counterState
	id string
}

func (s *fragileState) Tick(t uint64) {
	if fault(s.id, "tick") {
		panic("the tick fell over")
	}
	s.counterState.Tick(t)
}

func (s *fragileState) Handle(tick uint64, c actor.Command) (any, error) {
	if c.Type == "boom" {
		if fault(s.id, "handle") {
			s.N += 1000 // half-applied when it panics: must never be stored
			panic("index out of range [3] with length 3")
		}
		s.N += 100
		return map[string]any{"n": s.N}, nil
	}
	return s.counterState.Handle(tick, c)
}

func (s *fragileState) MarshalState() ([]byte, error) { return msgpack.Marshal(&s.counterState) }

// rawfx is an Emitter of its own (no actor.Effects): its "bad" command hands over an effect whose
// kind is not a subject token, which nothing at the call refused.
type rawfx struct{}

func (rawfx) Name() string                                   { return "rawfx" }
func (rawfx) New(string, actor.Command) (actor.Logic, error) { return &rawfxState{}, nil }
func (rawfx) Restore(_ string, b []byte) (actor.Logic, error) {
	s := &rawfxState{}
	return s, msgpack.Unmarshal(b, &s.counterState)
}

type rawfxState struct {
	counterState
	out []actor.Effect
}

func (s *rawfxState) Handle(tick uint64, c actor.Command) (any, error) {
	if c.Type == "bad" {
		s.N += 5
		s.out = append(s.out, actor.Effect{Kind: "loot drop", Payload: []byte("sword")})
		return map[string]any{"n": s.N}, nil
	}
	return s.counterState.Handle(tick, c)
}

func (s *rawfxState) TakeEffects() []actor.Effect {
	out := s.out
	s.out = nil
	return out
}

func wantFailed(t *testing.T, r wire.Reply, what string, says ...string) {
	t.Helper()
	wantCode(t, r, wire.CodeInstanceFailed, what)
	for _, w := range says {
		if !strings.Contains(r.Error.Message, w) {
			t.Fatalf("%s: message %q does not say %q", what, r.Error.Message, w)
		}
	}
}

func failedOn(t *testing.T, n *node, id string) store.FailedInstance {
	t.Helper()
	for _, f := range n.host.Load().Failed {
		if f.ID == id {
			return f
		}
	}
	t.Fatalf("%s is not in the node's failed instances: %+v", id, n.host.Load().Failed)
	return store.FailedInstance{}
}

// Issue 35: a panic in Handle answers instance_failed with the panic (not internal), and so does
// every later command (not "retry: moving" until the client gives up); a retransmission of a
// stored command still gets its first answer. The failure shows in the node's report and
// metrics. Once the game is fixed, a reload serves the instance from its stored state: the
// command whose handling panicked was never stored, so its retransmission applies once.
func TestPanicFailsTheInstanceUntilReloaded(t *testing.T) {
	mem := memstore.New()
	n, id := withInstance(t, mem, "fragile", nodeOpt{})
	defer fragileFaults.Delete(id)
	mustOK(t, n.sendRetryingBusy(id, "a1", map[string]any{"type": "add", "by": 1}), "a1")
	fragileFaults.Store(id, "handle")
	wantFailed(t, n.sendRetryingBusy(id, "b1", map[string]any{"type": "boom"}), "the command that panicked", "index out of range", id)
	start := time.Now()
	wantFailed(t, n.sendRetryingBusy(id, "a2", map[string]any{"type": "add", "by": 1}), "a command after the panic", "index out of range", "reload")
	if d := time.Since(start); d > time.Second {
		t.Fatalf("a command to a failed instance took %v to answer", d)
	}
	if r := n.sendRetryingBusy(id, "a1", map[string]any{"type": "add", "by": 1}); !r.OK {
		t.Fatalf("retransmission of a stored command: %+v, want its first answer", r.Error)
	}
	if f := failedOn(t, n, id); f.Cause != "panic" || !strings.Contains(f.Reason, "index out of range") || f.Shard != 1 {
		t.Fatalf("reported %+v", f)
	}
	if got := testutil.ToFloat64(n.metrics.InstancesFailed); got != 1 {
		t.Fatalf("tickfence_instances_failed = %v, want 1", got)
	}
	if got := testutil.ToFloat64(n.metrics.InstanceFailures.WithLabelValues("panic")); got != 1 {
		t.Fatalf("tickfence_instance_failures_total{cause=panic} = %v, want 1", got)
	}

	// Still broken: a reload runs it again, and the next boom fails it again.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.host.Reload(ctx, id); err != nil {
		t.Fatalf("reload: %v", err)
	}
	wantFailed(t, n.sendRetryingBusy(id, "b1", map[string]any{"type": "boom"}), "boom again, not fixed")

	fragileFaults.Delete(id) // the game is fixed
	if err := n.host.Reload(ctx, id); err != nil {
		t.Fatalf("reload: %v", err)
	}
	if got := testutil.ToFloat64(n.metrics.InstancesFailed); got != 0 {
		t.Fatalf("tickfence_instances_failed = %v after the reload, want 0", got)
	}
	if len(n.host.Load().Failed) != 0 {
		t.Fatalf("still reported failed: %+v", n.host.Load().Failed)
	}
	mustOK(t, n.sendRetryingBusy(id, "b1", map[string]any{"type": "boom"}), "boom, retransmitted after the fix")
	mustOK(t, n.sendRetryingBusy(id, "a2", map[string]any{"type": "add", "by": 1}), "a2 after the reload")
	mustOK(t, n.sendRetryingBusy(id, "b1", map[string]any{"type": "boom"}), "boom, retransmitted again")
	if _, s := load(t, mem, id); s.N != 102 {
		t.Fatalf("n = %d, want 102: a1 (1) + boom once (100) + a2 (1), nothing of the panics", s.N)
	}
	// A reload of an instance that runs changes nothing.
	if err := n.host.Reload(ctx, id); err != nil {
		t.Fatalf("reload of a running instance: %v", err)
	}
	mustOK(t, n.sendRetryingBusy(id, "a3", map[string]any{"type": "add", "by": 1}), "a3")
	if _, s := load(t, mem, id); s.N != 103 {
		t.Fatalf("n = %d, want 103", s.N)
	}
}

// Every command of the tick that panicked and every one queued behind it is answered
// instance_failed (never internal, never retry), once; none of them is stored.
func TestCommandsQueuedInAFailedInstanceGetTheFailureCode(t *testing.T) {
	for _, where := range []string{"handle", "tick"} {
		t.Run(where, func(t *testing.T) {
			mem := memstore.New()
			n, id := withInstance(t, mem, "fragile", nodeOpt{})
			defer fragileFaults.Delete(id)
			mustOK(t, n.sendRetryingBusy(id, "x", map[string]any{"type": "add", "by": 1}), "x")
			c := newCounted()
			ids := []string{"q0", "q1", "q2", "boom", "q3", "q4"}
			if where == "tick" {
				fragileFaults.Store(id, "tick")
			} else {
				fragileFaults.Store(id, "handle")
			}
			for _, r := range ids {
				cmd := map[string]any{"type": "add", "by": 1}
				if r == "boom" {
					cmd = map[string]any{"type": "boom"}
				}
				c.submit(t, n, id, r, cmd)
			}
			c.eachAnsweredOnce(t, n)
			for k, v := range c.got {
				if v[0] != wire.CodeInstanceFailed {
					t.Errorf("%s answered %v, want instance_failed", k, v)
				}
			}
			if _, s := load(t, mem, id); s.N != 1 {
				t.Fatalf("n = %d, want 1: nothing of the failed tick stored", s.N)
			}
		})
	}
}

// A state the kind cannot Restore fails the instance with a code and message that say so — not
// unknown_instance, and a create is not answered retry for ever — until a reload once the game
// is fixed. A retransmission of a stored command gets its first answer meanwhile.
func TestRestoreErrorFailsTheInstanceUntilReloaded(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		a := newNode(t, b.open(t), "A", nodeOpt{})
		const s = 3
		a.grant(s)
		id := idIn(s, 7)
		defer fragileFaults.Delete(id)
		mustOK(t, a.sendRetryingBusy(id, "c", map[string]any{"type": "create", "kind": "fragile"}), "create")
		mustOK(t, a.sendRetryingBusy(id, "a1", map[string]any{"type": "add", "by": 1}), "a1")
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := a.host.Close(ctx); err != nil {
			t.Fatal(err)
		}
		fragileFaults.Store(id, "restore")
		bn := newNode(t, b.open(t), "B", nodeOpt{})
		bn.grant(s)
		wantFailed(t, bn.sendRetryingBusy(id, "a2", map[string]any{"type": "add", "by": 1}), "a command", "Restore", "state schema v2")
		wantFailed(t, bn.sendRetryingBusy(id, "c2", map[string]any{"type": "create", "kind": "fragile"}), "a create", "Restore")
		mustOK(t, bn.sendRetryingBusy(id, "a1", map[string]any{"type": "add", "by": 1}), "retransmission of a stored command")
		if f := failedOn(t, bn, id); f.Cause != "restore" {
			t.Fatalf("reported %+v", f)
		}
		if got := testutil.ToFloat64(bn.metrics.InstancesFailed); got != 1 {
			t.Fatalf("tickfence_instances_failed = %v, want 1", got)
		}
		err := bn.host.Reload(ctx, id)
		var we *wire.Error
		if !errors.As(err, &we) || we.Code != wire.CodeInstanceFailed || !strings.Contains(we.Message, "state schema v2") {
			t.Fatalf("reload while the game is still broken: %v, want instance_failed saying why", err)
		}
		fragileFaults.Delete(id)
		if err := bn.host.Reload(ctx, id); err != nil {
			t.Fatalf("reload once fixed: %v", err)
		}
		mustOK(t, bn.sendRetryingBusy(id, "a2", map[string]any{"type": "add", "by": 1}), "a2 after the reload")
		if _, st := load(t, bn.st, id); st.N != 2 {
			t.Fatalf("n = %d, want 2", st.N)
		}
		if got := testutil.ToFloat64(bn.metrics.InstancesFailed); got != 0 {
			t.Fatalf("tickfence_instances_failed = %v, want 0", got)
		}
	})
}

// A record of a kind this node does not know fails its instance with a message naming the kind.
func TestUnknownKindFailsTheInstance(t *testing.T) {
	mem := memstore.New()
	a := newNode(t, mem, "A", nodeOpt{})
	const s = 2
	a.grant(s)
	id := idIn(s, 3)
	mustOK(t, a.send(id, "c", map[string]any{"type": "create", "kind": "counter"}), "create")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.host.Close(ctx); err != nil {
		t.Fatal(err)
	}
	bn := newNode(t, mem, "B", nodeOpt{kinds: []actor.Kind{dungeon.Kind{}}})
	bn.grant(s)
	wantFailed(t, bn.sendRetryingBusy(id, "a1", map[string]any{"type": "add", "by": 1}), "a command", `unknown kind "counter"`)
	wantFailed(t, bn.sendRetryingBusy(id, "c2", map[string]any{"type": "create", "kind": "dungeon"}), "a create", `unknown kind "counter"`)
	if f := failedOn(t, bn, id); f.Cause != "unknown_kind" {
		t.Fatalf("reported %+v", f)
	}
	if got := testutil.ToFloat64(bn.metrics.InstanceFailures.WithLabelValues("unknown_kind")); got != 1 {
		t.Fatalf("tickfence_instance_failures_total{cause=unknown_kind} = %v, want 1", got)
	}
}

// An Emitter of the game's own that hands over an invalid effect fails the instance: the command
// that made it is answered instance_failed naming the effect, and nothing of it is stored or
// published (never ok with the effect dropped).
func TestInvalidEffectOfAnEmitterFailsTheCommand(t *testing.T) {
	mem := memstore.New()
	pub := newSink()
	n := newNode(t, mem, "A", nodeOpt{effects: func(prometheus.Registerer) shard.EffectPublisher { return pub }})
	const s = 1
	n.grant(s)
	id := idIn(s, 5)
	mustOK(t, n.sendRetryingBusy(id, "c", map[string]any{"type": "create", "kind": "rawfx"}), "create")
	mustOK(t, n.sendRetryingBusy(id, "a1", map[string]any{"type": "add", "by": 1}), "a1")
	wantFailed(t, n.sendRetryingBusy(id, "bad", map[string]any{"type": "bad"}), "the command that made a bad effect", `"loot drop"`)
	rec, st := load(t, mem, id)
	if _, stored := rec.FindRequest("bad"); stored || st.N != 1 || len(rec.Fx) != 0 {
		t.Fatalf("stored: n = %d, bad remembered %v, outbox %d; want nothing of the bad command", st.N, stored, len(rec.Fx))
	}
	if len(pub.keys()) != 0 {
		t.Fatalf("published %v", pub.keys())
	}
	if f := failedOn(t, n, id); f.Cause != "invalid_effect" {
		t.Fatalf("reported %+v", f)
	}
}

// Over real NATS and JetStream: the Go client takes instance_failed as final (no retry until it
// gives up), and an operator's reload request on tickfence.op reaches the owner and brings the
// instance back once the game is fixed. A "reload" sent as a command goes to the game, not to
// the node.
func TestInstanceFailedAndReloadOverNATS(t *testing.T) {
	b := backends(t)[1]
	st := b.open(t)
	n := newNode(t, st, "A", nodeOpt{commands: func(reg prometheus.Registerer) shard.Commands { return natscmd.NewServer(b.nc(t), testShards, reg) }})
	const s = 1
	n.grant(s)
	id := idIn(s, 2)
	defer fragileFaults.Delete(id)
	c := natscmd.NewClient(b.nc(t), testShards)
	c.GiveUp = 20 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	send := func(cmd map[string]any) wire.Reply {
		t.Helper()
		r, err := c.SendMap(ctx, id, "", cmd)
		if err != nil {
			t.Fatalf("%v: %v", cmd, err)
		}
		return r
	}
	mustOK(t, send(map[string]any{"type": "create", "kind": "fragile"}), "create")
	mustOK(t, send(map[string]any{"type": "add", "by": 1}), "add")
	if natscmd.Retryable(wire.CodeInstanceFailed) {
		t.Fatal("the Go client retries instance_failed")
	}
	fragileFaults.Store(id, "handle")
	start := time.Now()
	wantFailed(t, send(map[string]any{"type": "boom"}), "boom over NATS", "index out of range")
	wantFailed(t, send(map[string]any{"type": "add", "by": 1}), "a command after it over NATS", "reload")
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("two answers took %v: the client retried instance_failed", d)
	}
	r := send(map[string]any{"type": "reload"})
	wantFailed(t, r, `"reload" as a command: the instance's, still failed`)

	fragileFaults.Delete(id)
	rr, err := c.Reload(ctx, id)
	if err != nil || !rr.OK {
		t.Fatalf("reload over NATS: %v %+v", err, rr.Error)
	}
	if m, _ := rr.Result.(map[string]any); m["reloaded"] != true {
		t.Fatalf("reload answered %+v", rr.Result)
	}
	mustOK(t, send(map[string]any{"type": "boom"}), "boom once fixed")
	wantCode(t, send(map[string]any{"type": "reload"}), wire.CodeRejected, `"reload" as a command goes to the game`)
	if _, cs := load(t, st, id); cs.N != 101 {
		t.Fatalf("n = %d, want 101", cs.N)
	}
	// A reload of an instance that runs is an answer, not an error; of one not there, unknown.
	if rr, err := c.Reload(ctx, id); err != nil || !rr.OK {
		t.Fatalf("reload of a running instance: %v %+v", err, rr.Error)
	}
	if rr, err := c.Reload(ctx, idIn(s, 9)); err != nil || rr.OK || rr.Error.Code != wire.CodeUnknownInstance {
		t.Fatalf("reload of an instance that does not exist: %v %+v", err, rr)
	}
}

// A reload waits for a write of the failed instance still in flight: loaded before it lands, the
// reloaded instance would write over it, and the command it holds (answered ok) would be lost.
func TestReloadWaitsForTheWriteInFlight(t *testing.T) {
	for _, strat := range []shard.WriteStrategy{shard.WriteSingle, shard.WriteBatches} {
		t.Run(string(strat), func(t *testing.T) {
			mem := memstore.New()
			n, id := withInstance(t, mem, "fragile", nodeOpt{writeStrategy: strat})
			defer fragileFaults.Delete(id)
			frozen := n.freeze.arm(id)
			first := n.submit(id, "a1", mustBody(t, map[string]any{"type": "add", "by": 1}))
			<-frozen // a1's write is in flight, held
			fragileFaults.Store(id, "handle")
			wantFailed(t, recvReply(t, n.submit(id, "b1", mustBody(t, map[string]any{"type": "boom"})), "boom"), "boom behind a write in flight")
			fragileFaults.Delete(id)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			reloaded := make(chan error, 1)
			go func() { reloaded <- n.host.Reload(ctx, id) }()
			select {
			case err := <-reloaded:
				t.Fatalf("reload returned (%v) while a write of the instance was in flight", err)
			case <-time.After(300 * time.Millisecond):
			}
			n.freeze.release()
			mustOK(t, recvReply(t, first, "a1"), "a1 (in flight)")
			if err := <-reloaded; err != nil {
				t.Fatalf("reload: %v", err)
			}
			// The held write made answers slow: admission control may refuse a while (busy).
			mustOK(t, n.sendRetryingBusy(id, "a2", map[string]any{"type": "add", "by": 1}), "a2")
			if _, s := load(t, mem, id); s.N != 2 {
				t.Fatalf("n = %d, want 2: a1 (stored by the write in flight) and a2", s.N)
			}
		})
	}
}
