package natskv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickfence/tickfence/store"
)

// Backup is a point-in-time copy of one epoch's data: the latest value of every live key.
type Backup struct {
	Cluster store.Cluster `json:"cluster"`
	Entries []BackupEntry `json:"entries"`
}

// BackupEntry is one key.
type BackupEntry struct {
	Key   string `json:"key"`
	Value []byte `json:"value"`
}

// Backup reads every live key of the current epoch's data buckets.
func (s *Store) Backup(ctx context.Context, progress func(done int)) (Backup, error) {
	cl, err := s.Cluster(ctx)
	if err != nil {
		return Backup{}, err
	}
	b := Backup{Cluster: cl}
	for p := uint32(0); p < cl.Partitions; p++ {
		kv, err := s.kv(ctx, store.DataBucket(cl.Epoch, p))
		if err != nil {
			return Backup{}, err
		}
		w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
		if err != nil {
			return Backup{}, err
		}
		for e := range w.Updates() {
			if e == nil {
				break
			}
			b.Entries = append(b.Entries, BackupEntry{Key: e.Key(), Value: e.Value()})
			if progress != nil && len(b.Entries)%1000 == 0 {
				progress(len(b.Entries))
			}
		}
		_ = w.Stop()
	}
	return b, nil
}

// Seal seals every data stream of an epoch: nothing can land there any more, so a zombie holding
// a grant of that epoch can write nowhere (DESIGN 6).
func (s *Store) Seal(ctx context.Context, cl store.Cluster) error {
	for p := uint32(0); p < cl.Partitions; p++ {
		stream, err := s.js.Stream(ctx, "KV_"+store.DataBucket(cl.Epoch, p))
		if err != nil {
			return err
		}
		info, err := stream.Info(ctx)
		if err != nil {
			return err
		}
		if info.Config.Sealed {
			continue
		}
		cfg := info.Config
		cfg.Sealed = true
		if _, err := s.js.UpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("seal %s: %w", cfg.Name, err)
		}
	}
	return nil
}

// RestoreKey is the control key a restore claims before it changes anything: one restore at a
// time, and each destructive step first checks that the claim is still its own.
const RestoreKey = "restore"

// RestoreClaim is the value of the restore key.
type RestoreClaim struct {
	FromEpoch uint64 `json:"from_epoch"` // the epoch being sealed
	Epoch     uint64 `json:"epoch"`      // the epoch being restored into
	Operator  string `json:"operator"`
	Entries   int    `json:"entries"`
	// TakenOver names the operators whose claim this one replaced.
	TakenOver []string `json:"taken_over,omitempty"`
}

// Restore errors.
var (
	// ErrRestoreClaimed: another restore holds the claim (see RestoreClaimedError).
	ErrRestoreClaimed = errors.New("another restore is under way")
	// ErrRestoreClaimLost: this restore's claim was taken over (or the epoch moved on) while it ran;
	// it stopped before its next destructive step.
	ErrRestoreClaimLost = errors.New("restore claim lost")
)

// RestoreClaimedError is ErrRestoreClaimed with the claim that is in the way.
type RestoreClaimedError struct {
	Claim    RestoreClaim
	Revision uint64
}

func (e *RestoreClaimedError) Error() string {
	return fmt.Sprintf("%v: %s is restoring epoch %d into epoch %d (claim revision %d); if it crashed, take it over",
		ErrRestoreClaimed, e.Claim.Operator, e.Claim.FromEpoch, e.Claim.Epoch, e.Revision)
}

func (e *RestoreClaimedError) Unwrap() error { return ErrRestoreClaimed }

// RestoreOptions change how Restore works; the zero value is the rule of DESIGN 6. SkipSeal and
// KeepShardRevision exist so a test can show what each step of the rule prevents.
type RestoreOptions struct {
	SkipSeal          bool // leave epoch E writable
	KeepShardRevision bool // restore shard.<S> from the backup instead of rewriting it after the data
	Progress          func(done, total int)
	// Operator names who restores (recorded in the claim, shown to a second restore).
	Operator string
	// Takeover replaces the claim of another restore that crashed (or was abandoned) and finishes
	// the restore into the epoch it claimed, from this backup. A claim whose epoch is already live
	// is finished and needs no takeover.
	Takeover bool
	// Step, if set, runs before each destructive step ("seal", "buckets", "records", "shards",
	// "epoch"); an error stops the restore there as a crash would (fault tests).
	Step func(step string) error
}

// Restore makes a backup the state of a new epoch: it claims the restore (the control key
// restore, naming the target epoch and the operator), seals every data stream of the current
// epoch E, restores the backup into new buckets of epoch E+1, rewrites every shard.<S> there
// (unassigned, so every restored revision is superseded and the coordinator grants afresh), sets
// cluster.epoch = E+1, and releases the claim. A write goes to the bucket of its grant's epoch, so
// a zombie from E hits a sealed stream, and no token of E is valid in E+1. A second restore is
// refused while the claim is held; each destructive step first checks the claim is still ours and
// the epoch still E, so a restore that was taken over stops instead of clobbering the live epoch.
func (s *Store) Restore(ctx context.Context, b Backup, opt RestoreOptions) (store.Cluster, error) {
	ctl, err := s.ctl(ctx)
	if err != nil {
		return store.Cluster{}, err
	}
	ce, err := s.LatestControl(ctx, store.ClusterKey)
	if err != nil {
		return store.Cluster{}, fmt.Errorf("cluster record: %w", err)
	}
	var cur store.Cluster
	if err := json.Unmarshal(ce.Value, &cur); err != nil {
		return store.Cluster{}, err
	}
	if b.Cluster.Shards != cur.Shards || b.Cluster.Partitions != cur.Partitions {
		return store.Cluster{}, fmt.Errorf("backup of a cluster with %d shards/%d partitions; this one has %d/%d",
			b.Cluster.Shards, b.Cluster.Partitions, cur.Shards, cur.Partitions)
	}
	next := cur
	next.Epoch++
	claimRev, epoch, err := s.claimRestore(ctx, RestoreClaim{FromEpoch: cur.Epoch, Epoch: next.Epoch, Operator: opt.Operator,
		Entries: len(b.Entries)}, opt.Takeover)
	if err != nil {
		return store.Cluster{}, err
	}
	next.Epoch = epoch
	// step checks, before each destructive step, that the claim and the epoch are still as taken.
	step := func(name string) error {
		if opt.Step != nil {
			if err := opt.Step(name); err != nil {
				return err
			}
		}
		return s.checkRestoreClaim(ctx, claimRev, ce.Revision)
	}
	// Epoch E+1's buckets keep as many revisions per key as E's (fault tests keep them all).
	keep := make([]int64, cur.Partitions)
	for p := uint32(0); p < cur.Partitions; p++ {
		stream, err := s.js.Stream(ctx, "KV_"+store.DataBucket(cur.Epoch, p))
		if err != nil {
			return store.Cluster{}, err
		}
		info, err := stream.Info(ctx)
		if err != nil {
			return store.Cluster{}, err
		}
		keep[p] = max(info.Config.MaxMsgsPerSubject, 1)
	}
	if !opt.SkipSeal {
		if err := step("seal"); err != nil {
			return store.Cluster{}, err
		}
		if err := s.Seal(ctx, cur); err != nil {
			return store.Cluster{}, err
		}
	}
	// Epoch E+1 is not recorded yet and the claim is ours: its buckets may be (re)created, e.g.
	// after a restore that crashed and was taken over.
	for p := uint32(0); p < next.Partitions; p++ {
		if err := step("buckets"); err != nil {
			return store.Cluster{}, err
		}
		name := store.DataBucket(next.Epoch, p)
		if err := s.js.DeleteKeyValue(ctx, name); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
			return store.Cluster{}, fmt.Errorf("clear %s: %w", name, err)
		}
		s.mu.Lock()
		delete(s.buckets, name)
		s.mu.Unlock()
		if err := s.createBucket(ctx, jetstream.KeyValueConfig{Bucket: name,
			History: uint8(min(keep[p], 64)), MaxValueSize: store.MaxRecordBytes + 1024}); err != nil {
			return store.Cluster{}, err
		}
		if keep[p] > 64 {
			if err := s.setHistory(ctx, name, keep[p]); err != nil {
				return store.Cluster{}, err
			}
		}
	}
	bucketOf := func(key string) (jetstream.KeyValue, error) {
		var sh uint32
		if _, err := fmt.Sscanf(key[strings.IndexByte(key, '.')+1:], "%d", &sh); err != nil {
			return nil, fmt.Errorf("key %q: %w", key, err)
		}
		return s.kv(ctx, store.DataBucket(next.Epoch, sh%next.Partitions))
	}
	done := 0
	put := func(e BackupEntry) error {
		if done%restoreCheckEvery == 0 {
			if err := step("records"); err != nil {
				return err
			}
		}
		kv, err := bucketOf(e.Key)
		if err != nil {
			return err
		}
		if _, err := kv.Put(ctx, e.Key, e.Value); err != nil {
			return fmt.Errorf("restore %s: %w", e.Key, err)
		}
		done++
		if opt.Progress != nil && done%500 == 0 {
			opt.Progress(done, len(b.Entries))
		}
		return nil
	}
	for _, e := range b.Entries {
		if strings.HasPrefix(e.Key, "shard.") && !opt.KeepShardRevision {
			continue
		}
		if err := put(e); err != nil {
			return store.Cluster{}, err
		}
	}
	if !opt.KeepShardRevision {
		if err := step("shards"); err != nil {
			return store.Cluster{}, err
		}
		// Rewritten after every restored record, so every token of E+1 is above every restored
		// revision; unassigned, so the coordinator grants each shard to a live session.
		free, _ := json.Marshal(store.Assignment{})
		for sh := uint32(0); sh < next.Shards; sh++ {
			if err := put(BackupEntry{Key: store.ShardKey(sh), Value: free}); err != nil {
				return store.Cluster{}, err
			}
		}
	}
	if err := step("epoch"); err != nil {
		return store.Cluster{}, err
	}
	v, _ := json.Marshal(next)
	if _, err := ctl.Update(ctx, store.ClusterKey, v, ce.Revision); err != nil {
		return store.Cluster{}, fmt.Errorf("set epoch %d: %w", next.Epoch, err)
	}
	s.mu.Lock()
	s.cluster = &next
	s.mu.Unlock()
	// The epoch is the commit point: a claim left behind is finished, whoever sees it.
	_ = s.ControlDelete(ctx, RestoreKey, claimRev)
	return next, nil
}

// restoreCheckEvery: records restored between two checks of the claim.
const restoreCheckEvery = 100

// claimRestore takes the restore key for a restore (CAS). A claim whose target epoch is already
// live (or older) belongs to a restore that finished: it is replaced. A live claim of another
// restore is refused unless takeover, which replaces it if it targets the same epoch.
func (s *Store) claimRestore(ctx context.Context, want RestoreClaim, takeover bool) (uint64, uint64, error) {
	b, _ := json.Marshal(want)
	rev, err := s.ControlCreate(ctx, RestoreKey, b, 0)
	if !errors.Is(err, store.ErrConflict) {
		return rev, want.Epoch, err
	}
	e, gerr := s.LatestControl(ctx, RestoreKey)
	if errors.Is(gerr, store.ErrNotFound) {
		rev, err := s.ControlCreate(ctx, RestoreKey, b, 0) // released meanwhile: one more try
		return rev, want.Epoch, err
	}
	if gerr != nil {
		return 0, 0, gerr
	}
	var held RestoreClaim
	bad := json.Unmarshal(e.Value, &held) != nil
	switch {
	case !bad && held.Epoch <= want.FromEpoch:
		// Its epoch is live already: that restore finished, only its claim was left behind.
	case takeover && (bad || held.Epoch >= want.Epoch):
		// The restorer taken over may only be frozen, not dead: after its last check it can still
		// delete, recreate or write the buckets of the epoch it claimed. Restore into the epoch
		// after it instead, whose buckets it never touches; its own epoch never goes live (its
		// final compare-on-revision of cluster fails once this one commits).
		if !bad {
			want.Epoch = held.Epoch + 1
		} else {
			want.Epoch++
		}
		want.TakenOver = append(held.TakenOver, held.Operator)
		b, _ = json.Marshal(want)
	default:
		return 0, 0, &RestoreClaimedError{Claim: held, Revision: e.Revision}
	}
	// Finished (its epoch is live), or taken over: replace it, compare-on-revision.
	rev, err = s.ControlUpdate(ctx, RestoreKey, b, e.Revision, 0)
	if errors.Is(err, store.ErrConflict) {
		return 0, 0, fmt.Errorf("%w: the claim changed while it was being taken", ErrRestoreClaimed)
	}
	return rev, want.Epoch, err
}

// checkRestoreClaim: the restore key still holds our claim and the cluster record has not moved
// on, read through the stream leader.
func (s *Store) checkRestoreClaim(ctx context.Context, claimRev, clusterRev uint64) error {
	e, err := s.LatestControl(ctx, RestoreKey)
	if err != nil || e.Revision != claimRev {
		var who RestoreClaim
		_ = json.Unmarshal(e.Value, &who)
		return fmt.Errorf("%w: the restore key is now held by %q (revision %d, ours %d; %v)", ErrRestoreClaimLost,
			who.Operator, e.Revision, claimRev, err)
	}
	ce, err := s.LatestControl(ctx, store.ClusterKey)
	if err != nil || ce.Revision != clusterRev {
		return fmt.Errorf("%w: the cluster record changed (revision %d, read at %d; %v)", ErrRestoreClaimLost, ce.Revision, clusterRev, err)
	}
	return nil
}

// AbandonRestore undoes a restore that crashed before it sealed anything: it deletes the buckets
// it may have made for its epoch and releases its claim. Once epoch E is sealed there is no going
// back (a sealed stream stays sealed): finish it with a takeover instead. Only for a restorer
// whose process is gone: one that is merely frozen can still seal epoch E after its last check
// (a takeover is safe against that; an undo is not).
func (s *Store) AbandonRestore(ctx context.Context) (RestoreClaim, error) {
	e, err := s.LatestControl(ctx, RestoreKey)
	if err != nil {
		return RestoreClaim{}, fmt.Errorf("no restore to abandon: %w", err)
	}
	var held RestoreClaim
	if err := json.Unmarshal(e.Value, &held); err != nil {
		return RestoreClaim{}, fmt.Errorf("restore claim: %w", err)
	}
	cl, err := s.Cluster(ctx)
	if err != nil {
		return held, err
	}
	if cl.Epoch >= held.Epoch {
		// Finished: nothing to undo, only the claim to clear.
		return held, s.ControlDelete(ctx, RestoreKey, e.Revision)
	}
	for p := uint32(0); p < cl.Partitions; p++ {
		stream, err := s.js.Stream(ctx, "KV_"+store.DataBucket(held.FromEpoch, p))
		if err != nil {
			return held, err
		}
		info, err := stream.Info(ctx)
		if err != nil {
			return held, err
		}
		if info.Config.Sealed {
			return held, fmt.Errorf("epoch %d is already sealed by %s's restore: it cannot be undone; finish it with a takeover",
				held.FromEpoch, held.Operator)
		}
	}
	// Take the claim first (so the crashed restore, if it was only slow, stops), then clean up.
	b, _ := json.Marshal(RestoreClaim{FromEpoch: held.FromEpoch, Epoch: held.Epoch, Operator: "abandon:" + held.Operator})
	rev, err := s.ControlUpdate(ctx, RestoreKey, b, e.Revision, 0)
	if err != nil {
		return held, err
	}
	for p := uint32(0); p < cl.Partitions; p++ {
		name := store.DataBucket(held.Epoch, p)
		if err := s.js.DeleteKeyValue(ctx, name); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
			return held, fmt.Errorf("clear %s: %w", name, err)
		}
		s.mu.Lock()
		delete(s.buckets, name)
		s.mu.Unlock()
	}
	return held, s.ControlDelete(ctx, RestoreKey, rev)
}
