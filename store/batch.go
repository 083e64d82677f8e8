package store

import "errors"

// BatchWrite is one instance's record in a WriteBatch.
type BatchWrite struct {
	ID  string
	Rec Record
}

// Bounds of one WriteBatch (DESIGN 10). JetStream refuses an atomic batch of more than
// max_batch_size messages (1000 by default) and holds every staged batch until its commit; a
// caller splits bigger groups.
const (
	MaxBatchWrites = 256
	MaxBatchBytes  = 4 << 20
)

// ErrBatchesOff: the store cannot commit atomic batches there (a data stream created without
// atomic publishing, by an older tickd or by hand). Nothing was stored; the caller writes the
// records one by one instead. The error wraps ErrRefused too.
var ErrBatchesOff = errors.New("tickfence: atomic batches are not enabled on this data bucket")

// BatchWriter is implemented by stores that commit the fenced writes of several instances of
// one shard as one atomic batch, the fence on shard.<S> checked once for all of them (DESIGN 10:
// the write strategy of a replicated stream, whose leader admits one fenced proposal per shard at
// a time).
type BatchWriter interface {
	// WriteBatch writes every record of writes (distinct instances of g's shard, at most
	// MaxBatchWrites, together at most MaxBatchBytes) under g's fence. It returns at once and
	// calls done exactly once for each write (i indexes writes), from any goroutine, possibly
	// before it returns. A write refused before it was sent (an invalid ID, a record over its
	// limit) gets its own error and leaves the batch; the others are committed atomically: they
	// all get the same outcome — stored (each with its revision), refused (stale owner, sealed,
	// ErrRefused) or unknown — and so never partly.
	WriteBatch(g Grant, writes []BatchWrite, done func(i int, rev uint64, err error))
}
