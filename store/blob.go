package store

import (
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
