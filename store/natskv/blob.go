package natskv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
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
	obs, _, err := s.openBlobs(ctx)
	return obs, err
}

// openBlobs opens the Object Store bucket of large states, creating it if it is missing (an
// OpenOnly store does not: ErrNotInitialised), and says whether it did.
func (s *Store) openBlobs(ctx context.Context) (jetstream.ObjectStore, bool, error) {
	created := false
	obs, err := s.js.ObjectStore(ctx, store.BlobBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) && s.opts.OpenOnly {
		return nil, false, fmt.Errorf("object store %s: not found: %w", store.BlobBucket, ErrNotInitialised)
	}
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		created = true
		obs, err = s.js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: store.BlobBucket,
			Description: "tickfence: instance states too large for a record (DESIGN 8)",
			Storage:     jetstream.FileStorage, Replicas: s.replicas()})
		if errors.Is(err, jetstream.ErrBucketExists) {
			created = false
			obs, err = s.js.ObjectStore(ctx, store.BlobBucket)
		}
	}
	if err != nil {
		return nil, false, fmt.Errorf("object store %s: %w", store.BlobBucket, err)
	}
	s.mu.Lock()
	s.objects = obs
	s.mu.Unlock()
	return obs, created, nil
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
	// "No responders" stores nothing: on a cluster it answers a request that reached a server
	// before the interest of a stream made a moment ago had crossed the routes. Try again.
	for backoff := 10 * time.Millisecond; ; backoff = min(2*backoff, 200*time.Millisecond) {
		obs, err := b.s.blobStore(ctx)
		var info *jetstream.ObjectInfo
		if err == nil {
			info, err = obs.PutBytes(ctx, name, data)
		}
		if err == nil {
			return info.Digest, nil
		}
		if !errors.Is(err, nats.ErrNoResponders) {
			return "", err
		}
		select {
		case <-ctx.Done():
			return "", err
		case <-time.After(backoff):
		}
	}
}

func (b blobs) GetBlob(name string) ([]byte, error) {
	obs, err := b.s.blobStore(b.ctx)
	if err != nil {
		return nil, err
	}
	return obs.GetBytes(b.ctx, name)
}

// BlobStats is what this store uploaded, and the large writes that uploaded nothing.
func (s *Store) BlobStats() store.BlobStats { return s.blobWriter.Stats() }

// CollectBlobs deletes the blobs no current record references once older than grace, never a
// referenced one (store.CollectBlobs); dryRun reports without deleting.
func (s *Store) CollectBlobs(ctx context.Context, grace time.Duration, dryRun bool) (store.GCResult, error) {
	return store.CollectBlobs(ctx, catalog{s}, time.Now(), grace, dryRun)
}

// catalog is store.BlobCatalog on JetStream.
type catalog struct{ s *Store }

func (c catalog) QuietEpoch(ctx context.Context) (uint64, error) { return c.s.quietEpoch(ctx) }

func (c catalog) BlobRefs(ctx context.Context, epoch uint64) (map[string]bool, error) {
	return c.s.blobRefs(ctx, epoch)
}

func (c catalog) ListBlobs(ctx context.Context) ([]store.BlobInfo, error) {
	obs, err := c.s.blobStore(ctx)
	if err != nil {
		return nil, err
	}
	infos, err := obs.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil
	}
	out := make([]store.BlobInfo, 0, len(infos))
	for _, in := range infos {
		out = append(out, store.BlobInfo{Name: in.Name, Size: int(in.Size), Modified: in.ModTime})
	}
	return out, err
}

func (c catalog) BlobModified(ctx context.Context, name string) (time.Time, bool, error) {
	obs, err := c.s.blobStore(ctx)
	if err != nil {
		return time.Time{}, false, err
	}
	in, err := obs.GetInfo(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, err
	}
	return in.ModTime, true, nil
}

func (c catalog) DeleteBlob(ctx context.Context, name string) error {
	obs, err := c.s.blobStore(ctx)
	if err != nil {
		return err
	}
	if err := obs.Delete(ctx, name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return err
	}
	return nil
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
