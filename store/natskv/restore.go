package natskv

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickfence/tickfence/store"
)

// The whole-bucket steps of a backup and a restore (store.Epochs); the algorithm is
// store.TakeBackup, store.Restore and store.AbandonRestore. A data bucket is the KV bucket
// tickfence-data-e<E>-p<k>, i.e. the stream KV_tickfence-data-e<E>-p<k>; sealing sets the
// stream's Sealed flag, which the server enforces on every publish (10109).

var _ store.EpochStore = (*Store)(nil)

// RestoreOptions is store.RestoreOptions (kept for callers of Store.Restore).
type RestoreOptions = store.RestoreOptions

// Backup reads every live key of the current epoch's data buckets (store.TakeBackup).
func (s *Store) Backup(ctx context.Context, progress func(done int)) (store.Backup, error) {
	return store.TakeBackup(ctx, s, progress)
}

// Restore makes a backup the state of a new epoch (store.Restore).
func (s *Store) Restore(ctx context.Context, b store.Backup, opt RestoreOptions) (store.Cluster, error) {
	cl, err := store.Restore(ctx, s, b, opt)
	if err == nil {
		s.mu.Lock()
		s.cluster = &cl
		s.mu.Unlock()
	}
	return cl, err
}

// madeInfo is streamInfo of a bucket that was just found or made (by this store, or by another
// client at the same moment): on a JetStream cluster that is still forming, a stream whose create
// was answered (or answered "already in use") may not be found for a moment more, so a not-found
// is asked again for up to madeWait.
func (s *Store) madeInfo(ctx context.Context, bucket string) (*jetstream.StreamInfo, error) {
	for deadline := time.Now().Add(madeWait); ; {
		info, err := s.streamInfo(ctx, bucket)
		if !errors.Is(err, store.ErrNotFound) || time.Now().After(deadline) {
			return info, err
		}
		select {
		case <-ctx.Done():
			return info, err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// bindMade binds a KV bucket just found or made, as madeInfo asks for its stream.
func (s *Store) bindMade(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	for deadline := time.Now().Add(madeWait); ; {
		kv, err := s.js.KeyValue(ctx, bucket)
		if !errors.Is(err, jetstream.ErrBucketNotFound) || time.Now().After(deadline) {
			return kv, err
		}
		select {
		case <-ctx.Done():
			return kv, err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// madeWait bounds madeInfo's wait for a stream just made to be found.
const madeWait = 5 * time.Second

func (s *Store) streamInfo(ctx context.Context, bucket string) (*jetstream.StreamInfo, error) {
	stream, err := s.js.Stream(ctx, "KV_"+bucket)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("bucket %s: %w", bucket, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", bucket, err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", bucket, err)
	}
	return info, nil
}

// ScanPartition implements store.Epochs with an ordered consumer of the bucket's stream (served
// by the stream leader), latest value per key, delete markers left out.
func (s *Store) ScanPartition(ctx context.Context, epoch uint64, partition uint32, fn func(key string, value []byte) error) error {
	kv, err := s.kv(ctx, store.DataBucket(epoch, partition))
	if err != nil {
		return err
	}
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return err
	}
	return initialValues(ctx, w, "scan", func(e jetstream.KeyValueEntry) error { return fn(e.Key(), e.Value()) })
}

// SealPartition implements store.Epochs: the stream's Sealed flag (nothing can land there any
// more, so a zombie holding a grant of that epoch can write nowhere: DESIGN 6).
func (s *Store) SealPartition(ctx context.Context, epoch uint64, partition uint32) error {
	info, err := s.streamInfo(ctx, store.DataBucket(epoch, partition))
	if err != nil {
		return err
	}
	if info.Config.Sealed {
		return nil
	}
	cfg := info.Config
	cfg.Sealed = true
	if _, err := s.js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("seal %s: %w", cfg.Name, err)
	}
	return nil
}

// PartitionSealed implements store.Epochs.
func (s *Store) PartitionSealed(ctx context.Context, epoch uint64, partition uint32) (bool, error) {
	info, err := s.streamInfo(ctx, store.DataBucket(epoch, partition))
	if err != nil {
		return false, err
	}
	return info.Config.Sealed, nil
}

// ResetPartition implements store.Epochs: the bucket is deleted and created again like the same
// partition of epoch like: as many revisions per key, and the replicas of the cluster record (or,
// for an older record that does not name them, of like's stream). With replicas, the leaders of
// partitions 0..partition of the new epoch are spread over the servers again (SpreadLeaders).
func (s *Store) ResetPartition(ctx context.Context, epoch uint64, partition uint32, like uint64) error {
	info, err := s.streamInfo(ctx, store.DataBucket(like, partition))
	if err != nil {
		return err
	}
	keep := max(info.Config.MaxMsgsPerSubject, 1)
	c, err := s.Cluster(ctx)
	if err != nil {
		return err
	}
	replicas := int(c.Replicas)
	if replicas == 0 {
		replicas = max(info.Config.Replicas, 1)
	}
	if err := s.DropPartition(ctx, epoch, partition); err != nil {
		return err
	}
	if err := s.createDataBucket(ctx, store.DataBucket(epoch, partition), keep, replicas); err != nil {
		return err
	}
	s.spreadLeaders(ctx, epoch, partition+1, replicas)
	return nil
}

// DropPartition implements store.Epochs.
func (s *Store) DropPartition(ctx context.Context, epoch uint64, partition uint32) error {
	name := store.DataBucket(epoch, partition)
	if err := s.js.DeleteKeyValue(ctx, name); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		return fmt.Errorf("delete bucket %s: %w", name, err)
	}
	s.mu.Lock()
	delete(s.buckets, name)
	s.mu.Unlock()
	return nil
}

// PutData implements store.Epochs: a plain KV put.
func (s *Store) PutData(ctx context.Context, epoch uint64, partition uint32, key string, value []byte) (uint64, error) {
	kv, err := s.kv(ctx, store.DataBucket(epoch, partition))
	if err != nil {
		return 0, err
	}
	rev, err := kv.Put(ctx, key, value)
	return rev, classify("put "+key, err)
}
