package coordinator

import (
	"context"
	"log/slog"
	"time"

	"github.com/tickfence/tickfence/store"
)

// The coordinator leader collects unreferenced blobs (DESIGN 8): one collector per cluster, so the
// reference scan (every record of the live epoch) is paid once per interval, not once per node.
// Its safety does not rest on being the only one — a collection deletes only blobs no record of
// the live epoch points at that are older than the grace period, and tickctl gc may run beside
// it — so a deposed leader's collection that finishes late is harmless.

// DefaultBlobGCEvery is the interval between the leader's blob collections.
const DefaultBlobGCEvery = 10 * time.Minute

// collectBlobs runs cfg.CollectBlobs every cfg.BlobGCEvery while ctx (the leadership) lasts, the
// first one an interval after the election (a leader that flaps collects nothing more often).
func collectBlobs(ctx context.Context, cfg Config, log *slog.Logger) {
	log = log.With("task", "blob_gc")
	shards := uint32(0)
	if cl, err := cfg.Store.Cluster(ctx); err == nil {
		shards = cl.Shards
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-cfg.Clock.After(cfg.BlobGCEvery):
		}
		began := cfg.Clock.Monotonic()
		res, err := cfg.CollectBlobs(ctx)
		took := cfg.Clock.Monotonic() - began
		cfg.metrics.BlobGCSeconds.Observe(took.Seconds())
		if err != nil {
			if ctx.Err() != nil {
				return // the leadership ended mid-collection
			}
			cfg.metrics.BlobGCRuns.WithLabelValues("error").Inc()
			log.Warn("blob collection failed; trying again next interval", "err", err, "took", took, "next_in", cfg.BlobGCEvery)
			continue
		}
		cfg.metrics.BlobGCObserve(res, cfg.Clock.Now())
		for _, name := range res.Deleted {
			id := store.BlobOwner(name)
			args := []any{"instance", id, "blob", name}
			if shards > 0 && store.ValidID(id) == nil {
				args = append(args, "shard", store.ShardOf(id, shards))
			}
			log.Debug("blob collected", args...)
		}
		log.Info("blob collection", "objects", res.Objects, "referenced", res.Referenced, "young", res.Young,
			"deleted", len(res.Deleted), "deleted_bytes", res.DeletedBytes, "orphan_chunks", res.OrphanChunks, "took", took)
	}
}
