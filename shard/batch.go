package shard

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tickfence/tickfence/store"
)

// WriteStrategy is how a host sends its instances' records (DESIGN 10).
type WriteStrategy string

const (
	// WriteAuto: batches when the cluster's data buckets are replicated and the store can
	// commit them (store.BatchWriter), single writes otherwise. The default.
	WriteAuto WriteStrategy = "auto"
	// WriteSingle: every record is its own fenced write, pipelined across instances. On a
	// single-replica stream this is the fastest; on a replicated one the leader admits one
	// fenced proposal per shard at a time and answers the others 10164, which the store retries.
	WriteSingle WriteStrategy = "single"
	// WriteBatches: the records of one shard go out together as one atomic batch (the fence on
	// shard.<S> checked once for all of them), one batch in flight per shard: what becomes ready
	// while a batch is in flight forms the next one (group commit). Needs a store.BatchWriter.
	WriteBatches WriteStrategy = "batches"
)

// ParseWriteStrategy reads a strategy's name ("" is WriteAuto).
func ParseWriteStrategy(s string) (WriteStrategy, error) {
	switch w := WriteStrategy(s); w {
	case "":
		return WriteAuto, nil
	case WriteAuto, WriteSingle, WriteBatches:
		return w, nil
	}
	return "", fmt.Errorf("write strategy %q: want auto, single or batches", s)
}

// batching reports whether the host sends records in batches, and the store's batch writer.
func batching(cfg Config, cl store.Cluster) (store.BatchWriter, bool, error) {
	bw, can := cfg.Store.(store.BatchWriter)
	switch cfg.WriteStrategy {
	case WriteSingle:
		return nil, false, nil
	case WriteBatches:
		if !can {
			return nil, false, fmt.Errorf("shard host: write strategy batches: the store (%T) cannot write atomic batches", cfg.Store)
		}
		return bw, true, nil
	}
	return bw, can && cl.Replicas > 1, nil
}

// batchItem is one instance's write waiting for its shard's next batch.
type batchItem struct {
	in *instance
	w  *write
}

// batcher sends the records of one shard in atomic batches, one batch in flight at a time: what
// becomes ready meanwhile waits and leaves together when the batch in flight is settled. The
// shard's instances tick in the same phase bucket (Engine.AddInPhase), so a tick's records
// usually leave as one batch. Every
// write still gets its own outcome (instance.written), so a batch's commands are answered only
// once the batch holding them is stored, and an unknown outcome rotates and rebuilds the shard as
// an unknown single write does.
type batcher struct {
	sh *shardRun
	bw store.BatchWriter

	mu     sync.Mutex
	queue  []batchItem
	flying bool
}

// add queues one write for the shard's next batch, and sends a batch if none is in flight.
func (b *batcher) add(in *instance, w *write) {
	b.mu.Lock()
	b.queue = append(b.queue, batchItem{in, w})
	if b.flying {
		b.mu.Unlock()
		return
	}
	b.flying = true
	b.mu.Unlock()
	// The shard's instances tick in one phase bucket: give the rest of the bucket's records a
	// moment to join this one.
	time.AfterFunc(batchLinger, b.next)
}

// batchLinger is how long an idle shard's first record waits for the others of its tick (the
// engine's phase bucket is 500 µs wide).
const batchLinger = 500 * time.Microsecond

// next sends the queued writes as a batch, or marks the shard idle if there are none.
func (b *batcher) next() {
	b.mu.Lock()
	if len(b.queue) == 0 {
		b.flying = false
		b.mu.Unlock()
		return
	}
	items := b.take()
	b.mu.Unlock()
	b.send(items)
}

// take removes the next batch from the queue, under b.mu: writes under the first one's token (a
// rotation gives a shard's instances a new token; older writes never share a batch with newer
// ones), within the store's bounds.
func (b *batcher) take() []batchItem {
	tok := b.queue[0].in.grant.Token
	var items, rest []batchItem
	bytes := 0
	for _, it := range b.queue {
		size := it.w.rec.ApproxSize()
		if it.in.grant.Token != tok || len(items) == store.MaxBatchWrites ||
			len(items) > 0 && bytes+size > store.MaxBatchBytes {
			rest = append(rest, it)
			continue
		}
		items = append(items, it)
		bytes += size
	}
	b.queue = rest
	return items
}

// send writes one batch; when every write of it is settled, the next batch goes.
func (b *batcher) send(items []batchItem) {
	g := items[0].in.grant
	h := b.sh.h
	if b.sh.uncertain(g.Token) {
		// DESIGN 4: nothing more is sent under a token with an uncertain write; the rebuild
		// under way answers these writes' commands retry.
		for _, it := range items {
			it.in.written(it.w, fmt.Errorf("write of %s not sent: %w", it.in.id, errShardUncertain))
		}
		b.next()
		return
	}
	if h.batchesOff.Load() { // the store turned batches down: these go as single writes
		for _, it := range items {
			h.cfg.Store.WriteAsync(g, it.in.id, it.w.rec, func(_ uint64, err error) { it.in.written(it.w, err) })
		}
		b.next()
		return
	}
	h.cfg.metrics.WriteBatch.Observe(float64(len(items)))
	writes := make([]store.BatchWrite, len(items))
	for i, it := range items {
		writes[i] = store.BatchWrite{ID: it.in.id, Rec: it.w.rec}
	}
	var mu sync.Mutex
	left := len(items)
	b.bw.WriteBatch(g, writes, func(i int, _ uint64, err error) {
		if errors.Is(err, store.ErrBatchesOff) && h.batchesOff.CompareAndSwap(false, true) {
			h.log.Warn("the store cannot write atomic batches here: single writes from now on (recreate the data buckets with atomic publishing to batch)",
				"shard", g.Shard, "epoch", g.Epoch, "token", g.Token, "err", err)
		}
		items[i].in.written(items[i].w, err)
		mu.Lock()
		left--
		last := left == 0
		mu.Unlock()
		if last {
			b.next()
		}
	})
}
