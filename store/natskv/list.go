package natskv

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickfence/tickfence/store"
)

var _ store.Lister = (*Store)(nil)

// ListRecords implements store.Lister: one watch of inst.> per data bucket of the epoch, which
// delivers every live record once (an ordered consumer, which a replica may serve). A state kept
// as a blob is not read.
func (s *Store) ListRecords(ctx context.Context, epoch uint64, fn func(store.Listed) error) error {
	cl, err := s.Cluster(ctx)
	if err != nil {
		return err
	}
	for p := range cl.Partitions {
		name := store.DataBucket(epoch, p)
		kv, err := s.kv(ctx, name)
		if err != nil {
			return fmt.Errorf("list %s: %w", name, err)
		}
		w, err := kv.Watch(ctx, "inst.>", jetstream.IgnoreDeletes())
		if err != nil {
			return fmt.Errorf("list %s: %w", name, err)
		}
		err = initialValues(ctx, w, "list "+name, func(e jetstream.KeyValueEntry) error {
			rest, ok := strings.CutPrefix(e.Key(), "inst.")
			sh, id, ok2 := strings.Cut(rest, ".")
			n, perr := strconv.ParseUint(sh, 10, 32)
			if !ok || !ok2 || perr != nil {
				return nil // not an instance key
			}
			l := store.Listed{Shard: uint32(n), ID: id, Revision: e.Revision()}
			rec, derr := store.DecodeRecord(e.Value())
			if derr != nil {
				l.Err = fmt.Errorf("instance %s at revision %d: %w", id, e.Revision(), derr)
			} else {
				l.Record = rec
			}
			return fn(l)
		})
		if err != nil {
			return err
		}
	}
	return nil
}
