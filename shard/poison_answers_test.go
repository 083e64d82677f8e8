package shard_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tickfence/tickfence/shard"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/memstore"
)

// counted submits commands and records every answer each one gets.
type counted struct {
	mu   sync.Mutex
	sent map[string]int      // request ID → how many times submitted
	got  map[string][]string // "<request ID>/<nth submission>" → the answers' codes
}

func newCounted() *counted { return &counted{sent: map[string]int{}, got: map[string][]string{}} }

func (c *counted) submit(t *testing.T, n *node, id, reqID string, cmd map[string]any) {
	t.Helper()
	req, err := wire.DecodeRequest(wire.Subject(store.ShardOf(id, testShards), id), reqID, "", mustBody(t, cmd), testShards)
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.sent[reqID]++
	key := fmt.Sprintf("%s/%d", reqID, c.sent[reqID])
	c.got[key] = nil
	c.mu.Unlock()
	n.host.Submit(shard.Command{Request: req, Received: time.Now(), Reply: func(b []byte) {
		r, _ := wire.DecodeReply(b, false)
		s := "ok"
		if !r.OK {
			s = r.Error.Code
		}
		c.mu.Lock()
		c.got[key] = append(c.got[key], s)
		c.mu.Unlock()
	}})
}

// behindAWriteInFlight submits a1 and holds its write in flight (n.freeze), then a2, a
// retransmission of x (stored before) and one of a1, and lets ticks apply them: their answers
// wait in the write coalesced behind the one in flight.
func (c *counted) behindAWriteInFlight(t *testing.T, n *node, id string) {
	t.Helper()
	frozen := n.freeze.arm(id)
	c.submit(t, n, id, "a1", map[string]any{"type": "add", "by": 1})
	<-frozen
	c.submit(t, n, id, "a2", map[string]any{"type": "add", "by": 1})
	c.submit(t, n, id, "x", map[string]any{"type": "add", "by": 1})
	c.submit(t, n, id, "a1", map[string]any{"type": "add", "by": 1})
	n.ticked(2)
}

// eachAnsweredOnce waits until every submission has an answer, then checks that none gets a
// second one and that no command is counted pending.
func (c *counted) eachAnsweredOnce(t *testing.T, n *node) {
	t.Helper()
	waitFor(t, "every command answered", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, v := range c.got {
			if len(v) == 0 {
				return false
			}
		}
		return true
	})
	time.Sleep(100 * time.Millisecond) // a second answer would come by now
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, v := range c.got {
		t.Logf("%s: %v", k, v)
		if len(v) != 1 {
			t.Errorf("%s answered %d times: %v", k, len(v), v)
		}
	}
	if p := testutil.ToFloat64(n.metrics.CommandsPending); p != 0 {
		t.Errorf("%v commands still counted pending", p)
	}
}

// Second review: whatever settles first — the write in flight (stored or refused), a panic, a
// shutdown's flush — every command waiting behind a write is answered exactly once.
func TestPoisonAnswersEachCommandOnce(t *testing.T) {
	for _, strat := range []shard.WriteStrategy{shard.WriteSingle, shard.WriteBatches} {
		for _, refuse := range []bool{false, true} {
			if refuse && strat == shard.WriteBatches {
				continue // the refusing store has no WriteBatch
			}
			for _, closeFirst := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/refused=%v/close-before-release=%v", strat, refuse, closeFirst), func(t *testing.T) {
					st := &refusing{Store: memstore.New()}
					var s store.Store = st
					if strat == shard.WriteBatches {
						s = memstore.New()
					}
					n, id := withInstance(t, s, "bomb", nodeOpt{writeStrategy: strat})
					mustOK(t, n.send(id, "x", map[string]any{"type": "add", "by": 1}), "x")
					if refuse {
						st.arm(id)
					}
					c := newCounted()
					c.behindAWriteInFlight(t, n, id)
					c.submit(t, n, id, "a3", map[string]any{"type": "add", "by": 1})
					c.submit(t, n, id, "boom", map[string]any{"type": "boom"})
					c.submit(t, n, id, "a4", map[string]any{"type": "add", "by": 1})
					time.Sleep(100 * time.Millisecond)
					done := make(chan struct{})
					if closeFirst {
						go func() {
							defer close(done)
							ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
							defer cancel()
							_ = n.host.Close(ctx)
						}()
						time.Sleep(50 * time.Millisecond)
					} else {
						close(done)
					}
					n.freeze.release()
					<-done
					c.eachAnsweredOnce(t, n)
				})
			}
		}
	}
}
