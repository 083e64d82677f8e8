package shard_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/shard"
	"github.com/tickfence/tickfence/store/memstore"
)

// tbomb panics, once armed by "arm" {"where": ...}, in the next Tick, MarshalState or TakeFrames.
type tbomb struct{}

var tbombWhere atomic.Value // string

func (tbomb) Name() string                                   { return "tbomb" }
func (tbomb) New(string, actor.Command) (actor.Logic, error) { return &tbombState{}, nil }
func (tbomb) Restore(_ string, b []byte) (actor.Logic, error) {
	s := &tbombState{}
	return s, msgpack.Unmarshal(b, &s.counterState)
}

type tbombState struct{ counterState }

func armed(w string) bool {
	v, _ := tbombWhere.Load().(string)
	return v == w
}

func (s *tbombState) Tick(t uint64) {
	if armed("tick") {
		panic("tick boom")
	}
	s.counterState.Tick(t)
}
func (s *tbombState) MarshalState() ([]byte, error) {
	if armed("marshal") {
		panic("marshal boom")
	}
	return s.counterState.MarshalState()
}
func (s *tbombState) TakeFrames() []actor.Frame {
	if armed("frames") {
		panic("frames boom")
	}
	return nil
}

func TestPanicAnywhereInATickAnswersEveryCommand(t *testing.T) {
	for _, strat := range []shard.WriteStrategy{shard.WriteSingle, shard.WriteBatches} {
		for _, where := range []string{"tick", "marshal", "frames"} {
			t.Run(string(strat)+"/"+where, func(t *testing.T) {
				tbombWhere.Store("")
				n := newNode(t, memstore.New(), "A", nodeOpt{writeStrategy: strat})
				id := idIn(1, 0)
				n.grant(1)
				mustOK(t, n.send(id, "c", map[string]any{"type": "create", "kind": "tbomb"}), "create")
				mustOK(t, n.send(id, "x", map[string]any{"type": "add", "by": 1}), "x")
				c := &counted{got: map[string][]string{}}
				frozen := n.freeze.arm(id)
				c.submit(t, n, id, "a1", map[string]any{"type": "add", "by": 1})
				<-frozen
				c.submit(t, n, id, "a2", map[string]any{"type": "add", "by": 1})
				c.submit(t, n, id, "x", map[string]any{"type": "add", "by": 1})
				c.submit(t, n, id, "a1", map[string]any{"type": "add", "by": 1})
				waitFor(t, "pending", func() bool { return testutil.ToFloat64(n.metrics.CommandsPending) == 4 })
				tbombWhere.Store(where)
				c.submit(t, n, id, "a3", map[string]any{"type": "add", "by": 1})
				time.Sleep(100 * time.Millisecond)
				c.submit(t, n, id, "a4", map[string]any{"type": "add", "by": 1})
				time.Sleep(100 * time.Millisecond)
				n.freeze.release()
				time.Sleep(300 * time.Millisecond)
				tbombWhere.Store("")
				c.mu.Lock()
				defer c.mu.Unlock()
				for _, k := range []string{"a1/1", "a2/1", "x/1", "a1/2", "a3/1", "a4/1"} {
					v := c.got[k]
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
