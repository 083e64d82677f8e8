package shard

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/internal/metrics"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/memstore"
)

// tally is a test kind: a number that "add" increases.
type tally struct{}

func (tally) Name() string                                   { return "tally" }
func (tally) New(string, actor.Command) (actor.Logic, error) { return &tallyState{}, nil }
func (tally) Restore(_ string, b []byte) (actor.Logic, error) {
	s := &tallyState{}
	return s, msgpack.Unmarshal(b, s)
}

type tallyState struct {
	N int64 `msgpack:"n"`
}

func (s *tallyState) Tick(uint64) {}
func (s *tallyState) Handle(uint64, actor.Command) (any, error) {
	s.N++
	return s.N, nil
}
func (s *tallyState) MarshalState() ([]byte, error) { return msgpack.Marshal(s) }

// lossyWrites loses the answer of the first pipelined write (it never lands) and counts the
// writes sent under each token.
type lossyWrites struct {
	store.Store
	mu      sync.Mutex
	lost    bool
	byToken map[uint64]int
}

func (s *lossyWrites) WriteAsync(g store.Grant, id string, rec store.Record, done func(uint64, error)) {
	s.mu.Lock()
	s.byToken[g.Token]++
	first := !s.lost
	s.lost = true
	s.mu.Unlock()
	if first {
		done(0, fmt.Errorf("write %s: ack lost: %w", id, store.ErrUnknownOutcome))
		return
	}
	s.Store.WriteAsync(g, id, rec, done)
}

func (s *lossyWrites) sent(token uint64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byToken[token]
}

// DESIGN 4: once a write's outcome is unknown, nothing more is written under that token — a
// second write acknowledged under it could be overwritten by the first one landing late. The
// rebuild that rotates the token is held back here (the test holds the shard's lock), so the
// next tick runs while the instance still holds the old grant.
func TestNoWriteUnderTokenAfterUnknownOutcome(t *testing.T) {
	ctx := context.Background()
	mem := memstore.New()
	if _, err := mem.Bootstrap(ctx, store.Cluster{Shards: 4, Partitions: 1, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	st := &lossyWrites{Store: mem, byToken: map[uint64]int{}}
	a := store.Assignment{Owner: "n1", Session: "s1"}
	const id = "x"
	s := store.ShardOf(id, 4)
	tok, err := mem.Assign(ctx, 1, s, a, 0)
	if err != nil {
		t.Fatal(err)
	}
	g := store.Grant{Epoch: 1, Shard: s, Token: tok, Assignment: a}
	if _, err := mem.Create(ctx, g, id, store.Record{Kind: "tally"}); err != nil {
		t.Fatal(err)
	}
	state, _ := msgpack.Marshal(&tallyState{})
	if _, err := mem.Write(ctx, g, id, store.Record{Kind: "tally", State: state}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	e, err := actor.NewEngine(actor.EngineConfig{Rate: 10, Manual: true, Start: start})
	if err != nil {
		t.Fatal(err)
	}
	kinds, _ := actor.NewKinds(tally{})
	h, err := New(ctx, Config{Node: "n1", Session: "s1", Store: st, Kinds: kinds, Engine: e,
		Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	h.Apply(store.AssignmentEvent{Shard: s, Revision: tok, Assignment: a})
	deadline := time.Now().Add(5 * time.Second)
	for !h.Running(s) {
		if time.Now().After(deadline) {
			t.Fatal("shard never ran")
		}
		time.Sleep(time.Millisecond)
	}
	h.mu.Lock()
	sh := h.shards[s]
	h.mu.Unlock()
	sh.mu.Lock()
	in := sh.insts[id]
	sh.mu.Unlock()
	replies := make(chan []byte, 4)
	cmd := func(req string) Command {
		return Command{Request: wire.Request{ID: req, Shard: s, Instance: id, Type: "add"}, Received: time.Now(),
			Reply: func(b []byte) { replies <- b }}
	}

	sh.mu.Lock() // the rebuild the lost write starts waits for this
	in.enqueue(cmd("r1"))
	e.Advance(start.Add(150 * time.Millisecond)) // W1: its answer is lost
	for deadline := time.Now().Add(5 * time.Second); st.sent(tok) == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond) // the writer goroutine sends it
	}
	in.enqueue(cmd("r2"))
	e.Advance(start.Add(250 * time.Millisecond)) // the next tick, still under the same token
	time.Sleep(100 * time.Millisecond)           // a write of it would have been sent by now
	sent := st.sent(tok)
	sh.mu.Unlock()

	if sent != 1 {
		t.Errorf("writes sent under token %d after its first write's outcome became unknown: got %d, want 1", tok, sent)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := h.Close(cctx); err != nil {
		t.Log(err)
	}
	e.Stop()
}

// A graceful move's record can reach the new owner after the grant it led to (the moves and the
// assignments are watched apart): the hand-off pause is reported all the same, once per instance.
func TestHandOffPauseReportedWhenTheMoveArrivesAfterTheGrant(t *testing.T) {
	ctx := context.Background()
	mem := memstore.New()
	if _, err := mem.Bootstrap(ctx, store.Cluster{Shards: 4, Partitions: 1, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	a := store.Assignment{Owner: "n1", Session: "s1"}
	const id = "x"
	s := store.ShardOf(id, 4)
	tok, err := mem.Assign(ctx, 1, s, a, 0)
	if err != nil {
		t.Fatal(err)
	}
	g := store.Grant{Epoch: 1, Shard: s, Token: tok, Assignment: a}
	state, _ := msgpack.Marshal(&tallyState{})
	if _, err := mem.Create(ctx, g, id, store.Record{Kind: "tally"}); err != nil {
		t.Fatal(err)
	}
	if _, err := mem.Write(ctx, g, id, store.Record{Kind: "tally", State: state}); err != nil {
		t.Fatal(err)
	}
	stoppedAt := time.Now().Add(-50 * time.Millisecond) // the previous owner's last tick
	start := time.Now()
	e, err := actor.NewEngine(actor.EngineConfig{Rate: 10, Manual: true, Start: start})
	if err != nil {
		t.Fatal(err)
	}
	kinds, _ := actor.NewKinds(tally{})
	reg := prometheus.NewRegistry()
	h, err := New(ctx, Config{Node: "n1", Session: "s1", Store: mem, Kinds: kinds, Engine: e, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_ = h.Close(cctx)
		e.Stop()
	}()
	h.Apply(store.AssignmentEvent{Shard: s, Revision: tok, Assignment: a})
	deadline := time.Now().Add(5 * time.Second)
	for !h.Running(s) {
		if time.Now().After(deadline) {
			t.Fatal("shard never ran")
		}
		time.Sleep(time.Millisecond)
	}
	e.Advance(start.Add(150 * time.Millisecond)) // the first tick, before the move is known
	pauses := func() uint64 {
		var d dto.Metric
		if err := metrics.For(reg).HandoffPause.Write(&d); err != nil {
			t.Fatal(err)
		}
		return d.GetHistogram().GetSampleCount()
	}
	if n := pauses(); n != 0 {
		t.Fatalf("pauses reported before any hand-off: %d", n)
	}
	h.ExpectHandOff(s, stoppedAt)
	h.ExpectHandOff(s, stoppedAt) // a reopened watch replays the move
	if n := pauses(); n != 1 {
		t.Fatalf("hand-off pauses reported: %d, want 1 (one instance)", n)
	}
}
