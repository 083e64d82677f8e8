package natskv

import (
	"context"
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
	refs, err := s.blobRefs(ctx)
	if err != nil {
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

// blobRefs is the set of blob names the current epoch's records point at.
func (s *Store) blobRefs(ctx context.Context) (map[string]bool, error) {
	c, err := s.Cluster(ctx)
	if err != nil {
		return nil, err
	}
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
