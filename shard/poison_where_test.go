package shard_test

import (
	"sync/atomic"
	"testing"
	"time"

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

// Second review: a panic in the game's Tick, MarshalState or TakeFrames, with a write in flight
// and commands behind it, answers every command exactly once, with either write strategy.
func TestPanicAnywhereInATickAnswersEveryCommand(t *testing.T) {
	for _, strat := range []shard.WriteStrategy{shard.WriteSingle, shard.WriteBatches} {
		for _, where := range []string{"tick", "marshal", "frames"} {
			t.Run(string(strat)+"/"+where, func(t *testing.T) {
				tbombWhere.Store("")
				defer tbombWhere.Store("")
				n, id := withInstance(t, memstore.New(), "tbomb", nodeOpt{writeStrategy: strat})
				mustOK(t, n.send(id, "x", map[string]any{"type": "add", "by": 1}), "x")
				c := newCounted()
				c.behindAWriteInFlight(t, n, id)
				tbombWhere.Store(where)
				c.submit(t, n, id, "a3", map[string]any{"type": "add", "by": 1})
				time.Sleep(100 * time.Millisecond)
				c.submit(t, n, id, "a4", map[string]any{"type": "add", "by": 1})
				time.Sleep(100 * time.Millisecond)
				n.freeze.release()
				c.eachAnsweredOnce(t, n)
			})
		}
	}
}
