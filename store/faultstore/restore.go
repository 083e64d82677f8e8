package faultstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/tickfence/tickfence/store"
)

// The whole-bucket steps of a backup and a restore (store.Epochs), through the same faults as
// every other call: store.Restore on a Client claims, seals, resets, puts and commits the way it
// would over a flaky network (a lost answer, a step landing late or never, a freeze between a
// check and the step it guards, a kill half way). The wrapped store must implement store.Epochs.

var _ store.EpochStore = (*Client)(nil)

func (c *Client) epochs(what string) (store.Epochs, error) {
	e, ok := c.n.under.(store.Epochs)
	if !ok {
		return nil, fmt.Errorf("%s: %T has no whole-bucket operations (store.Epochs)", what, c.n.under)
	}
	return e, nil
}

// ScanPartition implements store.Epochs; never lagged (the contract reads the stream leader).
func (c *Client) ScanPartition(ctx context.Context, epoch uint64, partition uint32, fn func(key string, value []byte) error) error {
	what := "scan " + store.DataBucket(epoch, partition)
	e, err := c.epochs(what)
	if err != nil {
		return err
	}
	if err := c.read(what); err != nil {
		return err
	}
	return e.ScanPartition(ctx, epoch, partition, fn)
}

// PartitionSealed implements store.Epochs; never lagged.
func (c *Client) PartitionSealed(ctx context.Context, epoch uint64, partition uint32) (bool, error) {
	what := "sealed? " + store.DataBucket(epoch, partition)
	e, err := c.epochs(what)
	if err != nil {
		return false, err
	}
	if err := c.read(what); err != nil {
		return false, err
	}
	return e.PartitionSealed(ctx, epoch, partition)
}

// SealPartition implements store.Epochs: a write like any other (its answer may be lost, and it
// may land later or never).
func (c *Client) SealPartition(ctx context.Context, epoch uint64, partition uint32) error {
	name := store.DataBucket(epoch, partition)
	e, err := c.epochs("seal " + name)
	if err != nil {
		return err
	}
	_, err = c.mutate(ctx, name, "seal "+name,
		func(ctx context.Context) (uint64, error) { return 0, e.SealPartition(ctx, epoch, partition) },
		func(uint64) {})
	return err
}

// ResetPartition implements store.Epochs. Once it lands, the Net forgets the versions it saw in
// that epoch (a lagging read never answers from a bucket that no longer exists).
func (c *Client) ResetPartition(ctx context.Context, epoch uint64, partition uint32, like uint64) error {
	name := store.DataBucket(epoch, partition)
	e, err := c.epochs("reset " + name)
	if err != nil {
		return err
	}
	_, err = c.mutate(ctx, name, "reset "+name,
		func(ctx context.Context) (uint64, error) { return 0, e.ResetPartition(ctx, epoch, partition, like) },
		func(uint64) { c.n.forgetEpoch(epoch) })
	return err
}

// DropPartition implements store.Epochs (see ResetPartition).
func (c *Client) DropPartition(ctx context.Context, epoch uint64, partition uint32) error {
	name := store.DataBucket(epoch, partition)
	e, err := c.epochs("drop " + name)
	if err != nil {
		return err
	}
	_, err = c.mutate(ctx, name, "drop "+name,
		func(ctx context.Context) (uint64, error) { return 0, e.DropPartition(ctx, epoch, partition) },
		func(uint64) { c.n.forgetEpoch(epoch) })
	return err
}

// PutData implements store.Epochs. The value is noted like any write, so later reads of the key
// may lag behind it.
func (c *Client) PutData(ctx context.Context, epoch uint64, partition uint32, key string, value []byte) (uint64, error) {
	name := store.DataBucket(epoch, partition)
	e, err := c.epochs("put " + key + " into " + name)
	if err != nil {
		return 0, err
	}
	val := append([]byte(nil), value...)
	return c.mutate(ctx, key, "put "+key+" into "+name,
		func(ctx context.Context) (uint64, error) { return e.PutData(ctx, epoch, partition, key, val) },
		func(rev uint64) { c.n.record(fmt.Sprintf("d/%d/%s", epoch, key), version{rev: rev, val: val}) })
}

// forgetEpoch drops the versions seen of an epoch's data keys (its buckets were deleted).
func (n *Net) forgetEpoch(epoch uint64) {
	prefix := fmt.Sprintf("d/%d/", epoch)
	n.mu.Lock()
	defer n.mu.Unlock()
	for k := range n.versions {
		if strings.HasPrefix(k, prefix) {
			delete(n.versions, k)
		}
	}
}

// Blobs implements store.Epochs: the wrapped store's, without faults.
func (c *Client) Blobs(ctx context.Context) store.Blobs {
	e, err := c.epochs("blobs")
	if err != nil {
		return failingBlobs{err}
	}
	return e.Blobs(ctx)
}

type failingBlobs struct{ err error }

func (f failingBlobs) PutBlob(string, []byte) (string, error) { return "", f.err }
func (f failingBlobs) GetBlob(string) ([]byte, error)         { return nil, f.err }
