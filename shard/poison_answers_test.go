package shard_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tickfence/tickfence/shard"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/memstore"
)

type counted struct {
	mu  sync.Mutex
	got map[string][]string
}

func (c *counted) submit(t *testing.T, n *node, id, reqID string, cmd map[string]any) {
	body := mustBody(t, cmd)
	req, err := wire.DecodeRequest(wire.Subject(store.ShardOf(id, testShards), id), reqID, "", body, testShards)
	if err != nil {
		t.Fatal(err)
	}
	k := reqID
	c.mu.Lock()
	c.got[k+"#"] = append(c.got[k+"#"], "")
	seq := len(c.got[k+"#"])
	c.mu.Unlock()
	key := k + "/" + string(rune('0'+seq))
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

func TestPoisonAnswersEachCommandOnce(t *testing.T) {
	for _, strat := range []shard.WriteStrategy{shard.WriteSingle, shard.WriteBatches} {
		for _, refuse := range []bool{false, true} {
			for _, closeFirst := range []bool{false, true} {
				name := string(strat)
				if refuse {
					name += "/refused"
				}
				if closeFirst {
					name += "/close-before-release"
				}
				t.Run(name, func(t *testing.T) {
					st := &refusing{Store: memstore.New()}
					var s store.Store = st
					if strat == shard.WriteBatches {
						s = memstore.New() // refusing has no WriteBatch
						if refuse {
							t.Skip()
						}
					}
					n := newNode(t, s, "A", nodeOpt{writeStrategy: strat})
					id := idIn(1, 0)
					n.grant(1)
					mustOK(t, n.send(id, "c", map[string]any{"type": "create", "kind": "bomb"}), "create")
					mustOK(t, n.send(id, "x", map[string]any{"type": "add", "by": 1}), "x")
					c := &counted{got: map[string][]string{}}
					frozen := n.freeze.arm(id)
					if refuse {
						st.arm(id)
					}
					c.submit(t, n, id, "a1", map[string]any{"type": "add", "by": 1})
					<-frozen
					c.submit(t, n, id, "a2", map[string]any{"type": "add", "by": 1})
					c.submit(t, n, id, "x", map[string]any{"type": "add", "by": 1})
					c.submit(t, n, id, "a1", map[string]any{"type": "add", "by": 1})
					waitFor(t, "pending", func() bool { return testutil.ToFloat64(n.metrics.CommandsPending) == 4 })
					time.Sleep(60 * time.Millisecond)
					c.submit(t, n, id, "a3", map[string]any{"type": "add", "by": 1})
					c.submit(t, n, id, "boom", map[string]any{"type": "boom"})
					c.submit(t, n, id, "a4", map[string]any{"type": "add", "by": 1})
					time.Sleep(100 * time.Millisecond)
					done := make(chan struct{})
					if closeFirst {
						go func() {
							ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
							defer cancel()
							_ = n.host.Close(ctx)
							close(done)
						}()
						time.Sleep(50 * time.Millisecond)
					}
					n.freeze.release()
					if closeFirst {
						<-done
					}
					time.Sleep(300 * time.Millisecond)
					c.mu.Lock()
					defer c.mu.Unlock()
					for k, v := range c.got {
						if k[len(k)-1] == '#' {
							continue
						}
						t.Logf("%s: %v", k, v)
						if len(v) != 1 {
							t.Errorf("%s answered %d times: %v", k, len(v), v)
						}
					}
					if p := testutil.ToFloat64(n.metrics.CommandsPending); p != 0 {
						t.Errorf("pending %v", p)
					}
				})
			}
		}
	}
}
