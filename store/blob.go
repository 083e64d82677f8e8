package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ErrBlobMissing: a record points at a blob the Object Store does not hold (or holds with another
// digest). The record is not usable; nothing is guessed.
var ErrBlobMissing = errors.New("tickfence: the state's blob is missing or does not match its digest")

// Blobs is what a backend keeps large states in: BlobBucket of the Object Store on JetStream, a
// map in memory.
type Blobs interface {
	PutBlob(name string, data []byte) (digest string, err error)
	GetBlob(name string) ([]byte, error)
}

// BlobWriter prepares the records of a backend's fenced writes (DESIGN 8): a state over
// BlobThreshold goes to a blob, uploaded before the write, under a name never used before — but
// only when its bytes changed. It remembers, per instance, the pointer of the last record it knows
// is stored under the writer's token (an acknowledged write, a registration); a state with that
// pointer's digest and size keeps the pointer, and nothing is uploaded. The pointer is still only
// what the fenced write commits: the fence decides whether the record that keeps it is stored.
//
// Why keeping a pointer is safe against the collector: the pointer is kept only while no other
// write of the instance is in flight and under the token of the write that stored it, so the
// record the kept pointer replaces is the one that already points at the blob — the blob is
// referenced, continuously, before and after the write. Anything less certain (an error, an
// unknown outcome, a new token, an end) forgets the pointer, and the next large state is uploaded.
// The zero value is ready to use.
type BlobWriter struct {
	mu     sync.Mutex
	shards map[blobShard]*shardBlobs

	uploads, uploadBytes, kept atomic.Uint64
}

type blobShard struct {
	epoch uint64
	shard uint32
}

// shardBlobs is what a BlobWriter knows of one shard's instances, under one token (the highest
// it has seen there: a lower one is a zombie's, which learns nothing and keeps nothing).
type shardBlobs struct {
	token uint64
	inst  map[string]*instBlob
}

// instBlob: the pointer of the instance's record at rev (nil: no blob, or not known) and the
// writes of it prepared and not settled.
type instBlob struct {
	rev      uint64
	ref      *BlobRef
	inflight int
}

// BlobStats counts a BlobWriter's work since it was made.
type BlobStats struct {
	Uploads     uint64 // blobs uploaded
	UploadBytes uint64 // their bytes
	Kept        uint64 // writes of a large state that kept the stored pointer (nothing uploaded)
}

// Stats is what w did so far.
func (w *BlobWriter) Stats() BlobStats {
	return BlobStats{Uploads: w.uploads.Load(), UploadBytes: w.uploadBytes.Load(), Kept: w.kept.Load()}
}

// entry is id's entry under g (made if missing), or nil if g's token is below the shard's; a
// higher token forgets the shard's entries. w.mu held.
func (w *BlobWriter) entry(g Grant, id string, make bool) *instBlob {
	k := blobShard{g.Epoch, g.Shard}
	sb := w.shards[k]
	switch {
	case sb == nil || g.Token > sb.token:
		if !make {
			return nil
		}
		if w.shards == nil {
			w.shards = map[blobShard]*shardBlobs{}
		}
		sb = &shardBlobs{token: g.Token, inst: map[string]*instBlob{}}
		w.shards[k] = sb
	case g.Token < sb.token:
		return nil
	}
	e := sb.inst[id]
	if e == nil && make {
		e = &instBlob{}
		sb.inst[id] = e
	}
	return e
}

// current reports whether e is still id's entry under g (not forgotten since).
func (w *BlobWriter) current(g Grant, id string, e *instBlob) bool {
	sb := w.shards[blobShard{g.Epoch, g.Shard}]
	return sb != nil && sb.token == g.Token && sb.inst[id] == e
}

// Prepare readies rec for a fenced write of id under g: a state over BlobThreshold is uploaded
// first (under BlobName: a zombie's upload may land but is never referenced) unless it is the
// state the stored record's pointer already holds, and the record keeps only the pointer; a
// smaller state stays inline (and any pointer a loaded record carried is dropped). settle must be
// called once the write's outcome is known: err nil if it was stored at rev.
func (w *BlobWriter) Prepare(rec *Record, g Grant, id string, blobs Blobs) (settle func(rev uint64, err error), err error) {
	var ref, stored *BlobRef // the pointer kept; the pointer the record is written with
	if len(rec.State) > MaxBlobBytes {
		return nil, fmt.Errorf("%w: state of %s is %d bytes, limit %d", ErrTooLarge, id, len(rec.State), MaxBlobBytes)
	}
	large := len(rec.State) > BlobThreshold
	var digest string
	if large {
		digest = BlobDigest(rec.State)
	}
	w.mu.Lock()
	e := w.entry(g, id, true)
	if e != nil {
		if large && e.inflight == 0 && e.ref != nil && e.ref.Digest == digest && e.ref.Size == len(rec.State) {
			ref = e.ref
		}
		e.inflight++
	}
	w.mu.Unlock()
	settle = func(rev uint64, err error) {
		if e == nil {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if !w.current(g, id, e) {
			return
		}
		e.inflight--
		switch {
		case err != nil:
			e.ref = nil // stored or not: unknown here, so nothing is kept
		case rev > e.rev:
			e.rev, e.ref = rev, stored
		}
		if e.inflight == 0 && e.ref == nil {
			delete(w.shards[blobShard{g.Epoch, g.Shard}].inst, id)
		}
	}
	switch {
	case !large:
		rec.Blob = nil
		return settle, nil
	case ref != nil:
		w.kept.Add(1)
		stored = ref
		rec.Blob, rec.State = ref, nil
		return settle, nil
	}
	name := BlobName(id, g.Epoch, g.Token, rec.Tick)
	got, err := blobs.PutBlob(name, rec.State)
	if err == nil && got != digest {
		err = fmt.Errorf("the store reports digest %s, the state has %s", got, digest)
	}
	if err != nil {
		settle(0, err)
		// The record was not written: a definite refusal, the writer keeps its token.
		return nil, fmt.Errorf("%w: upload the state of %s to %s: %v", ErrRefused, id, name, err)
	}
	w.uploads.Add(1)
	w.uploadBytes.Add(uint64(len(rec.State)))
	stored = &BlobRef{Name: name, Digest: digest, Size: len(rec.State)}
	rec.Blob, rec.State = stored, nil
	return settle, nil
}

// Registered tells w that id's record stored at rev under g points at ref (nil: at no blob): a
// registration, which rewrites the loaded record with nothing changed but the token.
func (w *BlobWriter) Registered(g Grant, id string, rev uint64, ref *BlobRef) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e := w.entry(g, id, ref != nil)
	if e == nil || e.inflight > 0 || rev <= e.rev {
		return
	}
	if ref == nil {
		delete(w.shards[blobShard{g.Epoch, g.Shard}].inst, id)
		return
	}
	r := *ref
	e.rev, e.ref = rev, &r
}

// Forget drops what w knows of id under g's shard: its record is about to change in a way w does
// not follow (a delete marker, a creation).
func (w *BlobWriter) Forget(g Grant, id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if sb := w.shards[blobShard{g.Epoch, g.Shard}]; sb != nil {
		delete(sb.inst, id)
	}
}

// KeepBlobPointer prepares a loaded record to be stored again unchanged but for its token
// (Register): a state that came from a blob is not uploaded again, the pointer is kept.
func KeepBlobPointer(rec *Record) {
	if rec.Blob != nil {
		rec.State = nil
	}
}

// StateFromBlob fills a decoded record's State from its blob, checking size and digest.
func StateFromBlob(rec *Record, id string, blobs Blobs) error {
	if rec.Blob == nil {
		return nil
	}
	b, err := blobs.GetBlob(rec.Blob.Name)
	if err != nil {
		return fmt.Errorf("%w: %s of %s: %v", ErrBlobMissing, rec.Blob.Name, id, err)
	}
	if len(b) != rec.Blob.Size || BlobDigest(b) != rec.Blob.Digest {
		return fmt.Errorf("%w: %s of %s: %d bytes, %s; the record says %d bytes, %s", ErrBlobMissing,
			rec.Blob.Name, id, len(b), BlobDigest(b), rec.Blob.Size, rec.Blob.Digest)
	}
	rec.State = b
	return nil
}

// DefaultBlobGrace is how long an unreferenced blob is kept before a collection may delete it: far
// longer than a write takes from its upload to its record (a publish's timeout, seconds), so a
// write on its way never finds its blob gone, and than the clocks of a collector and the server
// that stamped the blob may differ.
const DefaultBlobGrace = time.Hour

// BlobInfo is one object of BlobBucket, for garbage collection.
type BlobInfo struct {
	Name     string
	Size     int
	Modified time.Time
}

// GCResult is what a garbage collection of blobs found and did.
type GCResult struct {
	Objects      int      `json:"objects"`
	Referenced   int      `json:"referenced"`
	Young        int      `json:"young"` // unreferenced but within the grace period
	Deleted      []string `json:"deleted"`
	DeletedBytes int64    `json:"deleted_bytes"`
	// OrphanChunks is the uploads whose chunks no object names (a writer that stopped half-way)
	// deleted, or found with a dry run (JetStream only).
	OrphanChunks int `json:"orphan_chunks,omitempty"`
}

// BlobCatalog is what a backend gives CollectBlobs: the steps that touch its storage.
type BlobCatalog interface {
	// QuietEpoch is the live epoch, read from the authoritative copy; an error while a restore
	// holds its claim (a collection then would race the blobs the restore puts back).
	QuietEpoch(ctx context.Context) (uint64, error)
	// ListBlobs lists BlobBucket.
	ListBlobs(ctx context.Context) ([]BlobInfo, error)
	// BlobRefs is the set of blob names the records of an epoch point at.
	BlobRefs(ctx context.Context, epoch uint64) (map[string]bool, error)
	// BlobModified is an object's modification time now (ok false: it is gone).
	BlobModified(ctx context.Context, name string) (t time.Time, ok bool, err error)
	DeleteBlob(ctx context.Context, name string) error
}

// CollectBlobs deletes the blobs no record of the live epoch references that are older than
// grace at now (a younger one may belong to a write still on its way), never a referenced one;
// dryRun reports without deleting. The references are read after the listing, so a blob uploaded
// meanwhile is either not listed or referenced; a restore that claims or commits meanwhile stops
// the collection, and an object uploaded again since the listing is kept.
func CollectBlobs(ctx context.Context, c BlobCatalog, now time.Time, grace time.Duration, dryRun bool) (GCResult, error) {
	res := GCResult{Deleted: []string{}}
	epoch, err := c.QuietEpoch(ctx)
	if err != nil {
		return res, err
	}
	objs, err := c.ListBlobs(ctx)
	if err != nil {
		return res, err
	}
	refs, err := c.BlobRefs(ctx, epoch)
	if err != nil {
		return res, err
	}
	if e2, err := c.QuietEpoch(ctx); err != nil || e2 != epoch {
		if err == nil {
			err = fmt.Errorf("the cluster moved from epoch %d to %d during the collection; run it again", epoch, e2)
		}
		return res, err
	}
	for _, o := range objs {
		res.Objects++
		switch {
		case refs[o.Name]:
			res.Referenced++
			continue
		case now.Sub(o.Modified) < grace:
			res.Young++
			continue
		}
		cur, ok, err := c.BlobModified(ctx, o.Name)
		switch {
		case err != nil:
			return res, err
		case !ok:
			continue // gone already
		case !cur.Equal(o.Modified):
			res.Young++ // uploaded again since the listing
			continue
		}
		if !dryRun {
			if err := c.DeleteBlob(ctx, o.Name); err != nil {
				return res, fmt.Errorf("delete blob %s: %w", o.Name, err)
			}
		}
		res.Deleted = append(res.Deleted, o.Name)
		res.DeletedBytes += int64(o.Size)
	}
	return res, nil
}
