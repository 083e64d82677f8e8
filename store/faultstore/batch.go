package faultstore

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/tickfence/tickfence/store"
)

var _ store.BatchWriter = (*Client)(nil)

// WriteBatch implements store.BatchWriter over a store that has it: the whole batch is one write
// to the faults (its answer lost, landing now, later or never, in flight at a reconnect), which
// the wrapped store commits atomically whenever it lands. Over a store without batches each
// record goes as its own WriteAsync.
func (c *Client) WriteBatch(g store.Grant, writes []store.BatchWrite, done func(int, uint64, error)) {
	bw, ok := c.n.under.(store.BatchWriter)
	if !ok {
		for i, w := range writes {
			c.WriteAsync(g, w.ID, w.Rec, func(rev uint64, err error) { done(i, rev, err) })
		}
		return
	}
	c.settleDeferred()
	// What a store refuses before sending leaves the batch with its own error, whatever the
	// faults then do to the batch.
	all, idx := writes, []int(nil)
	writes = nil
	for i, w := range all {
		if err := refusedBeforeSending(w.ID, w.Rec); err != nil {
			done(i, 0, err)
			continue
		}
		idx, writes = append(idx, i), append(writes, w)
	}
	if len(writes) == 0 {
		return
	}
	inner := done
	done = func(k int, rev uint64, err error) { inner(idx[k], rev, err) }
	for _, w := range writes[1:] {
		c.n.observe(c, store.InstanceKey(g.Shard, w.ID))
	}
	// outcome is what the wrapped store answered the last time the batch was sent: the records
	// refused before sending get their own errors, the rest share the batch's.
	var mu sync.Mutex
	revs := make([]uint64, len(writes))
	errs := make([]error, len(writes))
	do := func(ctx context.Context) (uint64, error) {
		r, e := writeBatchSync(ctx, bw, g, writes)
		mu.Lock()
		copy(revs, r)
		copy(errs, e)
		mu.Unlock()
		return batchOutcome(r, e)
	}
	// The outcome is read under mu and acted on without it: acting can land another write of
	// this batch's client, whose do takes its own batch's mu — and a batch sent from this one's
	// done callback (the shard's batcher sends the next batch there) must not find this mu held
	// when a fault lands this batch again (a long nemesis run hung so on seeds 493-496).
	outcome := func() ([]uint64, []error) {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(revs), slices.Clone(errs)
	}
	recf := func(uint64) {
		revs, errs := outcome()
		for i, w := range writes {
			if errs[i] == nil && revs[i] != 0 {
				c.instRec(g, w.ID, encodeRec(g, w.Rec, false), false)(revs[i])
			}
		}
	}
	desc := fmt.Sprintf("batch of %d writes (%s tick %d, …) under %s", len(writes), writes[0].ID, writes[0].Rec.Tick, g)
	c.writeAsync(store.InstanceKey(g.Shard, writes[0].ID), desc, do, recf, func(_ uint64, err error) {
		revs, errs := outcome()
		for i := range writes {
			switch {
			case err != nil && (errs[i] == nil || !store.Refused(errs[i])):
				done(i, 0, err) // the batch's own fault or outcome
			case errs[i] != nil:
				done(i, 0, errs[i]) // refused before it was sent: its own error
			default:
				done(i, revs[i], nil)
			}
		}
	})
}

// writeBatchSync runs WriteBatch and waits for every write's outcome.
func writeBatchSync(ctx context.Context, bw store.BatchWriter, g store.Grant, writes []store.BatchWrite) ([]uint64, []error) {
	revs := make([]uint64, len(writes))
	errs := make([]error, len(writes))
	var wg sync.WaitGroup
	wg.Add(len(writes))
	bw.WriteBatch(g, writes, func(i int, rev uint64, err error) {
		revs[i], errs[i] = rev, err
		wg.Done()
	})
	wg.Wait()
	return revs, errs
}

// batchOutcome is the outcome of the records that were sent (all share it), or nil if every
// record was refused before sending (each has its own error).
func batchOutcome(revs []uint64, errs []error) (uint64, error) {
	for i, err := range errs {
		if err == nil {
			return revs[i], nil
		}
		if !store.Refused(err) {
			return 0, err
		}
	}
	return 0, nil
}

// refusedBeforeSending is the error a store answers a write with before sending anything (an
// invalid ID, a record over its limits), or nil.
func refusedBeforeSending(id string, rec store.Record) error {
	if err := store.ValidID(id); err != nil {
		return err
	}
	if len(rec.State) > store.MaxBlobBytes {
		return fmt.Errorf("%w: state of %s is %d bytes, limit %d", store.ErrTooLarge, id, len(rec.State), store.MaxBlobBytes)
	}
	if len(rec.State) > store.BlobThreshold {
		rec.State = nil // it would go to a blob
	}
	_, err := store.EncodeRecord(rec)
	return err
}
