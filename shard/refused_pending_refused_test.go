package shard_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
)

// slowRefusing refuses the next async write of one instance, answering only once released.
type slowRefusing struct {
	store.Store
	mu     sync.Mutex
	target string
	g      gate
}

func (r *slowRefusing) WriteAsync(gr store.Grant, id string, rec store.Record, done func(uint64, error)) {
	r.mu.Lock()
	take := r.target == id
	if take {
		r.target = ""
	}
	r.mu.Unlock()
	if take {
		go func() {
			r.g.pass()
			done(0, fmt.Errorf("write %s: %w: insufficient resources", id, store.ErrRefused))
		}()
		return
	}
	r.Store.WriteAsync(gr, id, rec, done)
}

func TestRefusedWithCoalescedPending(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		st := &slowRefusing{Store: b.open(t)}
		n := newNode(t, st, "n1", nodeOpt{})
		const s = 3
		n.grant(s)
		id := idIn(s, 41)
		mustOK(t, n.send(id, "c1", map[string]any{"type": "create", "kind": "counter"}), "create")
		mustOK(t, n.send(id, "a1", map[string]any{"type": "add", "by": 1}), "a1")
		entered, release := st.g.arm()
		st.mu.Lock()
		st.target = id
		st.mu.Unlock()
		a2 := n.submit(id, "a2", mustBody(t, map[string]any{"type": "add", "by": 10}))
		<-entered
		a3 := n.submit(id, "a3", mustBody(t, map[string]any{"type": "add", "by": 100}))
		a4 := n.submit(id, "a4", mustBody(t, map[string]any{"type": "add", "by": 1000}))
		waitFor(t, "a3/a4 applied into a pending write", func() bool { return true })
		// give ticks a chance to coalesce a3 and a4
		time.Sleep(150 * time.Millisecond)
		close(release)
		for name, ch := range map[string]<-chan []byte{"a2": a2, "a3": a3, "a4": a4} {
			r, _ := wire.DecodeReply(<-ch, false)
			t.Logf("%s: %+v", name, r)
			if r.OK {
				if name == "a2" {
					t.Fatalf("a2 ok although its write was refused")
				}
			}
		}
		for _, c := range []struct {
			id string
			by int
		}{{"a2", 10}, {"a3", 100}, {"a4", 1000}} {
			mustOK(t, sendRetrying(n, id, c.id, map[string]any{"type": "add", "by": c.by}), c.id)
		}
		if got := n.send(id, "g", map[string]any{"type": "get"}); fmt.Sprint(got.Result.(map[string]any)["n"]) != "1111" {
			t.Fatalf("n = %v, want 1111", got.Result)
		}
		if _, cs := load(t, st, id); cs.N != 1111 {
			t.Fatalf("stored n = %d, want 1111", cs.N)
		}
	})
}
