package store

import (
	"bytes"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tickfence/tickfence/internal/mpscan"
)

// SchemaVersion is the version of the instance record encoding written by this code.
const SchemaVersion = 1

// Size limits. A record or command over its limit is refused before anything is stored.
const (
	MaxRecordBytes  = 256 << 10
	MaxCommandBytes = 16 << 10
	// RequestWindow is how many recent request IDs a record remembers (DESIGN: at least 128).
	RequestWindow = 128
)

// Record is the value of inst.<S>.<id>, encoded as a msgpack map (DESIGN.md section 3).
type Record struct {
	V     int    `msgpack:"v"`
	Token uint64 `msgpack:"token"`
	Tick  uint64 `msgpack:"tick"`
	Kind  string `msgpack:"kind"`
	// State is the game's own msgpack encoding of the instance; empty right after Create.
	State []byte `msgpack:"state"`
	// Reqs are the most recent applied requests, oldest first.
	Reqs []Request `msgpack:"reqs"`
	// Create is the msgpack body of the create command, kept while State is empty (a Create
	// placeholder whose initial write is uncertain): a rebuild makes the instance from it.
	Create []byte `msgpack:"create,omitempty"`
	// Ended marks a tombstone: the instance was ended; the record keeps its request window so a
	// retransmitted end gets its first answer and never ends a later instance of the same ID.
	Ended bool `msgpack:"ended,omitempty"`
	// EndedAt is the owner's wall clock (Unix ms) when it ended: only to expire the tombstone.
	EndedAt int64 `msgpack:"ended_at,omitempty"`
}

// Request remembers one applied command: a retransmission with the same ID and fingerprint gets
// Result again; the same ID with another fingerprint is refused.
type Request struct {
	ID          string `msgpack:"id"`
	Fingerprint uint64 `msgpack:"fp"`
	// Result is the encoded reply (msgpack) that was sent the first time.
	Result []byte `msgpack:"res"`
}

// FindRequest returns the remembered request with that ID, if any.
func (r *Record) FindRequest(id string) (Request, bool) {
	for i := len(r.Reqs) - 1; i >= 0; i-- {
		if r.Reqs[i].ID == id {
			return r.Reqs[i], true
		}
	}
	return Request{}, false
}

// RememberRequest appends a request, keeping the last RequestWindow.
func (r *Record) RememberRequest(q Request) {
	r.Reqs = append(r.Reqs, q)
	if n := len(r.Reqs) - RequestWindow; n > 0 {
		r.Reqs = append(r.Reqs[:0:0], r.Reqs[n:]...)
	}
}

// EncodeRecord encodes a record at the current schema version; ErrTooLarge over MaxRecordBytes.
func EncodeRecord(r Record) ([]byte, error) {
	r.V = SchemaVersion
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(true)
	if err := enc.Encode(&r); err != nil {
		return nil, fmt.Errorf("encode record: %w", err)
	}
	if buf.Len() > MaxRecordBytes {
		return nil, fmt.Errorf("%w: record is %d bytes, limit %d", ErrTooLarge, buf.Len(), MaxRecordBytes)
	}
	return buf.Bytes(), nil
}

// DecodeRecord decodes and validates a record. Any malformed input gives an error wrapping
// ErrBadRecord (or ErrTooLarge), never a panic.
func DecodeRecord(b []byte) (Record, error) {
	var r Record
	if len(b) > MaxRecordBytes {
		return r, fmt.Errorf("%w: record is %d bytes, limit %d", ErrTooLarge, len(b), MaxRecordBytes)
	}
	if err := mpscan.Check(b); err != nil {
		return r, fmt.Errorf("%w: %v", ErrBadRecord, err)
	}
	rd := bytes.NewReader(b) // a ByteScanner: the decoder reads it directly, so Len is exact
	if err := msgpack.NewDecoder(rd).Decode(&r); err != nil {
		return Record{}, fmt.Errorf("%w: %v", ErrBadRecord, err)
	}
	if rd.Len() != 0 {
		return Record{}, fmt.Errorf("%w: trailing bytes", ErrBadRecord)
	}
	if r.V != SchemaVersion {
		return Record{}, fmt.Errorf("%w: schema version %d, this build reads %d", ErrBadRecord, r.V, SchemaVersion)
	}
	if r.Kind == "" {
		return Record{}, fmt.Errorf("%w: no kind", ErrBadRecord)
	}
	if len(r.Reqs) > 4*RequestWindow {
		return Record{}, fmt.Errorf("%w: %d remembered requests", ErrBadRecord, len(r.Reqs))
	}
	return r, nil
}
