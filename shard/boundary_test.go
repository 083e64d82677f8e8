package shard_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/memstore"
)

// boundary is a store whose faults sit at the store boundary: a pipelined write whose answer is
// lost (it never lands), a rotation that lands but whose answer is lost, and lagging reads of
// shard.<S> (Assignment answers what a replica that missed the last writes would).
type boundary struct {
	store.Store
	mu         sync.Mutex
	loseWrite  bool
	loseRotate bool
	stale      map[uint32]store.AssignmentEvent
}

func (b *boundary) WriteAsync(g store.Grant, id string, rec store.Record, done func(uint64, error)) {
	b.mu.Lock()
	lose := b.loseWrite
	b.loseWrite = false
	b.mu.Unlock()
	if lose {
		done(0, fmt.Errorf("write %s: ack lost: %w", id, store.ErrUnknownOutcome))
		return
	}
	b.Store.WriteAsync(g, id, rec, done)
}

func (b *boundary) Rotate(ctx context.Context, g store.Grant) (store.Grant, error) {
	ng, err := b.Store.Rotate(ctx, g)
	b.mu.Lock()
	lose := b.loseRotate
	b.loseRotate = false
	b.mu.Unlock()
	if err == nil && lose {
		return store.Grant{}, fmt.Errorf("rotate %s: ack lost: %w", g, store.ErrUnknownOutcome)
	}
	return ng, err
}

func (b *boundary) Assignment(ctx context.Context, epoch uint64, s uint32) (store.Assignment, uint64, error) {
	b.mu.Lock()
	ev, ok := b.stale[s]
	b.mu.Unlock()
	if ok {
		return ev.Assignment, ev.Revision, nil
	}
	return b.Store.Assignment(ctx, epoch, s)
}

// DESIGN 4: after a rotation of unknown outcome the owner re-reads shard.<S> from the stream
// leader. A read from a lagging replica that still shows the previous owner must not make it
// stop a shard that names it: the coordinator would never fail that shard over.
func TestRotationReadBackIgnoresLaggingReplica(t *testing.T) {
	ctx := context.Background()
	mem := memstore.New()
	b := &boundary{Store: mem, stale: map[uint32]store.AssignmentEvent{}}
	n := newNode(t, b, "n1", nodeOpt{})
	const s = 3
	prev := store.Assignment{Owner: "n0", Session: "n0-s1"}
	rev0, err := mem.Assign(ctx, 1, s, prev, 0)
	if err != nil {
		t.Fatal(err)
	}
	n.grant(s)
	id := idIn(s, 1)
	mustOK(t, n.send(id, "c1", map[string]any{"type": "create", "kind": "counter"}), "create")
	mustOK(t, n.send(id, "a1", map[string]any{"type": "add", "by": 1}), "add")

	b.mu.Lock() // a replica that never saw the grant to n1; the next write and rotation lose their answers
	b.stale[s] = store.AssignmentEvent{Shard: s, Revision: rev0, Assignment: prev}
	b.loseWrite, b.loseRotate = true, true
	b.mu.Unlock()
	r := n.send(id, "a2", map[string]any{"type": "add", "by": 1})
	if r.OK {
		t.Fatalf("add a2 was acknowledged although its write's answer was lost")
	}
	mustOK(t, sendRetrying(n, id, "a2", map[string]any{"type": "add", "by": 1}), "add a2 retransmitted")
	if _, st := load(t, mem, id); st.N != 2 {
		t.Fatalf("stored n: got %d, want 2", st.N)
	}
}

// A create whose initial fenced write is uncertain: the placeholder landed, the state did not.
// The rebuild must make the instance from the same create command, and the client's
// retransmission must get the first create's answer, not already_exists.
func TestCreateWithUncertainInitialWrite(t *testing.T) {
	mem := memstore.New()
	n := newNode(t, mem, "n1", nodeOpt{})
	const s = 5
	n.grant(s)
	id := idIn(s, 2)
	mem.HoldWrites(func(x string) bool { return x == id }) // the initial write's answer is lost
	r := n.send(id, "c1", map[string]any{"type": "create", "kind": "dungeon", "boss_hp": 777})
	if r.OK {
		t.Fatalf("create acknowledged although its initial write was held")
	}
	mem.HoldWrites(nil)
	if held := mem.TakeHeld(); len(held) != 1 { // dropped: it never lands
		t.Fatalf("held writes: got %d, want the initial write", len(held))
	}
	mustOK(t, sendRetrying(n, id, "c1", map[string]any{"type": "create", "kind": "dungeon", "boss_hp": 777}), "create retransmitted")
	st := n.send(id, "s1", map[string]any{"type": "status"})
	mustOK(t, st, "status")
	res, _ := st.Result.(map[string]any)
	if hp := fmt.Sprint(res["max_hp"]); hp != "777" {
		t.Fatalf("boss max HP after the rebuild: got %v (status %v), want 777 as the create asked", hp, res)
	}
}

// sendRetrying sends a command as a client does: the same request ID again while the answer is
// retry, for up to 10 s.
func sendRetrying(n *node, id, reqID string, cmd map[string]any) wire.Reply {
	n.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := n.send(id, reqID, cmd)
		if r.OK || r.Error.Code != wire.CodeRetry && r.Error.Code != wire.CodeBusy && r.Error.Code != wire.CodeUnknownOutcome || time.Now().After(deadline) {
			return r
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An end is remembered by its tombstone: a retransmission gets the first answer, and when the ID
// is created again the retransmission never ends the new instance.
func TestEndRetransmittedAnswersOnceAndSparesALaterInstance(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		st := b.open(t)
		n := newNode(t, st, "A", nodeOpt{})
		const s = 1
		n.grant(s)
		id := idIn(s, 3)
		mustOK(t, n.send(id, "c1", map[string]any{"type": "create", "kind": "counter"}), "create")
		mustOK(t, n.send(id, "a1", map[string]any{"type": "add", "by": 5}), "add")
		first := n.send(id, "e1", map[string]any{"type": "end"})
		mustOK(t, first, "end")
		again := n.send(id, "e1", map[string]any{"type": "end"})
		mustOK(t, again, "end retransmitted")
		if fmt.Sprint(again.Result) != fmt.Sprint(first.Result) {
			t.Fatalf("retransmitted end: got %v, want the first answer %v", again.Result, first.Result)
		}
		wantCode(t, n.send(id, "g1", map[string]any{"type": "get"}), wire.CodeUnknownInstance, "command after end")
		mustOK(t, n.send(id, "c2", map[string]any{"type": "create", "kind": "counter"}), "create again")
		mustOK(t, n.send(id, "a2", map[string]any{"type": "add", "by": 7}), "add to the new instance")
		mustOK(t, n.send(id, "e1", map[string]any{"type": "end"}), "the old end retransmitted")
		r := n.send(id, "g2", map[string]any{"type": "get"})
		mustOK(t, r, "the new instance is alive")
		if got := fmt.Sprint(r.Result); got != "map[n:7]" {
			t.Fatalf("new instance: got %v, want n 7", got)
		}
		// A new owner reads the same: the tombstone and its window were stored.
		mustOK(t, n.send(id, "e2", map[string]any{"type": "end"}), "end the new instance")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := n.host.Close(ctx); err != nil {
			t.Fatal(err)
		}
		n2 := newNode(t, st, "B", nodeOpt{})
		n2.grant(s)
		if r := n2.send(id, "e2", map[string]any{"type": "end"}); !r.OK {
			t.Fatalf("end retransmitted to the new owner: got %+v, want its first answer", r.Error)
		}
		wantCode(t, n2.send(id, "g3", map[string]any{"type": "get"}), wire.CodeUnknownInstance, "command after end, new owner")
	})
}

// laggingLoad answers the first Load of an instance as a replica that has not seen it yet would.
type laggingLoad struct {
	store.Store
	mu   sync.Mutex
	seen map[string]bool
}

func (l *laggingLoad) Load(ctx context.Context, epoch uint64, s uint32, id string) (store.Record, uint64, error) {
	l.mu.Lock()
	first := !l.seen[id]
	l.seen[id] = true
	l.mu.Unlock()
	if first {
		return store.Record{}, 0, fmt.Errorf("instance %s: %w", id, store.ErrNotFound)
	}
	return l.Store.Load(ctx, epoch, s, id)
}

// Load may lag; the listing covers every instance. A listed instance that a lagging Load calls
// "not found" must still be loaded: dropping it would lose an acknowledged create until the next
// rebuild.
func TestListedInstanceSurvivesALaggingLoad(t *testing.T) {
	mem := memstore.New()
	a := newNode(t, mem, "A", nodeOpt{})
	const s = 2
	a.grant(s)
	id := idIn(s, 4)
	mustOK(t, a.send(id, "c1", map[string]any{"type": "create", "kind": "counter"}), "create")
	mustOK(t, a.send(id, "a1", map[string]any{"type": "add", "by": 3}), "add")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.host.Close(ctx); err != nil {
		t.Fatal(err)
	}
	b := newNode(t, &laggingLoad{Store: mem, seen: map[string]bool{}}, "B", nodeOpt{})
	b.grant(s)
	r := b.send(id, "g1", map[string]any{"type": "get"})
	mustOK(t, r, "get on the new owner")
	if got := fmt.Sprint(r.Result); got != "map[n:3]" {
		t.Fatalf("get: got %v, want n 3", got)
	}
}
