package natskv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickfence/tickfence/store"
)

// blobStore returns the Object Store bucket of large states, creating it on first use.
func (s *Store) blobStore(ctx context.Context) (jetstream.ObjectStore, error) {
	s.mu.Lock()
	obs := s.objects
	s.mu.Unlock()
	if obs != nil {
		return obs, nil
	}
	obs, err := s.js.ObjectStore(ctx, store.BlobBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		obs, err = s.js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: store.BlobBucket,
			Description: "tickfence: instance states too large for a record (DESIGN 8)",
			Storage:     jetstream.FileStorage, Replicas: s.opts.Replicas})
		if errors.Is(err, jetstream.ErrBucketExists) {
			obs, err = s.js.ObjectStore(ctx, store.BlobBucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("object store %s: %w", store.BlobBucket, err)
	}
	s.mu.Lock()
	s.objects = obs
	s.mu.Unlock()
	return obs, nil
}

// blobs is store.Blobs on the Object Store, for one call's context.
type blobs struct {
	ctx context.Context
	s   *Store
}

func (b blobs) PutBlob(name string, data []byte) (string, error) {
	ctx := b.ctx
	if _, ok := ctx.Deadline(); !ok { // a pipelined write has no context of its own
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, b.s.opts.AckTimeout)
		defer cancel()
	}
	obs, err := b.s.blobStore(ctx)
	if err != nil {
		return "", err
	}
	info, err := obs.PutBytes(ctx, name, data)
	if err != nil {
		return "", err
	}
	return info.Digest, nil
}

func (b blobs) GetBlob(name string) ([]byte, error) {
	obs, err := b.s.blobStore(b.ctx)
	if err != nil {
		return nil, err
	}
	return obs.GetBytes(b.ctx, name)
}

// CollectBlobs deletes the blobs no current record references that are older than grace (a
// blob younger than that may belong to a write still on its way, or to a record a backup holds);
// never a referenced one. dryRun reports without deleting.
func (s *Store) CollectBlobs(ctx context.Context, grace time.Duration, dryRun bool) (store.GCResult, error) {
	res := store.GCResult{Deleted: []string{}}
	epoch, err := s.quietEpoch(ctx)
	if err != nil {
		return res, err
	}
	obs, err := s.blobStore(ctx)
	if err != nil {
		return res, err
	}
	infos, err := obs.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return res, nil
	}
	if err != nil {
		return res, err
	}
	// The references are read after the listing: a blob uploaded after the listing is not in
	// it, and one referenced by a record written since is among the references.
	refs, err := s.blobRefs(ctx, epoch)
	if err != nil {
		return res, err
	}
	// A restore that started meanwhile may have uploaded again a blob listed above as old and
	// unreferenced, for the epoch it is about to commit: then collect nothing.
	if e2, err := s.quietEpoch(ctx); err != nil || e2 != epoch {
		if err == nil {
			err = fmt.Errorf("the cluster moved from epoch %d to %d during the collection; run it again", epoch, e2)
		}
		return res, err
	}
	now := time.Now()
	for _, in := range infos {
		res.Objects++
		switch {
		case refs[in.Name]:
			res.Referenced++
		case now.Sub(in.ModTime) < grace:
			res.Young++
		default:
			if cur, err := obs.GetInfo(ctx, in.Name); err == nil && !cur.ModTime.Equal(in.ModTime) {
				res.Young++ // uploaded again since the listing
				continue
			}
			if !dryRun {
				if err := obs.Delete(ctx, in.Name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
					return res, fmt.Errorf("delete blob %s: %w", in.Name, err)
				}
			}
			res.Deleted = append(res.Deleted, in.Name)
		}
	}
	return res, nil
}

// quietEpoch is the cluster's epoch, read from the stream leader, when no restore holds its
// claim (a collection then would race the blobs the restore puts back).
func (s *Store) quietEpoch(ctx context.Context) (uint64, error) {
	if e, err := s.LatestControl(ctx, store.RestoreKey); err == nil {
		return 0, fmt.Errorf("a restore holds its claim (%s): collect blobs after it ends", e.Value)
	} else if !errors.Is(err, store.ErrNotFound) {
		return 0, err
	}
	e, err := s.LatestControl(ctx, store.ClusterKey)
	if err != nil {
		return 0, err
	}
	var c store.Cluster
	if err := json.Unmarshal(e.Value, &c); err != nil {
		return 0, fmt.Errorf("cluster record: %w", err)
	}
	return c.Epoch, nil
}

// blobRefs is the set of blob names the records of an epoch point at.
func (s *Store) blobRefs(ctx context.Context, epoch uint64) (map[string]bool, error) {
	c, err := s.Cluster(ctx)
	if err != nil {
		return nil, err
	}
	c.Epoch = epoch
	refs := map[string]bool{}
	for sh := uint32(0); sh < c.Shards; sh++ {
		ids, err := s.Instances(ctx, c.Epoch, sh)
		if err != nil {
			return nil, err
		}
		kv, _, err := s.dataKV(ctx, c.Epoch, sh)
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			e, err := kv.Get(ctx, store.InstanceKey(sh, id))
			if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
				continue
			}
			if err != nil {
				return nil, err
			}
			r, err := store.DecodeRecord(e.Value())
			if err != nil {
				return nil, fmt.Errorf("instance %s: %w (not collecting: a record that cannot be read may point at a blob)", id, err)
			}
			if r.Blob != nil {
				refs[r.Blob.Name] = true
			}
		}
	}
	return refs, nil
}

// Blobs implements store.Epochs.
func (s *Store) Blobs(ctx context.Context) store.Blobs { return blobs{ctx: ctx, s: s} }
