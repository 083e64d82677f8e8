package shard_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/shard"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
)

// finisher is a test kind whose Logic ends its own instance: on a "finish" command (with an
// effect and a frame), or by itself at the tick its create named (end_at). Its options are the
// test's; its name too, so that one node can run several.
type finisher struct {
	name string
	opts actor.KindOptions
}

func (f finisher) Name() string {
	if f.name == "" {
		return "finisher"
	}
	return f.name
}
func (f finisher) KindOptions() actor.KindOptions { return f.opts }
func (finisher) New(_ string, c actor.Command) (actor.Logic, error) {
	s := &finisherState{}
	var a struct {
		EndAt  uint64 `msgpack:"end_at"`
		Still  bool   `msgpack:"still"`
		Frames bool   `msgpack:"frames"`
		Label  string `msgpack:"label"`
	}
	if err := c.Decode(&a); err != nil {
		return nil, err
	}
	s.EndAt, s.Still, s.Show = a.EndAt, a.Still, a.Frames
	if a.Label != "" {
		if err := s.SetLabel("made-by", a.Label); err != nil {
			return nil, err
		}
	}
	return s, nil
}
func (finisher) Restore(_ string, b []byte) (actor.Logic, error) {
	s := &finisherState{}
	return s, msgpack.Unmarshal(b, s)
}

type finisherState struct {
	actor.Lifecycle
	actor.Effects
	actor.Frames
	N     int64  `msgpack:"n"`
	Ticks uint64 `msgpack:"ticks"`
	EndAt uint64 `msgpack:"end_at"`
	Still bool   `msgpack:"still"`  // its state does not change on a tick (idle checkpoints)
	Show  bool   `msgpack:"frames"` // a frame every tick
}

func (s *finisherState) Tick(tick uint64) {
	if !s.Still {
		s.Ticks = tick
	}
	if s.Show {
		_ = s.Publish("", []byte(strconv.FormatUint(tick, 10)))
	}
	if s.EndAt > 0 && tick >= s.EndAt {
		_ = s.Emit("done", []byte(strconv.FormatUint(tick, 10)))
		_ = s.Publish("", []byte("last "+strconv.FormatUint(tick, 10)))
		s.End()
	}
}

func (s *finisherState) Handle(tick uint64, c actor.Command) (any, error) {
	var a struct {
		By  int64  `msgpack:"by"`
		Key string `msgpack:"key"`
		Val string `msgpack:"val"`
	}
	if err := c.Decode(&a); err != nil {
		return nil, err
	}
	switch c.Type {
	case "add":
		s.N += a.By
		return map[string]any{"n": s.N}, nil
	case "get":
		return map[string]any{"n": s.N, "ticks": s.Ticks, "tick": tick}, nil
	case "finish":
		_ = s.Emit("prize", []byte(strconv.FormatInt(s.N, 10)))
		_ = s.Publish("", []byte("bye"))
		s.End()
		return map[string]any{"n": s.N, "finished": true}, nil
	case "label":
		if err := s.SetLabel(a.Key, a.Val); err != nil {
			return nil, &actor.Rejected{Code: "bad_request", Message: err.Error()}
		}
		return nil, nil
	case "unlabel":
		s.DeleteLabel(a.Key)
		return nil, nil
	case "malformed-end": // ends, then says the command was malformed: nothing of it may stand
		s.End()
		return nil, &actor.Rejected{Code: "bad_request", Message: "malformed"}
	}
	return nil, actor.Reject("unknown %q", c.Type)
}

func (s *finisherState) MarshalState() ([]byte, error) { return msgpack.Marshal(s) }

func lifeNode(t *testing.T, st store.Store, name string, opt nodeOpt, kinds ...actor.Kind) *node {
	t.Helper()
	if len(kinds) == 0 {
		kinds = []actor.Kind{finisher{}}
	}
	opt.kinds = kinds
	return newNode(t, st, name, opt)
}

func loadRec(t *testing.T, st store.Store, id string) (store.Record, uint64) {
	t.Helper()
	rec, rev, err := st.Load(context.Background(), 1, store.ShardOf(id, testShards), id)
	if err != nil {
		t.Fatalf("load %s: %v", id, err)
	}
	return rec, rev
}

func ended(st store.Store, id string) (store.Record, bool) {
	rec, _, err := st.Load(context.Background(), 1, store.ShardOf(id, testShards), id)
	return rec, err == nil && rec.Ended
}

func fxPayload(s *sink, key string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.got[key])
}

func resultMap(t *testing.T, r wire.Reply, what string) map[string]any {
	t.Helper()
	mustOK(t, r, what)
	m, ok := r.Result.(map[string]any)
	if !ok {
		t.Fatalf("%s: result %#v, want a map", what, r.Result)
	}
	return m
}

// Issue 35, lifecycle: a Logic ends its own instance — from Handle (the command is answered with
// its result) or from Tick — exactly as an end command does: a fenced tombstone holding the
// effects of that tick (published once it is stored), the frames of that tick published, later
// commands told it has ended, a retransmission answered from the tombstone, the tombstone removed
// after TombstoneTTL.
func TestLogicEndsItsInstance(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		st := b.open(t)
		frames, fx := &collect{}, newSink()
		n := lifeNode(t, st, "A", nodeOpt{tombstoneTTL: time.Second,
			frames:  func(prometheus.Registerer) shard.FramePublisher { return frames },
			effects: func(prometheus.Registerer) shard.EffectPublisher { return fx }})
		n.grant(1)

		t.Run("from Handle", func(t *testing.T) {
			id := idIn(1, 0)
			mustOK(t, n.send(id, "c", map[string]any{"type": "create", "kind": "finisher"}), "create")
			mustOK(t, n.send(id, "a", map[string]any{"type": "add", "by": 5}), "add")
			// finish and, in the same tick, a command behind it
			fin := n.submit(id, "f", mustBody(t, map[string]any{"type": "finish"}))
			after := n.submit(id, "x", mustBody(t, map[string]any{"type": "add", "by": 1}))
			res := resultMap(t, recvReply(t, fin, "finish"), "finish")
			if fmt.Sprint(res["n"]) != "5" || res["finished"] != true {
				t.Fatalf("finish answered %v, want n 5 finished", res)
			}
			wantCode(t, recvReply(t, after, "a command after the end"), wire.CodeUnknownInstance, "a command after the end")
			rec, _ := loadRec(t, st, id)
			if !rec.Ended || len(rec.State) != 0 {
				t.Fatalf("stored: ended=%v state=%d bytes; want a tombstone", rec.Ended, len(rec.State))
			}
			if _, ok := rec.FindRequest("f"); !ok {
				t.Fatal("the tombstone does not remember the command that ended it")
			}
			waitFor(t, "the effect of the ending command published", func() bool { return len(fx.keys()) == 1 })
			if got := fxPayload(fx, fx.keys()[0]); got != "5" {
				t.Fatalf("effect payload %q, want 5", got)
			}
			waitFor(t, "the final frame published", func() bool {
				return slices.ContainsFunc(frames.take(), func(f shard.Frame) bool { return f.Instance == id && string(f.Payload) == "bye" })
			})
			again := resultMap(t, n.send(id, "f", map[string]any{"type": "finish"}), "finish retransmitted")
			if again["finished"] != true {
				t.Fatalf("the retransmitted finish got %v, want its first answer", again)
			}
			wantCode(t, n.send(id, "y", map[string]any{"type": "get"}), wire.CodeUnknownInstance, "get after the end")
			waitFor(t, "the tombstone removed after TombstoneTTL", func() bool {
				_, _, err := st.Load(context.Background(), 1, 1, id)
				return errors.Is(err, store.ErrNotFound)
			})
		})

		t.Run("from Tick", func(t *testing.T) {
			id := idIn(1, 1)
			mustOK(t, n.send(id, "c", map[string]any{"type": "create", "kind": "finisher", "end_at": 20}), "create")
			waitFor(t, "the instance ended by its Tick", func() bool { _, ok := ended(st, id); return ok })
			rec, _ := loadRec(t, st, id)
			if rec.Tick != 20 {
				t.Fatalf("tombstone at tick %d, want 20 (the tick whose Tick ended it)", rec.Tick)
			}
			waitFor(t, "the effect of the last tick published", func() bool {
				fx.mu.Lock()
				defer fx.mu.Unlock()
				for _, p := range fx.got {
					if string(p) == "20" {
						return true
					}
				}
				return false
			})
			waitFor(t, "the frame of the last tick published", func() bool {
				return slices.ContainsFunc(frames.take(), func(f shard.Frame) bool {
					return f.Instance == id && string(f.Payload) == "last 20" && f.Tick == 20
				})
			})
			wantCode(t, n.send(id, "g", map[string]any{"type": "get"}), wire.CodeUnknownInstance, "get after the end")
		})

		t.Run("malformed", func(t *testing.T) {
			// An end asked in a Handle that refuses its command bad_request does not stand.
			id := idIn(1, 2)
			mustOK(t, n.send(id, "c", map[string]any{"type": "create", "kind": "finisher"}), "create")
			wantCode(t, n.send(id, "m", map[string]any{"type": "malformed-end"}), wire.CodeBadRequest, "malformed-end")
			mustOK(t, n.send(id, "g", map[string]any{"type": "get"}), "get: the instance lives on")
			if rec, _ := loadRec(t, st, id); rec.Ended {
				t.Fatal("ended by a command refused as malformed")
			}
		})
	})
}

// Issue 35, lifecycle: an end by the Logic across a failover. One that was stored stays ended on
// the new owner; one whose write never landed (the old owner froze before it) is redone by the
// new owner, deterministically, at the same tick, with its effect published once (the old owner's
// write, landing late, is fenced off).
func TestLogicEndAcrossFailover(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		st := b.open(t) // one store for both (they use shards of their own)
		t.Run("stored", func(t *testing.T) {
			fxA, fxB := newSink(), newSink()
			a := lifeNode(t, st, "A", nodeOpt{checkpointEvery: 1000, tombstoneTTL: time.Hour,
				effects: func(prometheus.Registerer) shard.EffectPublisher { return fxA }})
			a.grant(1)
			id := idIn(1, 10)
			mustOK(t, a.send(id, "c", map[string]any{"type": "create", "kind": "finisher", "end_at": 30}), "create")
			waitFor(t, "the end stored", func() bool { _, ok := ended(st, id); return ok })
			waitFor(t, "its effect published by A", func() bool { return len(fxA.keys()) == 1 })
			bn := lifeNode(t, st, "B", nodeOpt{checkpointEvery: 1000, tombstoneTTL: time.Hour,
				effects: func(prometheus.Registerer) shard.EffectPublisher { return fxB }})
			bn.grant(1)
			wantCode(t, bn.send(id, "g", map[string]any{"type": "get"}), wire.CodeUnknownInstance, "get on the new owner")
			bn.ticked(20)
			if rec, _ := loadRec(t, st, id); !rec.Ended || rec.Tick != 30 {
				t.Fatalf("after the failover: ended=%v tick=%d, want the tombstone of tick 30", rec.Ended, rec.Tick)
			}
			// The tombstone keeps its outbox (no later write drops what the stream took): the new
			// owner publishes it again under the same key, which the stream and consumers drop.
			waitFor(t, "the tombstone's outbox published again by B", func() bool { return len(fxB.keys()) == 1 })
			if !slices.Equal(fxB.keys(), fxA.keys()) {
				t.Fatalf("the new owner published %v, the old one %v: want the same effect key", fxB.keys(), fxA.keys())
			}
		})
		t.Run("not stored", func(t *testing.T) {
			fxA, fxB := newSink(), newSink()
			a := lifeNode(t, st, "A", nodeOpt{checkpointEvery: 1000, tombstoneTTL: time.Hour,
				effects: func(prometheus.Registerer) shard.EffectPublisher { return fxA }})
			a.grant(2)
			id := idIn(2, 11)
			mustOK(t, a.send(id, "c", map[string]any{"type": "create", "kind": "finisher", "end_at": 40}), "create")
			frozen := a.freeze.arm(id) // the next write of id is the tombstone (no checkpoint before tick 1000)
			<-frozen
			before, _ := loadRec(t, st, id)
			if before.Ended {
				t.Fatal("the end is stored before its write was let go")
			}
			bn := lifeNode(t, st, "B", nodeOpt{checkpointEvery: 1000, tombstoneTTL: time.Hour,
				effects: func(prometheus.Registerer) shard.EffectPublisher { return fxB }})
			bn.grant(2)
			waitFor(t, "the new owner ends it again", func() bool { _, ok := ended(st, id); return ok })
			rec, _ := loadRec(t, st, id)
			if rec.Tick != 40 {
				t.Fatalf("the new owner ended it at tick %d, want 40: the same tick, redone from the stored tick %d", rec.Tick, before.Tick)
			}
			waitFor(t, "its effect published by B", func() bool { return len(fxB.keys()) == 1 })
			if got := fxPayload(fxB, fxB.keys()[0]); got != "40" {
				t.Fatalf("effect %q, want 40", got)
			}
			a.freeze.release() // the old owner's tombstone lands late: fenced off
			waitFor(t, "the old owner's late write rejected", func() bool { return a.writes("stale_owner") >= 1 })
			if len(fxA.keys()) != 0 {
				t.Fatalf("the old owner published %v: its write never landed", fxA.keys())
			}
			if rec2, _ := loadRec(t, st, id); rec2.Tick != 40 || !rec2.Ended {
				t.Fatalf("stored after the late write: %+v", rec2)
			}
		})
	})
}

// Issue 35, lifecycle: kinds set their own tick rate and checkpoint policy; an idle checkpoint
// writes an unchanged state less often.
func TestKindOptions(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		st := b.open(t)
		n := lifeNode(t, st, "A", nodeOpt{checkpointEvery: 1000},
			finisher{name: "slow", opts: actor.KindOptions{TickRate: 10}},
			finisher{name: "fast"}, // the node's 50 Hz
			finisher{name: "often", opts: actor.KindOptions{CheckpointEvery: 5}},
			finisher{name: "idle", opts: actor.KindOptions{CheckpointEvery: 5, IdleCheckpoint: 10000}})
		n.grant(3)
		ids := map[string]string{}
		for i, k := range []string{"slow", "fast", "often", "idle", "idlebusy"} {
			ids[k] = idIn(3, 20+i)
			kind := k
			create := map[string]any{"type": "create", "kind": kind}
			if k == "idle" {
				create["still"] = true
			}
			if k == "idlebusy" { // an idle checkpoint writes a state that changes at every checkpoint
				create["kind"] = "idle"
			}
			mustOK(t, n.send(ids[k], "c", create), "create "+k)
		}
		_, revIdle := loadRec(t, st, ids["idle"])
		_, revBusy := loadRec(t, st, ids["idlebusy"])
		time.Sleep(1500 * time.Millisecond)
		if rec, _ := loadRec(t, st, ids["often"]); rec.Tick < 20 {
			t.Fatalf("kind with CheckpointEvery 5 stored at tick %d after 1.5 s, want checkpoints (the node's is 1000)", rec.Tick)
		}
		if rec, _ := loadRec(t, st, ids["fast"]); rec.Tick > 1 {
			t.Fatalf("kind without options stored at tick %d, want no checkpoint before the node's 1000", rec.Tick)
		}
		_, rev2Idle := loadRec(t, st, ids["idle"])
		_, rev2Busy := loadRec(t, st, ids["idlebusy"])
		if rev2Idle != revIdle {
			t.Fatalf("an unchanged state was written %d times in 1.5 s with an idle checkpoint of 10000 ticks", rev2Idle-revIdle)
		}
		if rev2Busy-revBusy < 5 {
			t.Fatalf("a changing state of the same kind was written %d times in 1.5 s, want every 5 ticks", rev2Busy-revBusy)
		}
		ticks := func(k string) float64 {
			r := resultMap(t, n.sendRetryingBusy(ids[k], "g", map[string]any{"type": "get"}), "get "+k)
			v, _ := r["tick"].(int64)
			return float64(v)
		}
		slow, fast := ticks("slow"), ticks("fast")
		if ratio := fast / slow; slow < 8 || ratio < 3.5 || ratio > 6.5 {
			t.Fatalf("ticks after 1.5 s: slow (10 Hz) %v, fast (50 Hz) %v: ratio %.2f, want about 5", slow, fast, ratio)
		}
		t.Logf("ticks after 1.5 s: 10 Hz kind %v, 50 Hz kind %v", slow, fast)
		// Created again from its tombstone as a kind of another rate, it moves to that rate.
		mustOK(t, n.sendRetryingBusy(ids["slow"], "end", map[string]any{"type": "end"}), "end slow")
		mustOK(t, n.sendRetryingBusy(ids["slow"], "again", map[string]any{"type": "create", "kind": "fast"}), "create it again as fast")
		g1 := resultMap(t, n.sendRetryingBusy(ids["slow"], "g1", map[string]any{"type": "get"}), "get")
		time.Sleep(time.Second)
		g2 := resultMap(t, n.sendRetryingBusy(ids["slow"], "g2", map[string]any{"type": "get"}), "get")
		if d := g2["tick"].(int64) - g1["tick"].(int64); d < 35 || d > 65 {
			t.Fatalf("created again as a 50 Hz kind, it ticked %d times in 1 s", d)
		}
		// A command is written at once, idle or not.
		mustOK(t, n.sendRetryingBusy(ids["idle"], "a", map[string]any{"type": "add", "by": 2}), "add")
		if _, rev := loadRec(t, st, ids["idle"]); rev == revIdle {
			t.Fatal("a command to an idle instance was not written")
		}
	})
}

// Issue 35, lifecycle: labels set at create and by the Logic are stored in the record and listed
// and filtered (store.ListInstances: natskv's one pass over the records, memstore's loads).
func TestLabelsListedAndFiltered(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		st := b.open(t)
		n := lifeNode(t, st, "A", nodeOpt{tombstoneTTL: time.Hour})
		n.grant(4)
		n.grant(5)
		heroic, normal, other := idIn(4, 30), idIn(4, 31), idIn(5, 32)
		mustOK(t, n.send(heroic, "c", map[string]any{"type": "create", "kind": "finisher", "labels": map[string]any{"mode": "heroic", "size": "10"}, "label": "new"}), "create heroic")
		mustOK(t, n.send(normal, "c", map[string]any{"type": "create", "kind": "finisher", "labels": map[string]any{"mode": "normal"}}), "create normal")
		mustOK(t, n.send(other, "c", map[string]any{"type": "create", "kind": "finisher", "labels": map[string]any{"mode": "heroic"}}), "create other")
		if rec, _ := loadRec(t, st, heroic); rec.Labels["mode"] != "heroic" || rec.Labels["size"] != "10" || rec.Labels["made-by"] != "new" {
			t.Fatalf("labels stored at create: %v, want mode heroic, size 10 and made-by new (set by Kind.New)", rec.Labels)
		}
		mustOK(t, n.send(heroic, "l1", map[string]any{"type": "label", "key": "open", "val": "3"}), "label")
		mustOK(t, n.send(heroic, "l2", map[string]any{"type": "unlabel", "key": "size"}), "unlabel")
		if rec, _ := loadRec(t, st, heroic); rec.Labels["open"] != "3" || rec.Labels["size"] != "" || len(rec.Labels) != 3 {
			t.Fatalf("labels after the Logic's changes: %v", rec.Labels)
		}
		wantCode(t, n.send(heroic, "l3", map[string]any{"type": "label", "key": "bad key", "val": "x"}), wire.CodeBadRequest, "a label refused at the call")

		cl, err := st.Cluster(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		list := func(opt store.ListOptions) []string {
			t.Helper()
			ls, err := store.ListInstances(context.Background(), st, cl, opt)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, l := range ls {
				if l.Err != nil {
					t.Fatalf("listed %s: %v", l.ID, l.Err)
				}
				ids = append(ids, l.ID)
			}
			return ids
		}
		want := []string{heroic, other}
		slices.Sort(want)
		if got := list(store.ListOptions{Labels: map[string]string{"mode": "heroic"}}); !slices.Equal(got, want) {
			t.Fatalf("mode=heroic lists %v, want %v", got, want)
		}
		if got := list(store.ListOptions{Labels: map[string]string{"mode": "heroic", "open": "*"}}); !slices.Equal(got, []string{heroic}) {
			t.Fatalf("mode=heroic,open=* lists %v, want [%s]", got, heroic)
		}
		shard5 := uint32(5)
		if got := list(store.ListOptions{Labels: map[string]string{"mode": "heroic"}, Shard: &shard5}); !slices.Equal(got, []string{other}) {
			t.Fatalf("mode=heroic on shard 5 lists %v, want [%s]", got, other)
		}
		if got := list(store.ListOptions{}); len(got) != 3 {
			t.Fatalf("no selector lists %v, want all three", got)
		}
		mustOK(t, n.send(other, "f", map[string]any{"type": "finish"}), "finish")
		if got := list(store.ListOptions{Labels: map[string]string{"mode": "heroic"}}); !slices.Equal(got, []string{heroic}) {
			t.Fatalf("after the end of %s, mode=heroic lists %v: a tombstone is listed only when asked", other, got)
		}
		if got := list(store.ListOptions{Labels: map[string]string{"mode": "heroic"}, Ended: true}); !slices.Equal(got, want) {
			t.Fatalf("with Ended, mode=heroic lists %v, want %v", got, want)
		}

		for i, bad := range []any{"heroic", map[string]any{"mode": 3}, map[string]any{"bad key": "x"}} {
			id := idIn(4, 33)
			wantCode(t, n.send(id, fmt.Sprint("bad", i), map[string]any{"type": "create", "kind": "finisher", "labels": bad}), wire.CodeBadRequest, fmt.Sprintf("create with labels %v", bad))
		}
	})
}

// Issue 35, lifecycle: a kind that passivates unloads an instance idle for its Passivate (no
// command, no watcher): written marked passive, then no tick and no memory but its ID in its
// shard's index. A command wakes it (answered as usual, its state as stored), and so does a
// watcher's interest; a new owner of the shard leaves it unloaded (no registration, no tick) until
// then.
func TestPassivation(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		st := b.open(t)
		lazy := finisher{name: "lazy", opts: actor.KindOptions{Passivate: 300 * time.Millisecond}}
		n := lifeNode(t, st, "A", nodeOpt{}, lazy, finisher{})
		n.grant(6)
		id, awake := idIn(6, 40), idIn(6, 41)
		mustOK(t, n.send(id, "c", map[string]any{"type": "create", "kind": "lazy"}), "create")
		mustOK(t, n.send(awake, "c", map[string]any{"type": "create", "kind": "finisher"}), "create a kind that does not passivate")
		mustOK(t, n.send(id, "a", map[string]any{"type": "add", "by": 7}), "add")
		waitFor(t, "the idle instance passivated", func() bool { return n.host.Passive() == 1 })
		if got := n.host.Instances(); got != 1 {
			t.Fatalf("%d instances loaded, want 1 (the kind that does not passivate)", got)
		}
		rec, rev := loadRec(t, st, id)
		if !rec.Passive || rec.Ended {
			t.Fatalf("the last write of the passivated instance: passive=%v ended=%v", rec.Passive, rec.Ended)
		}
		time.Sleep(200 * time.Millisecond)
		if _, rev2 := loadRec(t, st, id); rev2 != rev {
			t.Fatal("a passivated instance was written again")
		}

		// A command wakes it.
		r := resultMap(t, n.sendRetryingBusy(id, "g", map[string]any{"type": "get"}), "get (wakes it)")
		if fmt.Sprint(r["n"]) != "7" || r["tick"].(int64) != int64(rec.Tick)+1 {
			t.Fatalf("woken instance answered %v, want n 7 at tick %d (the stored one's next)", r, rec.Tick+1)
		}
		if n.host.Passive() != 0 || n.host.Instances() != 2 {
			t.Fatalf("after the wake: %d passive, %d loaded", n.host.Passive(), n.host.Instances())
		}

		// A watcher's interest wakes it too, and keeps it loaded while it lasts.
		waitFor(t, "passivated again", func() bool { return n.host.Passive() == 1 })
		interest := func(h *shard.Host) {
			h.Submit(shard.Command{Request: wire.Request{Shard: 6, Instance: id}, Received: time.Now(), Interest: true})
		}
		interest(n.host)
		waitFor(t, "woken by a watcher's interest", func() bool { return n.host.Passive() == 0 && n.host.Instances() == 2 })
		for range 5 {
			time.Sleep(100 * time.Millisecond)
			interest(n.host)
			if n.host.Passive() != 0 {
				t.Fatal("passivated while a watcher says its interest every 100 ms")
			}
		}

		// A new owner leaves a passivated instance unloaded: no registration, no tick.
		waitFor(t, "passivated again", func() bool { return n.host.Passive() == 1 })
		_, rev = loadRec(t, st, id)
		bn := lifeNode(t, st, "B", nodeOpt{}, lazy, finisher{})
		bn.grant(6)
		if bn.host.Passive() != 1 || bn.host.Instances() != 1 {
			t.Fatalf("the new owner: %d passive, %d loaded; want the passivated one left unloaded", bn.host.Passive(), bn.host.Instances())
		}
		if _, rev2 := loadRec(t, st, id); rev2 != rev {
			t.Fatal("the new owner registered the passivated instance")
		}
		r = resultMap(t, bn.sendRetryingBusy(id, "a2", map[string]any{"type": "add", "by": 1}), "add on the new owner (wakes it)")
		if fmt.Sprint(r["n"]) != "8" {
			t.Fatalf("woken on the new owner: n = %v, want 8", r["n"])
		}
		if rec, _ := loadRec(t, st, id); rec.Passive {
			t.Fatal("the woken instance's write is still marked passive")
		}
	})
}

// A watcher over NATS (natscmd.Client.Watch) says its interest: it wakes a passivated instance,
// whose frames then flow, and keeps it loaded while it watches.
func TestWatchWakesAPassivatedInstance(t *testing.T) {
	var jet backend
	for _, b := range backends(t) {
		if b.nc != nil {
			jet = b
		}
	}
	st := jet.open(t)
	lazy := finisher{name: "lazy", opts: actor.KindOptions{Passivate: 300 * time.Millisecond}}
	n := lifeNode(t, st, "A", nodeOpt{
		commands: func(reg prometheus.Registerer) shard.Commands { return natscmd.NewServer(jet.nc(t), testShards, reg) },
		frames: func(reg prometheus.Registerer) shard.FramePublisher {
			p := natscmd.NewFramePublisher(jet.nc(t), 0, reg)
			t.Cleanup(p.Close)
			return p
		}}, lazy)
	n.grant(7)
	id := idIn(7, 50)
	mustOK(t, n.send(id, "c", map[string]any{"type": "create", "kind": "lazy", "frames": true}), "create")
	waitFor(t, "passivated", func() bool { return n.host.Passive() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := natscmd.NewClient(jet.nc(t), testShards)
	c.InterestEvery = 100 * time.Millisecond
	w, err := c.Watch(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case f := <-w.C:
		t.Logf("first frame after the wake: tick %d", f.Tick)
	case <-ctx.Done():
		t.Fatal("no frame: the watch did not wake the passivated instance")
	}
	time.Sleep(700 * time.Millisecond)
	if n.host.Passive() != 0 {
		t.Fatal("passivated while watched")
	}
	cancel()
	waitFor(t, "passivated once the watch ended", func() bool { return n.host.Passive() == 1 })
}
