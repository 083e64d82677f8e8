package natskv

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/tickfence/tickfence/store"
)

// Init makes a cluster's storage as its admin (DESIGN 9: only admin shapes storage), or checks
// the storage there is: the control bucket (with per-message TTL for the leases), the cluster
// record and the data buckets of its epoch (as Bootstrap makes them; want is the shape of a new
// cluster), roll-ups refused on the live epoch's data buckets (a bucket made before they were is
// updated), and the blobs bucket. It is idempotent: run again, it changes nothing and reports
// every part as StepExists (Options.Progress). check (if not nil) judges the cluster record
// found or made before anything else is changed (coordinator.CheckShape). The streams outside
// the store (effects, audit) are package clusterinit's, which calls this.
func (s *Store) Init(ctx context.Context, want store.Cluster, check func(store.Cluster) error) (store.Cluster, error) {
	if s.opts.OpenOnly {
		return store.Cluster{}, errors.New("natskv: an OpenOnly store cannot make storage: open one without OpenOnly, as admin")
	}
	c, err := s.Bootstrap(ctx, want)
	if err != nil {
		return store.Cluster{}, err
	}
	if check != nil {
		if err := check(c); err != nil {
			return store.Cluster{}, err
		}
	}
	if err := s.checkControl(ctx); err != nil {
		return store.Cluster{}, err
	}
	for p := range c.Partitions {
		if err := s.refuseRollups(ctx, store.DataBucket(c.Epoch, p)); err != nil {
			return store.Cluster{}, err
		}
	}
	if _, state, note, err := s.openBlobs(ctx); err != nil {
		return store.Cluster{}, err
	} else if state == StepCreated {
		s.step("blobs bucket", store.BlobBucket, StepCreated, fmt.Sprintf("%d replicas, no roll-ups", s.replicas()))
	} else {
		s.step("blobs bucket", store.BlobBucket, state, note)
	}
	return c, nil
}

// checkControl refuses a control bucket that is not tickfence's: its subjects, per-message TTL
// (leases expire) and no roll-ups (controlShape, which Bootstrap ran).
func (s *Store) checkControl(ctx context.Context) error {
	info, err := s.madeInfo(ctx, store.ControlBucket)
	if err != nil {
		return err
	}
	cfg := info.Config
	if want := []string{"$KV." + store.ControlBucket + ".>"}; !slices.Equal(cfg.Subjects, want) {
		return fmt.Errorf("control bucket %s: its stream captures %v, want %v: not made by tickfence", store.ControlBucket, cfg.Subjects, want)
	}
	if !cfg.AllowMsgTTL {
		return fmt.Errorf("control bucket %s has no per-message TTL: leases could not expire; "+
			"it was made by something else than tickfence (or a NATS server older than 2.11)", store.ControlBucket)
	}
	if cfg.AllowRollup {
		return fmt.Errorf("control bucket %s takes roll-ups: one publish with Nats-Rollup could empty it", store.ControlBucket)
	}
	return nil
}

// controlShape makes the control bucket take no roll-up (DESIGN 9: a node's or an operator's
// credential, which may put a key there, must not be able to purge the bucket with one
// Nats-Rollup header), keeping per-message TTL for the leases. A bucket made with delete markers
// for expired leases (LimitMarkerTTL, as nats.go makes a KV bucket with per-key TTL, and as
// tickfence did before) is updated: the server allows roll-ups wherever it writes markers, so
// the markers go, and watchers learn of an expiry from ControlWatch's own check instead.
func (s *Store) controlShape(ctx context.Context) (updated bool, err error) {
	info, err := s.madeInfo(ctx, store.ControlBucket)
	if err != nil {
		return false, err
	}
	cfg := info.Config
	if !cfg.AllowRollup && cfg.SubjectDeleteMarkerTTL == 0 && cfg.AllowMsgTTL {
		return false, nil
	}
	cfg.AllowRollup, cfg.SubjectDeleteMarkerTTL, cfg.AllowMsgTTL = false, 0, true
	if _, err := s.js.UpdateStream(ctx, cfg); err != nil {
		return false, fmt.Errorf("control bucket %s: refuse roll-ups: %w", store.ControlBucket, err)
	}
	return true, nil
}

// refuseRollups makes sure a data bucket's stream refuses roll-ups (createDataBucket), updating one
// made before it did; a sealed one is left as it is (it takes nothing any more).
func (s *Store) refuseRollups(ctx context.Context, bucket string) error {
	info, err := s.madeInfo(ctx, bucket)
	if err != nil {
		return err
	}
	cfg := info.Config
	s.mu.Lock()
	reported := s.reported[bucket]
	s.mu.Unlock()
	switch {
	case cfg.Sealed || !cfg.AllowRollup:
		if !reported {
			s.step("data bucket", bucket, StepExists, fmt.Sprintf("%d replicas, %d revisions per key", max(cfg.Replicas, 1), cfg.MaxMsgsPerSubject))
		}
		return nil
	}
	cfg.AllowRollup = false
	if _, err := s.js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("data bucket %s: refuse roll-ups: %w", bucket, err)
	}
	s.step("data bucket", bucket, StepUpdated, "roll-ups refused (a KV purge could erase a record's history)")
	return nil
}

// strayData refuses to make a new cluster record where data buckets the record would not name
// exist: another epoch's (the record was lost after a restore: making epoch want.Epoch again
// would bring back what the restore replaced), or partitions beyond want.Partitions (the record
// was lost and want names fewer partitions: shards would map to the wrong buckets). Buckets of
// want's epoch and partitions are a bootstrap that stopped before its record: they are bound.
func (s *Store) strayData(ctx context.Context, want store.Cluster) error {
	const prefix = "KV_tickfence-data-e" // store.DataBucket's names, as streams
	names := s.js.StreamNames(ctx)
	var stray []string
	for name := range names.Name() {
		rest, ok := strings.CutPrefix(name, prefix)
		if !ok {
			continue
		}
		var e uint64
		var p uint32
		if n, err := fmt.Sscanf(rest, "%d-p%d", &e, &p); n != 2 || err != nil || store.DataBucket(e, p) != strings.TrimPrefix(name, "KV_") {
			continue
		}
		if e != want.Epoch || p >= want.Partitions {
			stray = append(stray, strings.TrimPrefix(name, "KV_"))
		}
	}
	if err := names.Err(); err != nil {
		return fmt.Errorf("list streams: %w", err)
	}
	if len(stray) > 0 {
		slices.Sort(stray)
		return fmt.Errorf("the control bucket has no cluster record, but data buckets it would not name exist (%s): "+
			"the record was lost, not never made; making a new one (epoch %d, %d partitions) could serve stale or misplaced "+
			"records. Put the record back as admin (nats kv put %s %s '{\"shards\":S,\"partitions\":P,\"replicas\":R,\"epoch\":E}' "+
			"with the live epoch's values), or drop those buckets if they are garbage",
			strings.Join(stray, ", "), want.Epoch, want.Partitions, store.ControlBucket, store.ClusterKey)
	}
	return nil
}
