package natskv

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

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
	obs, _, _, err := s.openBlobs(ctx)
	return obs, err
}

// The blobs bucket's stream and subjects, as the Object Store lays them out (nats.go jetstream).
const (
	blobStream   = "OBJ_" + store.BlobBucket
	blobChunks   = "$O." + store.BlobBucket + ".C." // + the object's NUID
	blobMetas    = "$O." + store.BlobBucket + ".M." // + its name, base64url
	blobChunkLen = 128 << 10                        // the Object Store's default chunk
)

func blobMetaSubject(name string) string {
	return blobMetas + base64.URLEncoding.EncodeToString([]byte(name))
}

// blobStreamConfig is the stream of the blobs bucket: an Object Store's, but refusing roll-ups.
// An Object Store's put rolls its meta subject up (Nats-Rollup: sub), so its stream allows
// roll-ups, and then any publish there with Nats-Rollup: all empties the whole bucket — one
// message from anyone who may upload a blob (a node's credential). tickfence writes each object
// once (putBlob: no roll-up needed) and deletes by purge (admin's), so the stream takes none.
func blobStreamConfig(replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        blobStream,
		Description: "tickfence: instance states too large for a record (DESIGN 8)",
		Subjects:    []string{blobChunks + ">", blobMetas + ">"},
		MaxBytes:    -1,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
		Discard:     jetstream.DiscardNew,
		AllowDirect: true,
		AllowRollup: false,
	}
}

// openBlobs opens the Object Store bucket of large states, creating it if it is missing (an
// OpenOnly store does not: ErrNotInitialised), and says what it did: StepCreated, StepExists, or
// StepUpdated (a bucket made before roll-ups were refused now refuses them; an OpenOnly store,
// which may not, leaves it and says so in the note).
func (s *Store) openBlobs(ctx context.Context) (obs jetstream.ObjectStore, state, note string, err error) {
	state = StepExists
	st, err := s.js.Stream(ctx, blobStream)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound) && s.opts.OpenOnly:
		return nil, "", "", fmt.Errorf("object store %s: not found: %w", store.BlobBucket, ErrNotInitialised)
	case errors.Is(err, jetstream.ErrStreamNotFound):
		_, err = s.js.CreateStream(ctx, blobStreamConfig(s.replicas()))
		if err == nil {
			state = StepCreated
		} else if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			err = nil // made meanwhile
		}
	case err == nil && st.CachedInfo().Config.AllowRollup && !st.CachedInfo().Config.Sealed:
		if s.opts.OpenOnly {
			note = "takes roll-ups: whoever may upload a blob may empty it (run tickctl cluster init as admin)"
			break
		}
		cfg := st.CachedInfo().Config
		cfg.AllowRollup = false
		if _, err = s.js.UpdateStream(ctx, cfg); err == nil {
			state, note = StepUpdated, "roll-ups refused (one publish with Nats-Rollup: all would empty it)"
		}
	}
	// Found or made a moment ago (on a forming cluster its stream may not be found for a moment
	// more, as madeInfo says): bound, asking again.
	for deadline := time.Now().Add(madeWait); err == nil; {
		obs, err = s.js.ObjectStore(ctx, store.BlobBucket)
		if !errors.Is(err, jetstream.ErrBucketNotFound) || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		err = nil
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return nil, "", "", fmt.Errorf("object store %s: %w", store.BlobBucket, err)
	}
	s.mu.Lock()
	s.objects = obs
	s.mu.Unlock()
	return obs, state, note, nil
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
		digest, err := b.s.putBlob(ctx, name, data)
		if err == nil {
			return digest, nil
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

// putBlob uploads an object the way the Object Store lays it out (chunks on a subject of a new
// NUID, then the meta naming them), readable by any Object Store client, but without a roll-up:
// the meta is published only if its subject holds nothing (expected last subject sequence 0), so
// a name is written once. Uploading a name again with the same bytes (a restore putting back a
// blob still there) succeeds; with other bytes it fails.
func (s *Store) putBlob(ctx context.Context, name string, data []byte) (string, error) {
	if _, err := s.blobStore(ctx); err != nil {
		return "", err
	}
	id := nuid.Next()
	chunks := blobChunks + id
	futs := make([]jetstream.PubAckFuture, 0, len(data)/blobChunkLen+1)
	n := 0
	for off := 0; off < len(data); off += blobChunkLen {
		f, err := s.js.PublishMsgAsync(&nats.Msg{Subject: chunks, Data: data[off:min(off+blobChunkLen, len(data))]})
		if err != nil {
			return "", err
		}
		futs = append(futs, f)
		n++
	}
	for _, f := range futs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return "", fmt.Errorf("upload blob %s: %w", name, err)
		case <-ctx.Done():
			return "", fmt.Errorf("upload blob %s: %w", name, ctx.Err())
		}
	}
	digest := store.BlobDigest(data)
	meta, err := json.Marshal(jetstream.ObjectInfo{
		ObjectMeta: jetstream.ObjectMeta{Name: name, Opts: &jetstream.ObjectMetaOptions{ChunkSize: blobChunkLen}},
		Bucket:     store.BlobBucket, NUID: id, Size: uint64(len(data)), Chunks: uint32(n), Digest: digest})
	if err != nil {
		return "", err
	}
	subj := blobMetaSubject(name)
	_, err = s.js.PublishMsg(ctx, &nats.Msg{Subject: subj, Data: meta}, jetstream.WithExpectLastSequencePerSubject(0))
	if apiCode(err) == codeWrongLast {
		// The name is taken: by these bytes (a restore putting back a blob still there) or not.
		// Same bytes: the meta is published again over the one there (compare on its sequence),
		// so the object is new to a collector that listed the old one (its modification time
		// moves on); the old chunks are left to the collector's sweep of unreferenced chunks.
		seq, in, gerr := s.lastBlobMeta(ctx, subj)
		if gerr == nil && !in.Deleted && in.Digest == digest && in.Size == uint64(len(data)) {
			_, err = s.js.PublishMsg(ctx, &nats.Msg{Subject: subj, Data: meta}, jetstream.WithExpectLastSequencePerSubject(seq))
		} else {
			return "", fmt.Errorf("upload blob %s: the name holds another object (%v): %w", name, gerr, err)
		}
	}
	if err != nil {
		return "", fmt.Errorf("upload blob %s: %w", name, err)
	}
	return digest, nil
}

// lastBlobMeta is the last meta message on an object's meta subject: its sequence and content.
func (s *Store) lastBlobMeta(ctx context.Context, subj string) (uint64, jetstream.ObjectInfo, error) {
	var in jetstream.ObjectInfo
	st, err := s.js.Stream(ctx, blobStream)
	if err != nil {
		return 0, in, err
	}
	m, err := st.GetLastMsgForSubject(ctx, subj)
	if err != nil {
		return 0, in, err
	}
	if err := json.Unmarshal(m.Data, &in); err != nil {
		return 0, in, fmt.Errorf("object meta on %s: %w", subj, err)
	}
	return m.Sequence, in, nil
}

// purgeBlobSubject purges one subject of the blobs bucket (a purge is admin's: refused to a node).
func (s *Store) purgeBlobSubject(ctx context.Context, subject string) error {
	st, err := s.js.Stream(ctx, blobStream)
	if err != nil {
		return err
	}
	return st.Purge(ctx, jetstream.WithPurgeSubject(subject))
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
// referenced one (store.CollectBlobs), then the chunks no object names once their last message is
// older than grace (an upload that never published its meta: a writer that died or timed out
// half-way, a name uploaded again); dryRun reports without deleting.
func (s *Store) CollectBlobs(ctx context.Context, grace time.Duration, dryRun bool) (store.GCResult, error) {
	now := time.Now()
	res, err := store.CollectBlobs(ctx, catalog{s}, now, grace, dryRun)
	if err != nil {
		return res, err
	}
	res.OrphanChunks, err = s.collectChunks(ctx, now, grace, dryRun)
	return res, err
}

// collectChunks purges the chunk subjects of the blobs bucket that no object's meta names and
// whose last chunk is older than grace at now. The chunks are listed before the metas: an upload
// that publishes its meta in between is seen; one that has not yet is younger than grace.
func (s *Store) collectChunks(ctx context.Context, now time.Time, grace time.Duration, dryRun bool) (int, error) {
	st, err := s.js.Stream(ctx, blobStream)
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(blobChunks+">"))
	if err != nil {
		return 0, fmt.Errorf("list blob chunks: %w", err)
	}
	if len(info.State.Subjects) == 0 {
		return 0, nil
	}
	obs, err := s.blobStore(ctx)
	if err != nil {
		return 0, err
	}
	objs, err := obs.List(ctx, jetstream.ListObjectsShowDeleted())
	if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
		return 0, fmt.Errorf("list blobs: %w", err)
	}
	named := make(map[string]bool, len(objs))
	for _, o := range objs {
		if !o.Deleted {
			named[blobChunks+o.NUID] = true
		}
	}
	n := 0
	for subj := range info.State.Subjects {
		if named[subj] {
			continue
		}
		m, err := st.GetLastMsgForSubject(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return n, err
		}
		if now.Sub(m.Time) < grace {
			continue // an upload on its way
		}
		if !dryRun {
			if err := st.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
				return n, fmt.Errorf("purge unreferenced chunks %s: %w", subj, err)
			}
		}
		n++
	}
	return n, nil
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

// DeleteBlob purges the object's chunks, then its meta (no roll-up: the stream takes none); a
// collection stopped between the two finds the meta again, and purges the chunks' subject again.
func (c catalog) DeleteBlob(ctx context.Context, name string) error {
	obs, err := c.s.blobStore(ctx)
	if err != nil {
		return err
	}
	in, err := obs.GetInfo(ctx, name, jetstream.GetObjectInfoShowDeleted())
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if in.NUID != "" {
		if err := c.s.purgeBlobSubject(ctx, blobChunks+in.NUID); err != nil {
			return err
		}
	}
	return c.s.purgeBlobSubject(ctx, blobMetaSubject(name))
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
