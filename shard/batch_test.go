package shard_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/tickfence/tickfence/shard"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/memstore"
)

// load runs clients against ids until stop closes: each sends adds, retrying the same request ID
// until it is answered ok, and counts what was acknowledged per instance.
type adders struct {
	mu      sync.Mutex
	acked   map[string]int64
	sent    int
	retries int
	stop    chan struct{}
	wg      sync.WaitGroup
}

func startAdders(t *testing.T, n *node, ids []string, workers int) *adders {
	a := &adders{acked: map[string]int64{}, stop: make(chan struct{})}
	for w := 0; w < workers; w++ {
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			for k := 0; ; k++ {
				select {
				case <-a.stop:
					return
				default:
				}
				id := ids[(w*7+k)%len(ids)]
				reqID := fmt.Sprintf("w%d-%d", w, k)
				for attempt := 0; ; attempt++ {
					var r wire.Reply
					select {
					case b := <-n.submit(id, reqID, mustBody(t, map[string]any{"type": "add", "by": 1})):
						r, _ = wire.DecodeReply(b, false)
					case <-time.After(30 * time.Second):
						t.Errorf("%s: no answer in 30s", reqID)
						return
					}
					if r.OK {
						a.mu.Lock()
						a.acked[id]++
						a.sent++
						a.retries += attempt
						a.mu.Unlock()
						break
					}
					if r.Error.Code == wire.CodeNotOwner { // the shard moved: a client would follow it
						return
					}
					if r.Error.Code != wire.CodeRetry && r.Error.Code != wire.CodeBusy && r.Error.Code != wire.CodeUnknownOutcome {
						t.Errorf("%s: %v", reqID, r.Error)
						return
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
		}()
	}
	return a
}

func (a *adders) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.sent
}

// finish stops the clients and checks that every acknowledged add is in the stored state once.
func (a *adders) finish(t *testing.T, st store.Store) {
	t.Helper()
	close(a.stop)
	a.wg.Wait()
	for id, want := range a.acked {
		if _, cs := load(t, st, id); cs.N != want {
			t.Errorf("%s: stored n = %d, acknowledged %d adds", id, cs.N, want)
		}
	}
}

func createAll(t *testing.T, n *node, ids []string) {
	t.Helper()
	for _, id := range ids {
		mustOK(t, n.send(id, "c-"+id, map[string]any{"type": "create", "kind": "counter"}), "create "+id)
	}
}

// With the batch strategy a shard's records leave together, and every command is answered only
// once the batch holding it is stored: what was acknowledged is what is stored, exactly once.
func TestBatchesStoreWhatTheyAcknowledge(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		st := b.open(t)
		n := newNode(t, st, "A", nodeOpt{writeStrategy: shard.WriteBatches, checkpointEvery: 5})
		n.grant(1)
		n.grant(2)
		var ids []string
		for i := 0; i < 12; i++ {
			ids = append(ids, idIn(uint32(1+i%2), i))
		}
		createAll(t, n, ids)
		a := startAdders(t, n, ids, 16)
		waitFor(t, "600 adds acknowledged", func() bool { return a.count() >= 600 })
		a.finish(t, st)
		m := batchHistogram(t, n)
		if m.count == 0 || m.sum/float64(m.count) < 1.5 {
			t.Fatalf("batches: %d holding %.0f records; want several records per batch on average", m.count, m.sum)
		}
		if got := n.writes("ok"); got < m.sum {
			t.Errorf("%.0f writes ok, fewer than the %.0f records batched", got, m.sum)
		}
		t.Logf("%d adds acknowledged (%d retries) in %d batches of %.1f records on average", a.sent, a.retries, m.count, m.sum/float64(m.count))
	})
}

type histogram struct {
	count uint64
	sum   float64
}

// batchHistogram reads tickfence_write_batch_records: batches sent and records in them.
func batchHistogram(t *testing.T, n *node) histogram {
	t.Helper()
	var d dto.Metric
	if err := n.metrics.WriteBatch.Write(&d); err != nil {
		t.Fatal(err)
	}
	return histogram{d.GetHistogram().GetSampleCount(), d.GetHistogram().GetSampleSum()}
}

// A batch whose outcome is unknown (its answer lost) makes the owner rotate and rebuild the shard,
// as an unknown single write does; when the batch lands late it is fenced, and what was
// acknowledged is stored exactly once.
func TestBatchWithUnknownOutcomeRotates(t *testing.T) {
	st := memstore.New()
	n := newNode(t, st, "A", nodeOpt{writeStrategy: shard.WriteBatches, checkpointEvery: 5})
	n.grant(1)
	var ids []string
	for i := 0; i < 6; i++ {
		ids = append(ids, idIn(1, i))
	}
	createAll(t, n, ids)
	a := startAdders(t, n, ids, 8)
	waitFor(t, "300 adds acknowledged", func() bool { return a.count() >= 300 })
	st.HoldWrites(func(id string) bool { return id == ids[3] })
	var held []store.HeldWrite
	waitFor(t, "a batch held", func() bool { held = append(held, st.TakeHeld()...); return len(held) > 0 })
	st.HoldWrites(nil)
	held = append(held, st.TakeHeld()...)
	waitFor(t, "a rotation", func() bool { return testutil.ToFloat64(n.metrics.Rotations) >= 1 })
	before := a.count()
	waitFor(t, "adds acknowledged after the rebuild", func() bool { return a.count() >= before+300 })
	for _, h := range append(held, st.TakeHeld()...) {
		if err := h.Deliver(context.Background()); !errors.Is(err, store.ErrStaleOwner) {
			t.Errorf("the held batch (with %s) landing late: %v; want ErrStaleOwner", h.Instance(), err)
		}
	}
	a.finish(t, st)
}

// A batch under a token the coordinator has granted elsewhere is refused whole; the old owner
// stops the shard and the new one finds every acknowledged add stored exactly once.
func TestStaleBatchStopsTheShard(t *testing.T) {
	st := memstore.New()
	na := newNode(t, st, "A", nodeOpt{writeStrategy: shard.WriteBatches, checkpointEvery: 5})
	na.grant(1)
	var ids []string
	for i := 0; i < 6; i++ {
		ids = append(ids, idIn(1, i))
	}
	createAll(t, na, ids)
	a := startAdders(t, na, ids, 8)
	waitFor(t, "300 adds acknowledged", func() bool { return a.count() >= 300 })
	nb := newNode(t, st, "B", nodeOpt{writeStrategy: shard.WriteBatches, checkpointEvery: 5})
	nb.grant(1) // A is not told: only the store's fence stops it
	waitFor(t, "A stops shard 1 on a stale-owner rejection", func() bool { return !na.host.Running(1) })
	close(a.stop)
	a.wg.Wait()
	if got := na.writes("stale_owner"); got == 0 {
		t.Errorf("A's writes refused as stale owner: %v, want some", got)
	}
	for id, want := range a.acked {
		r := nb.send(id, "get-"+id, map[string]any{"type": "get"})
		mustOK(t, r, "get on B")
		if _, cs := load(t, st, id); cs.N != want {
			t.Errorf("%s: stored n = %d, A acknowledged %d adds", id, cs.N, want)
		}
	}
}

// measuringBatches records the largest batch it is given, in records and encoded bytes.
type measuringBatches struct {
	*memstore.Store
	mu       sync.Mutex
	maxBytes int
	maxN     int
}

func (s *measuringBatches) WriteBatch(g store.Grant, writes []store.BatchWrite, done func(int, uint64, error)) {
	total := 0
	for _, w := range writes {
		if b, err := store.EncodeRecord(w.Rec); err == nil {
			total += len(b)
		}
	}
	s.mu.Lock()
	s.maxBytes = max(s.maxBytes, total)
	s.maxN = max(s.maxN, len(writes))
	s.mu.Unlock()
	s.Store.WriteBatch(g, writes, done)
}

// A batch holds at most store.MaxBatchBytes, counting what a record carries besides its state
// (its effects outbox, up to 64 KiB, and its request window). Found by review: the batcher
// counted the state alone, and 80 records with full outboxes made batches of 4.4–4.9 MB.
func TestBatchBytesBound(t *testing.T) {
	st := &measuringBatches{Store: memstore.New()}
	n := newNode(t, st, "A", nodeOpt{writeStrategy: shard.WriteBatches, checkpointEvery: 1, maxCmdDelay: -time.Second})
	n.grant(6)
	var ids []string
	for i := 0; i < 80; i++ {
		ids = append(ids, idIn(6, 1000+i))
	}
	for _, id := range ids {
		mustOK(t, n.send(id, "c-"+id, map[string]any{"type": "create", "kind": "emitter"}), "create")
	}
	payload := string(make([]byte, 4000))
	for round := 0; round < 15; round++ {
		var chs []<-chan []byte
		for _, id := range ids {
			chs = append(chs, n.submit(id, fmt.Sprintf("e%d-%s", round, id), mustBody(t, map[string]any{"type": "emit", "what": payload})))
		}
		for _, ch := range chs {
			r, _ := wire.DecodeReply(<-ch, false)
			mustOK(t, r, "emit")
		}
	}
	time.Sleep(200 * time.Millisecond) // checkpoints every tick: all 80 records want one batch
	st.mu.Lock()
	defer st.mu.Unlock()
	t.Logf("largest batch: %d records, %d bytes encoded (MaxBatchBytes %d)", st.maxN, st.maxBytes, store.MaxBatchBytes)
	if st.maxBytes > store.MaxBatchBytes || st.maxN < 2 {
		t.Errorf("largest batch %d records, %d bytes: want several records, at most store.MaxBatchBytes (%d)", st.maxN, st.maxBytes, store.MaxBatchBytes)
	}
}

// Batches forced on unreplicated buckets are allowed but warned about: on a NATS server an R1
// file stream stages each atomic batch in a file store of its own (at 5 000 demo dungeons ~500
// commands/s against 13 k with single writes). Replicated buckets, where auto picks batches, are
// not warned about.
func TestBatchesOnR1AreWarnedAbout(t *testing.T) {
	for _, c := range []struct {
		strategy shard.WriteStrategy
		warn     bool
	}{{shard.WriteBatches, true}, {shard.WriteSingle, false}, {shard.WriteAuto, false}} {
		t.Run(string(c.strategy), func(t *testing.T) {
			var log lockedBuffer
			newNode(t, memstore.New(), "A", nodeOpt{writeStrategy: c.strategy, log: &log}) // one replica
			log.mu.Lock()
			text := log.b.String()
			log.mu.Unlock()
			if got := strings.Contains(text, "batches on unreplicated buckets"); got != c.warn {
				t.Errorf("%s on R1: warned %v, want %v; log:\n%s", c.strategy, got, c.warn, text)
			}
		})
	}
}
