package store

import (
	"context"
	"errors"
	"fmt"
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

// MoveStateToBlob prepares a record for a fenced write under g: a state over BlobThreshold is
// uploaded first, under a name never used before, and the record keeps only the pointer; a
// smaller state stays inline (and any pointer a loaded record carried is dropped). The upload
// happens before the fenced write: a zombie's upload may land but is never referenced.
func MoveStateToBlob(rec *Record, g Grant, id string, blobs Blobs) error {
	if len(rec.State) <= BlobThreshold {
		rec.Blob = nil
		return nil
	}
	if len(rec.State) > MaxBlobBytes {
		return fmt.Errorf("%w: state of %s is %d bytes, limit %d", ErrTooLarge, id, len(rec.State), MaxBlobBytes)
	}
	name := BlobName(id, g.Epoch, g.Token, rec.Tick)
	digest, err := blobs.PutBlob(name, rec.State)
	if err != nil {
		// The record was not written: a definite refusal, the writer keeps its token.
		return fmt.Errorf("%w: upload the state of %s to %s: %v", ErrRefused, id, name, err)
	}
	rec.Blob = &BlobRef{Name: name, Digest: digest, Size: len(rec.State)}
	rec.State = nil
	return nil
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

// BlobInfo is one object of BlobBucket, for garbage collection.
type BlobInfo struct {
	Name     string
	Size     int
	Modified time.Time
}

// GCResult is what a garbage collection of blobs found and did.
type GCResult struct {
	Objects    int      `json:"objects"`
	Referenced int      `json:"referenced"`
	Young      int      `json:"young"` // unreferenced but within the grace period
	Deleted    []string `json:"deleted"`
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
	}
	return res, nil
}
