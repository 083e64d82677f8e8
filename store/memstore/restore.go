package memstore

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/tickfence/tickfence/store"
)

// The whole-bucket steps of a backup and a restore (store.Epochs), in memory. Like a network
// call, each fails at once if its ctx has ended (a restore crashed by cancelling its ctx stops
// there on this backend too).

var _ store.EpochStore = (*Store)(nil)

func (s *Store) partitionLocked(epoch uint64, partition uint32) (*bucket, string, error) {
	name := store.DataBucket(epoch, partition)
	b := s.bucket(name, false)
	if b == nil {
		return nil, name, fmt.Errorf("data bucket %s: %w", name, store.ErrNotFound)
	}
	return b, name, nil
}

// ScanPartition implements store.Epochs.
func (s *Store) ScanPartition(ctx context.Context, epoch uint64, partition uint32, fn func(key string, value []byte) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	type kv struct {
		key string
		e   entry
	}
	s.mu.Lock()
	b, _, err := s.partitionLocked(epoch, partition)
	var live []kv
	if err == nil {
		for k, e := range b.keys {
			if !e.deleted {
				live = append(live, kv{k, e})
			}
		}
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	sort.Slice(live, func(i, j int) bool { return live[i].e.rev < live[j].e.rev })
	for _, x := range live {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(x.key, append([]byte(nil), x.e.value...)); err != nil {
			return err
		}
	}
	return nil
}

// SealPartition implements store.Epochs.
func (s *Store) SealPartition(ctx context.Context, epoch uint64, partition uint32) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, _, err := s.partitionLocked(epoch, partition)
	if err != nil {
		return err
	}
	b.sealed = true
	return nil
}

// PartitionSealed implements store.Epochs.
func (s *Store) PartitionSealed(ctx context.Context, epoch uint64, partition uint32) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, _, err := s.partitionLocked(epoch, partition)
	if err != nil {
		return false, err
	}
	return b.sealed, nil
}

// ResetPartition implements store.Epochs. Every bucket of a memstore keeps the same history
// (NewWithHistory), so like only has to exist. Watches of the old bucket are not ended: nothing
// watches an epoch before it is live.
func (s *Store) ResetPartition(ctx context.Context, epoch uint64, partition uint32, like uint64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, _, err := s.partitionLocked(like, partition); err != nil {
		return err
	}
	name := store.DataBucket(epoch, partition)
	delete(s.buckets, name)
	s.bucket(name, true)
	return nil
}

// DropPartition implements store.Epochs.
func (s *Store) DropPartition(ctx context.Context, epoch uint64, partition uint32) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.buckets, store.DataBucket(epoch, partition))
	return nil
}

// PutData implements store.Epochs.
func (s *Store) PutData(ctx context.Context, epoch uint64, partition uint32, key string, value []byte) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, name, err := s.partitionLocked(epoch, partition)
	if err != nil {
		return 0, err
	}
	if err := b.refuse("put " + key); err != nil {
		return 0, err
	}
	v := append([]byte(nil), value...)
	rev := b.put(key, v, false)
	var sh uint32
	if _, err := fmt.Sscanf(key, "shard.%d", &sh); err == nil && strings.HasPrefix(key, "shard.") {
		ev := store.AssignmentEvent{Shard: sh, Revision: rev}
		if json.Unmarshal(v, &ev.Assignment) == nil {
			s.notifyLocked(name, ev)
		}
	}
	return rev, nil
}
