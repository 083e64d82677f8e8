package natskv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickfence/tickfence/store"
)

// Backup is a point-in-time copy of one epoch's data: the latest value of every live key.
type Backup struct {
	Cluster store.Cluster `json:"cluster"`
	Entries []BackupEntry `json:"entries"`
}

// BackupEntry is one key.
type BackupEntry struct {
	Key   string `json:"key"`
	Value []byte `json:"value"`
}

// Backup reads every live key of the current epoch's data buckets.
func (s *Store) Backup(ctx context.Context, progress func(done int)) (Backup, error) {
	cl, err := s.Cluster(ctx)
	if err != nil {
		return Backup{}, err
	}
	b := Backup{Cluster: cl}
	for p := uint32(0); p < cl.Partitions; p++ {
		kv, err := s.kv(ctx, store.DataBucket(cl.Epoch, p))
		if err != nil {
			return Backup{}, err
		}
		w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
		if err != nil {
			return Backup{}, err
		}
		for e := range w.Updates() {
			if e == nil {
				break
			}
			b.Entries = append(b.Entries, BackupEntry{Key: e.Key(), Value: e.Value()})
			if progress != nil && len(b.Entries)%1000 == 0 {
				progress(len(b.Entries))
			}
		}
		_ = w.Stop()
	}
	return b, nil
}

// Seal seals every data stream of an epoch: nothing can land there any more, so a zombie holding
// a grant of that epoch can write nowhere (DESIGN 6).
func (s *Store) Seal(ctx context.Context, cl store.Cluster) error {
	for p := uint32(0); p < cl.Partitions; p++ {
		stream, err := s.js.Stream(ctx, "KV_"+store.DataBucket(cl.Epoch, p))
		if err != nil {
			return err
		}
		info, err := stream.Info(ctx)
		if err != nil {
			return err
		}
		if info.Config.Sealed {
			continue
		}
		cfg := info.Config
		cfg.Sealed = true
		if _, err := s.js.UpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("seal %s: %w", cfg.Name, err)
		}
	}
	return nil
}

// RestoreOptions change how Restore works; the zero value is the rule of DESIGN 6. The fields
// exist so a test can show what each step of the rule prevents.
type RestoreOptions struct {
	SkipSeal          bool // leave epoch E writable
	KeepShardRevision bool // restore shard.<S> from the backup instead of rewriting it after the data
	Progress          func(done, total int)
}

// Restore makes a backup the state of a new epoch: it seals every data stream of the current
// epoch E, restores the backup into new buckets of epoch E+1, rewrites every shard.<S> there
// (unassigned, so every restored revision is superseded and the coordinator grants afresh), and
// only then sets cluster.epoch = E+1. A write goes to the bucket of its grant's epoch, so a zombie
// from E hits a sealed stream, and no token of E is valid in E+1.
func (s *Store) Restore(ctx context.Context, b Backup, opt RestoreOptions) (store.Cluster, error) {
	ctl, err := s.ctl(ctx)
	if err != nil {
		return store.Cluster{}, err
	}
	ce, err := ctl.Get(ctx, store.ClusterKey)
	if err != nil {
		return store.Cluster{}, classify("cluster record", err)
	}
	var cur store.Cluster
	if err := json.Unmarshal(ce.Value(), &cur); err != nil {
		return store.Cluster{}, err
	}
	if b.Cluster.Shards != cur.Shards || b.Cluster.Partitions != cur.Partitions {
		return store.Cluster{}, fmt.Errorf("backup of a cluster with %d shards/%d partitions; this one has %d/%d",
			b.Cluster.Shards, b.Cluster.Partitions, cur.Shards, cur.Partitions)
	}
	// Epoch E+1's buckets keep as many revisions per key as E's (fault tests keep them all).
	keep := make([]int64, cur.Partitions)
	for p := uint32(0); p < cur.Partitions; p++ {
		stream, err := s.js.Stream(ctx, "KV_"+store.DataBucket(cur.Epoch, p))
		if err != nil {
			return store.Cluster{}, err
		}
		info, err := stream.Info(ctx)
		if err != nil {
			return store.Cluster{}, err
		}
		keep[p] = max(info.Config.MaxMsgsPerSubject, 1)
	}
	if !opt.SkipSeal {
		if err := s.Seal(ctx, cur); err != nil {
			return store.Cluster{}, err
		}
	}
	next := cur
	next.Epoch++
	// Epoch E+1 is not recorded yet: its buckets may be (re)created, e.g. after a failed restore.
	for p := uint32(0); p < next.Partitions; p++ {
		name := store.DataBucket(next.Epoch, p)
		if err := s.js.DeleteKeyValue(ctx, name); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
			return store.Cluster{}, fmt.Errorf("clear %s: %w", name, err)
		}
		s.mu.Lock()
		delete(s.buckets, name)
		s.mu.Unlock()
		if err := s.createBucket(ctx, jetstream.KeyValueConfig{Bucket: name,
			History: uint8(min(keep[p], 64)), MaxValueSize: store.MaxRecordBytes + 1024}); err != nil {
			return store.Cluster{}, err
		}
		if keep[p] > 64 {
			if err := s.setHistory(ctx, name, keep[p]); err != nil {
				return store.Cluster{}, err
			}
		}
	}
	bucketOf := func(key string) (jetstream.KeyValue, error) {
		var sh uint32
		if _, err := fmt.Sscanf(key[strings.IndexByte(key, '.')+1:], "%d", &sh); err != nil {
			return nil, fmt.Errorf("key %q: %w", key, err)
		}
		return s.kv(ctx, store.DataBucket(next.Epoch, sh%next.Partitions))
	}
	done := 0
	put := func(e BackupEntry) error {
		kv, err := bucketOf(e.Key)
		if err != nil {
			return err
		}
		if _, err := kv.Put(ctx, e.Key, e.Value); err != nil {
			return fmt.Errorf("restore %s: %w", e.Key, err)
		}
		done++
		if opt.Progress != nil && done%500 == 0 {
			opt.Progress(done, len(b.Entries))
		}
		return nil
	}
	for _, e := range b.Entries {
		if strings.HasPrefix(e.Key, "shard.") && !opt.KeepShardRevision {
			continue
		}
		if err := put(e); err != nil {
			return store.Cluster{}, err
		}
	}
	if !opt.KeepShardRevision {
		// Rewritten after every restored record, so every token of E+1 is above every restored
		// revision; unassigned, so the coordinator grants each shard to a live session.
		free, _ := json.Marshal(store.Assignment{})
		for sh := uint32(0); sh < next.Shards; sh++ {
			if err := put(BackupEntry{Key: store.ShardKey(sh), Value: free}); err != nil {
				return store.Cluster{}, err
			}
		}
	}
	v, _ := json.Marshal(next)
	if _, err := ctl.Update(ctx, store.ClusterKey, v, ce.Revision()); err != nil {
		return store.Cluster{}, fmt.Errorf("set epoch %d: %w", next.Epoch, err)
	}
	s.mu.Lock()
	s.cluster = &next
	s.mu.Unlock()
	return next, nil
}
