package shard_test

import (
	"context"
	"testing"
	"time"

	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
)

// TestZombieWriteRejected is the seed scenario: owner A of shard S freezes just before a save, S is
// reassigned to B, B registers and saves, A wakes up and saves its old view. The store rejects A's
// write, the record stays B's, and A's actors for S stop ticking.
func TestZombieWriteRejected(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		const s = 3
		id := idIn(s, 0)
		a := newNode(t, b.open(t), "A", nodeOpt{checkpointEvery: 1 << 30})
		a.grant(s)
		mustOK(t, a.send(id, "c1", map[string]any{"type": "create", "kind": "counter"}), "create")
		mustOK(t, a.send(id, "a1", map[string]any{"type": "add", "by": 1}), "add 1")

		frozen := a.freeze.arm(id)
		zombie := a.submit(id, "a2", mustBody(t, map[string]any{"type": "add", "by": 1000}))
		<-frozen // A applied add 1000 in memory and is about to save it

		bn := newNode(t, b.open(t), "B", nodeOpt{checkpointEvery: 1 << 30})
		gb := bn.grant(s) // B loads and registers under a newer token
		mustOK(t, bn.send(id, "b1", map[string]any{"type": "add", "by": 10}), "B add 10")
		before, _ := load(t, b.open(t), id)

		ticksBefore := a.engine.Ticks()
		a.freeze.release() // A wakes up and saves its stale view
		select {
		case r := <-zombie:
			rep, _ := wire.DecodeReply(r, false)
			if rep.OK {
				t.Fatalf("zombie's command was acknowledged: %+v", rep)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("zombie's command never answered")
		}
		waitFor(t, "A stops shard S", func() bool { return !a.host.Running(s) })
		if got := a.writes("stale_owner"); got != 1 {
			t.Fatalf("A's writes rejected as stale owner = %v, want 1", got)
		}
		rec, st := load(t, b.open(t), id)
		if st.N != 11 || rec.Token != gb.Token {
			t.Fatalf("stored n = %d under token %d; want B's n = 11 under %d", st.N, rec.Token, gb.Token)
		}
		if _, ok := rec.FindRequest("a2"); ok {
			t.Fatal("the zombie's request is in the stored record")
		}
		if rec.Tick != before.Tick || string(rec.State) != string(before.State) {
			t.Fatalf("record changed after A woke: tick %d → %d", before.Tick, rec.Tick)
		}
		// A's actors for S no longer tick (it had only this instance).
		time.Sleep(100 * time.Millisecond)
		t1 := a.engine.Ticks()
		time.Sleep(200 * time.Millisecond)
		if t2 := a.engine.Ticks(); t2 != t1 {
			t.Fatalf("A still ticks after losing S: %d → %d ticks (%d before waking)", t1, t2, ticksBefore)
		}
		// B carries on.
		mustOK(t, bn.send(id, "b2", map[string]any{"type": "add", "by": 10}), "B add 10 again")
	})
}

// TestZombieWriteBeforeNewOwnerRegisters: S is reassigned to B but B has not loaded or registered
// anything yet when A wakes and writes: the store rejects it all the same.
func TestZombieWriteBeforeNewOwnerRegisters(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		const s = 5
		id := idIn(s, 1)
		a := newNode(t, b.open(t), "A", nodeOpt{checkpointEvery: 1 << 30})
		a.grant(s)
		mustOK(t, a.send(id, "c1", map[string]any{"type": "create", "kind": "counter"}), "create")
		mustOK(t, a.send(id, "a1", map[string]any{"type": "add", "by": 1}), "add 1")

		frozen := a.freeze.arm(id)
		zombie := a.submit(id, "a2", mustBody(t, map[string]any{"type": "add", "by": 1000}))
		<-frozen
		st := b.open(t)
		_, rev, err := st.Assignment(context.Background(), 1, s)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Assign(context.Background(), 1, s, store.Assignment{Owner: "B", Session: "B-s1"}, rev); err != nil {
			t.Fatal(err)
		}
		before, _ := load(t, st, id)
		a.freeze.release()
		<-zombie
		waitFor(t, "A stops shard S", func() bool { return !a.host.Running(s) })
		if got := a.writes("stale_owner"); got != 1 {
			t.Fatalf("A's writes rejected as stale owner = %v, want 1", got)
		}
		after, cs := load(t, st, id)
		if cs.N != 1 || after.Tick != before.Tick {
			t.Fatalf("stored n = %d at tick %d; want A's last acknowledged n = 1 at tick %d", cs.N, after.Tick, before.Tick)
		}
	})
}

// TestUnknownOutcomeRotatesAndLateCopyIsRejected: a write whose answer is lost makes the owner
// rotate its token and rebuild the shard from the store; the lost write, landing late, fails the
// fence; the command is answered "retry" and its retransmission applies exactly once.
func TestUnknownOutcomeRotatesAndLateCopyIsRejected(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		const s = 2
		id := idIn(s, 2)
		st := b.open(t)
		fi := st.(store.FaultInjector)
		a := newNode(t, st, "A", nodeOpt{checkpointEvery: 1 << 30})
		g0 := a.grant(s)
		mustOK(t, a.send(id, "c1", map[string]any{"type": "create", "kind": "counter"}), "create")

		fi.HoldWrites(func(x string) bool { return x == id })
		r := a.send(id, "r1", map[string]any{"type": "add", "by": 5})
		fi.HoldWrites(nil)
		wantCode(t, r, wire.CodeUnknownOutcome, "command whose write outcome is unknown")
		// The answer comes first; the rotation and rebuild follow.
		waitFor(t, "A rotates its token and rebuilds shard S", func() bool {
			_, tok, err := st.Assignment(context.Background(), 1, s)
			return err == nil && tok > g0.Token && a.host.Running(s)
		})
		_, tok, _ := st.Assignment(context.Background(), 1, s)
		held := fi.TakeHeld()
		if len(held) != 1 {
			t.Fatalf("held writes = %d, want 1", len(held))
		}
		if err := held[0].Deliver(context.Background()); !errorsIsStale(err) {
			t.Fatalf("late copy of the lost write: err = %v, want ErrStaleOwner", err)
		}
		if !a.host.Running(s) {
			t.Fatal("A stopped a shard it rotated itself")
		}
		// The sender retries with the same request ID: applied once.
		mustOK(t, a.send(id, "r1", map[string]any{"type": "add", "by": 5}), "retransmission")
		mustOK(t, a.send(id, "r1", map[string]any{"type": "add", "by": 5}), "second retransmission")
		rec, cs := load(t, st, id)
		if cs.N != 5 || rec.Token != tok {
			t.Fatalf("stored n = %d under token %d; want 5 under %d", cs.N, rec.Token, tok)
		}
	})
}

// TestRequestIDAcrossOwnerChange: a command applied and stored by A, then retransmitted with the
// same request ID to B after the shard moved, gets A's answer and has no second effect.
func TestRequestIDAcrossOwnerChange(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		const s = 1
		id := idIn(s, 3)
		st := b.open(t)
		a := newNode(t, st, "A", nodeOpt{})
		a.grant(s)
		mustOK(t, a.send(id, "c", map[string]any{"type": "create", "kind": "counter"}), "create")
		first := a.send(id, "r1", map[string]any{"type": "add", "by": 3})
		mustOK(t, first, "add on A")
		bn := newNode(t, b.open(t), "B", nodeOpt{})
		bn.grant(s)
		again := bn.send(id, "r1", map[string]any{"type": "add", "by": 3})
		if !again.OK || !sameJSON(first.Result, again.Result) {
			t.Fatalf("retransmission to the new owner answered %+v, want A's %+v", again, first)
		}
		wantCode(t, bn.send(id, "r1", map[string]any{"type": "add", "by": 4}), wire.CodeRequestIDReused, "same id, other payload, new owner")
		if _, cs := load(t, st, id); cs.N != 3 {
			t.Fatalf("n = %d, want 3: one effect across the owner change", cs.N)
		}
	})
}
