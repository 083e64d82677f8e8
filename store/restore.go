package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// Backup and restore (DESIGN 6), written once against Store and the few whole-bucket steps a
// backend adds (Epochs): claim the control key restore, seal epoch E, restore into the data
// buckets of epoch E+1, rewrite every shard.<S> there, and only then set cluster.epoch = E+1.

// Epochs is what a backend adds to Store for backups and restores: the data buckets of an epoch
// as wholes. Each method acts on the data bucket of one (epoch, partition); a missing bucket is an
// error wrapping ErrNotFound (except where said). The algorithm that uses them is TakeBackup,
// Restore and AbandonRestore; a backend implements only these steps.
type Epochs interface {
	// ScanPartition calls fn with the latest value of every live key of the bucket (keys whose
	// last message is a delete marker left out), byte for byte, in revision order, as the stream
	// leader holds them (never a lagging replica). An error from fn stops the scan and is returned.
	ScanPartition(ctx context.Context, epoch uint64, partition uint32, fn func(key string, value []byte) error) error
	// SealPartition seals the bucket for good: from then on every write to it is refused, a fenced
	// one (Write, WriteAsync, End) with an error wrapping ErrStaleOwner and ErrSealed, any other
	// (Register, Create, Assign, Rotate, ReleaseShard, PutData) with one wrapping ErrSealed only.
	// Reads go on working. Sealing a sealed bucket changes nothing.
	SealPartition(ctx context.Context, epoch uint64, partition uint32) error
	// PartitionSealed reports whether the bucket is sealed.
	PartitionSealed(ctx context.Context, epoch uint64, partition uint32) (bool, error)
	// ResetPartition deletes the bucket if it exists and creates it empty (revisions start again
	// at 1), configured like the same partition of epoch like (the revisions it keeps per key).
	// Only for an epoch that is not live: a restore's target.
	ResetPartition(ctx context.Context, epoch uint64, partition uint32, like uint64) error
	// DropPartition deletes the bucket; an absent one is no error.
	DropPartition(ctx context.Context, epoch uint64, partition uint32) error
	// PutData writes value under key (shard.<S> or inst.<S>.<id>) as it is: no fence, no
	// compare-on-revision, no decoding. Only a restore writes like this, into an epoch not yet live.
	PutData(ctx context.Context, epoch uint64, partition uint32, key string, value []byte) (uint64, error)
	// Blobs is the backend's store of large states (BlobBucket), for calls under ctx.
	Blobs(ctx context.Context) Blobs
}

// EpochStore is a Store with Epochs: what TakeBackup, Restore and AbandonRestore run on.
type EpochStore interface {
	Store
	Epochs
}

// Backup is a point-in-time copy of one epoch's data: the latest value of every live key.
type Backup struct {
	Cluster Cluster       `json:"cluster"`
	Entries []BackupEntry `json:"entries"`
	// Blobs are the states the records point at (BlobRef), by name: a backup holds them, so a
	// restore works even after the blobs were collected.
	Blobs map[string][]byte `json:"blobs,omitempty"`
}

// BackupEntry is one key.
type BackupEntry struct {
	Key   string `json:"key"`
	Value []byte `json:"value"`
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
	// ID is the restore's RestoreOptions.ID, and TakenOverIDs those of the claims this one
	// replaced (empty: none given); the commit records them in Cluster.RestoredBy.
	ID           string   `json:"id,omitempty"`
	TakenOverIDs []string `json:"taken_over_ids,omitempty"`
}

// Restore errors.
var (
	// ErrRestoreClaimed: another restore holds the claim (see RestoreClaimedError).
	ErrRestoreClaimed = errors.New("another restore is under way")
	// ErrRestoreClaimLost: this restore's claim was taken over (or the epoch moved on) while it ran;
	// it stopped before its next destructive step.
	ErrRestoreClaimLost = errors.New("restore claim lost")
	// ErrEpochMoved: the cluster is no longer at the epoch the restore was asked to replace
	// (RestoreOptions.FromEpoch): another restore finished first. Nothing was claimed or changed.
	ErrEpochMoved = errors.New("the cluster is not at the epoch this restore was to replace")
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

// RestoreOptions change how Restore works; the zero value is the rule of DESIGN 6. SkipSeal,
// KeepShardRevision and SkipClaim exist so a test can show what each step of the rule prevents.
type RestoreOptions struct {
	SkipSeal          bool // leave epoch E writable
	KeepShardRevision bool // restore shard.<S> from the backup instead of rewriting it after the data
	// SkipClaim restores without the restore key (no claim, no checks, into E+1 as read): the
	// protocol before issue 9.4, so a test can show the live epoch clobbered by a second restore.
	SkipClaim bool
	Progress  func(done, total int)
	// Operator names who restores (recorded in the claim, shown to a second restore).
	Operator string
	// FromEpoch, if set, is the epoch the operator means to replace (the one they saw): if the
	// cluster is at another one, Restore fails with ErrEpochMoved before it claims anything, so a
	// restore retried after the first one finished does not restore again over the live epoch.
	FromEpoch uint64
	// Takeover replaces the claim of another restore that crashed (or was abandoned) and finishes
	// the restore into the epoch after the one it claimed, from this backup. A claim whose epoch is
	// already live is finished and needs no takeover.
	Takeover bool
	// ID, if set, names this restore across the caller's retries of it: unique to the restore (a
	// random one per restore; not an operator's name), the same in every call that retries it,
	// without spaces or @ (at most 128 bytes). The epoch it commits records it (Cluster.RestoredBy,
	// with the IDs of the restores it took over, and of the last restores before), so a retry after
	// its commit landed but its answer was lost (ErrUnknownOutcome), or a retry of a restore that
	// another took over and finished, returns the live cluster record and changes nothing, instead
	// of sealing the live epoch and restoring again over what it acknowledged since. If another
	// restore has replaced that epoch since, the retry fails with ErrEpochMoved, changing nothing.
	// It is checked before FromEpoch; a FromEpoch naming the epoch this ID committed is an ID
	// reused for a new restore, refused. Without an ID every call is a new restore (FromEpoch
	// guards a retry then).
	ID string
	// Step, if set, runs before each destructive step ("seal", "buckets" once per partition,
	// "records" before every 100th record put, shard keys included, "shards", "epoch"), just
	// before the claim is checked; an error stops the restore there as a crash would (fault
	// tests). So does a ctx that ends: Step may cancel it to simulate the restorer's death.
	Step func(step string) error
}

// restoreCheckEvery: records restored between two checks of the claim.
const restoreCheckEvery = 100

// TakeBackup reads every live key of the current epoch's data buckets.
func TakeBackup(ctx context.Context, s EpochStore, progress func(done int)) (Backup, error) {
	cl, err := s.Cluster(ctx)
	if err != nil {
		return Backup{}, err
	}
	b := Backup{Cluster: cl}
	for p := uint32(0); p < cl.Partitions; p++ {
		err := s.ScanPartition(ctx, cl.Epoch, p, func(key string, value []byte) error {
			b.Entries = append(b.Entries, BackupEntry{Key: key, Value: value})
			if progress != nil && len(b.Entries)%1000 == 0 {
				progress(len(b.Entries))
			}
			return nil
		})
		if err != nil {
			return Backup{}, fmt.Errorf("back up %s: %w", DataBucket(cl.Epoch, p), err)
		}
	}
	if err := backUpBlobs(ctx, s, &b); err != nil {
		return Backup{}, err
	}
	return b, nil
}

// backUpBlobs copies into the backup the blobs its records point at, checked against their
// digests.
func backUpBlobs(ctx context.Context, s EpochStore, b *Backup) error {
	for _, e := range b.Entries {
		if !strings.HasPrefix(e.Key, "inst.") {
			continue
		}
		r, err := DecodeRecord(e.Value)
		if err != nil || r.Blob == nil {
			continue // a record that cannot be read is backed up as it is
		}
		id := strings.SplitN(e.Key, ".", 3)[2]
		if err := StateFromBlob(&r, id, s.Blobs(ctx)); err != nil {
			return fmt.Errorf("back up %s: %w", e.Key, err)
		}
		if b.Blobs == nil {
			b.Blobs = map[string][]byte{}
		}
		b.Blobs[r.Blob.Name] = r.State
	}
	return nil
}

// Restore makes a backup the state of a new epoch: it claims the restore (the control key
// restore, naming the target epoch and the operator), seals every data bucket of the current
// epoch E, restores the backup into new buckets of epoch E+1, rewrites every shard.<S> there
// (unassigned, so every restored revision is superseded and the coordinator grants afresh), sets
// cluster.epoch = E+1, and releases the claim. A write goes to the bucket of its grant's epoch, so
// a zombie from E hits a sealed bucket, and no token of E is valid in E+1. A second restore is
// refused while the claim is held; each destructive step first checks the claim is still ours and
// the epoch still E, so a restore that was taken over stops instead of clobbering the live epoch.
//
// A restore that stops half way (an error, a crash, a lost answer) leaves its claim: a takeover
// finishes it, AbandonRestore undoes it if it sealed nothing.
func Restore(ctx context.Context, s EpochStore, b Backup, opt RestoreOptions) (Cluster, error) {
	if len(opt.ID) > 128 || strings.ContainsFunc(opt.ID, unicode.IsSpace) || strings.Contains(opt.ID, "@") {
		return Cluster{}, fmt.Errorf("restore ID %.40q: want at most 128 bytes without spaces or @", opt.ID)
	}
	ce, cur, err := restoreSource(ctx, s, b, opt)
	if errors.Is(err, errRestoreDone) {
		releaseDone(ctx, s, opt.ID, cur)
		return cur, nil
	}
	if err != nil {
		return Cluster{}, err
	}
	r := &restoreRun{s: s, opt: opt, cur: cur, next: cur, clusterRev: ce.Revision, total: len(b.Entries), blobs: b.Blobs}
	r.next.Epoch++
	if !opt.SkipClaim {
		var claimed RestoreClaim
		claimed, r.claimRev, err = claimRestore(ctx, s, RestoreClaim{FromEpoch: cur.Epoch, Epoch: r.next.Epoch,
			Operator: opt.Operator, Entries: len(b.Entries), ID: opt.ID}, opt.Takeover)
		if err != nil {
			return Cluster{}, err
		}
		r.next.Epoch = claimed.Epoch
		r.next.RestoredBy = restoredBy(append([]string{opt.ID}, claimed.TakenOverIDs...), claimed.Epoch, cur.RestoredBy)
	} else {
		r.next.RestoredBy = restoredBy([]string{opt.ID}, r.next.Epoch, cur.RestoredBy)
	}
	if err := r.run(ctx, b.Entries); err != nil {
		return Cluster{}, err
	}
	return r.next, nil
}

// restoreSource reads the cluster record a restore replaces (epoch E) and checks that the backup
// is of a cluster of the same shape and that E is the epoch opt.FromEpoch names, if it names one.
func restoreSource(ctx context.Context, s EpochStore, b Backup, opt RestoreOptions) (Entry, Cluster, error) {
	ce, err := s.LatestControl(ctx, ClusterKey)
	if err != nil {
		return Entry{}, Cluster{}, fmt.Errorf("cluster record: %w", err)
	}
	var cur Cluster
	if err := json.Unmarshal(ce.Value, &cur); err != nil {
		return Entry{}, Cluster{}, fmt.Errorf("cluster record: %w", err)
	}
	if b.Cluster.Shards != cur.Shards || b.Cluster.Partitions != cur.Partitions || b.Cluster.ReplicasOr1() != cur.ReplicasOr1() {
		return Entry{}, Cluster{}, fmt.Errorf("backup of a cluster with %d shards/%d partitions/%d replicas; this one has %d/%d/%d "+
			"(a backup restores only into a cluster of its shape)",
			b.Cluster.Shards, b.Cluster.Partitions, b.Cluster.ReplicasOr1(), cur.Shards, cur.Partitions, cur.ReplicasOr1())
	}
	if epoch, ok := restoredEpoch(cur.RestoredBy, opt.ID); ok {
		switch {
		case epoch != cur.Epoch:
			return Entry{}, Cluster{}, fmt.Errorf("%w: restore %s committed epoch %d, which epoch %d has replaced since", ErrEpochMoved, opt.ID, epoch, cur.Epoch)
		case opt.FromEpoch == cur.Epoch:
			// A retry names the epoch its first call saw, never the one it made.
			return Entry{}, Cluster{}, fmt.Errorf("restore ID %s committed epoch %d already: a new restore needs a new ID", opt.ID, epoch)
		}
		return ce, cur, errRestoreDone // this restore committed the live epoch (or one that took it over did)
	}
	if opt.FromEpoch != 0 && cur.Epoch != opt.FromEpoch {
		return Entry{}, Cluster{}, fmt.Errorf("%w: it is at epoch %d, the restore was to replace epoch %d (did another restore finish?)",
			ErrEpochMoved, cur.Epoch, opt.FromEpoch)
	}
	return ce, cur, nil
}

// restoreRun is one Restore under way: the epoch it replaces, the one it makes, and its claim.
type restoreRun struct {
	s          EpochStore
	opt        RestoreOptions
	cur        Cluster // the cluster record as read: epoch E
	next       Cluster // the cluster record it commits: epoch E+1 (or later, after a takeover)
	clusterRev uint64  // the revision of the cluster record as read
	claimRev   uint64  // the revision of our claim of the restore key (none with SkipClaim)
	done       int     // records put so far
	total      int     // entries of the backup
	blobs      map[string][]byte
}

// run takes the destructive steps in order: seal epoch E, make the new epoch's buckets, put the
// backup's records, rewrite every shard.<S>, and commit the new epoch.
func (r *restoreRun) run(ctx context.Context, entries []BackupEntry) error {
	if !r.opt.SkipSeal {
		if err := r.seal(ctx); err != nil {
			return err
		}
	}
	if err := r.resetBuckets(ctx); err != nil {
		return err
	}
	if err := r.putBlobs(ctx); err != nil {
		return err
	}
	if err := r.putRecords(ctx, entries); err != nil {
		return err
	}
	if !r.opt.KeepShardRevision {
		if err := r.rewriteShards(ctx); err != nil {
			return err
		}
	}
	return r.commit(ctx)
}

// step checks, before each destructive step, that the claim and the epoch are still as taken.
func (r *restoreRun) step(ctx context.Context, name string) error {
	if r.opt.Step != nil {
		if err := r.opt.Step(name); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("restore stopped before %s: %w", name, err)
	}
	if r.opt.SkipClaim {
		return nil
	}
	return checkRestoreClaim(ctx, r.s, r.claimRev, r.clusterRev)
}

// seal seals every data bucket of epoch E.
func (r *restoreRun) seal(ctx context.Context) error {
	if err := r.step(ctx, "seal"); err != nil {
		return err
	}
	for p := uint32(0); p < r.cur.Partitions; p++ {
		if err := r.s.SealPartition(ctx, r.cur.Epoch, p); err != nil {
			return fmt.Errorf("sealing epoch %d: %w", r.cur.Epoch, err)
		}
	}
	return nil
}

// resetBuckets makes the data buckets of the new epoch afresh.
func (r *restoreRun) resetBuckets(ctx context.Context) error {
	// Epoch E+1 is not recorded yet and the claim is ours: its buckets may be (re)created, e.g.
	// after a restore that crashed and was abandoned. (Epoch E+1's buckets keep as many revisions
	// per key as E's: fault tests keep them all.)
	for p := uint32(0); p < r.next.Partitions; p++ {
		if err := r.step(ctx, "buckets"); err != nil {
			return err
		}
		if err := r.s.ResetPartition(ctx, r.next.Epoch, p, r.cur.Epoch); err != nil {
			return fmt.Errorf("making epoch %d: %w", r.next.Epoch, err)
		}
	}
	return nil
}

// putBlobs uploads the backup's blobs under their names before any record that points at them
// (a blob still in the store is uploaded again with the same bytes).
func (r *restoreRun) putBlobs(ctx context.Context) error {
	if len(r.blobs) == 0 {
		return nil
	}
	if err := r.step(ctx, "blobs"); err != nil {
		return err
	}
	for name, data := range r.blobs {
		if _, err := r.s.Blobs(ctx).PutBlob(name, data); err != nil {
			return fmt.Errorf("restoring blob %s: %w", name, err)
		}
	}
	return nil
}

// putRecords puts the backup's records into the new epoch (its shard.<S> only with
// KeepShardRevision: otherwise rewriteShards writes them afresh).
func (r *restoreRun) putRecords(ctx context.Context, entries []BackupEntry) error {
	for _, e := range entries {
		if strings.HasPrefix(e.Key, "shard.") && !r.opt.KeepShardRevision {
			continue
		}
		if err := r.put(ctx, e); err != nil {
			return err
		}
	}
	return nil
}

// put writes one record into the new epoch, with a step before every restoreCheckEvery-th.
func (r *restoreRun) put(ctx context.Context, e BackupEntry) error {
	if r.done%restoreCheckEvery == 0 {
		if err := r.step(ctx, "records"); err != nil {
			return err
		}
	} else if err := ctx.Err(); err != nil {
		return fmt.Errorf("restore stopped at %s: %w", e.Key, err)
	}
	p, err := partitionOf(e.Key, r.next.Partitions)
	if err != nil {
		return err
	}
	if _, err := r.s.PutData(ctx, r.next.Epoch, p, e.Key, e.Value); err != nil {
		return fmt.Errorf("restore %s: %w", e.Key, err)
	}
	r.done++
	if r.opt.Progress != nil && r.done%500 == 0 {
		r.opt.Progress(r.done, r.total)
	}
	return nil
}

// rewriteShards writes every shard.<S> of the new epoch unassigned.
func (r *restoreRun) rewriteShards(ctx context.Context) error {
	if err := r.step(ctx, "shards"); err != nil {
		return err
	}
	// Rewritten after every restored record, so every token of E+1 is above every restored
	// revision; unassigned, so the coordinator grants each shard to a live session.
	free, _ := json.Marshal(Assignment{})
	for sh := uint32(0); sh < r.next.Shards; sh++ {
		if err := r.put(ctx, BackupEntry{Key: ShardKey(sh), Value: free}); err != nil {
			return err
		}
	}
	return nil
}

// commit sets cluster.epoch to the new epoch (compare-on-revision) and releases the claim.
func (r *restoreRun) commit(ctx context.Context) error {
	if err := r.step(ctx, "epoch"); err != nil {
		return err
	}
	v, _ := json.Marshal(r.next)
	if _, err := r.s.ControlUpdate(ctx, ClusterKey, v, r.clusterRev, 0); err != nil {
		return fmt.Errorf("set epoch %d: %w", r.next.Epoch, err)
	}
	// The epoch is the commit point: a claim left behind is finished, whoever sees it.
	if !r.opt.SkipClaim {
		_ = r.s.ControlDelete(ctx, RestoreKey, r.claimRev)
	}
	return nil
}

// partitionOf is the partition of a data key: shard.<S> and inst.<S>.<id> live in S mod P.
func partitionOf(key string, partitions uint32) (uint32, error) {
	_, rest, ok := strings.Cut(key, ".")
	num, _, _ := strings.Cut(rest, ".")
	sh, err := strconv.ParseUint(num, 10, 32)
	if !ok || err != nil {
		return 0, fmt.Errorf("key %q: not a shard or instance key", key)
	}
	return uint32(sh) % partitions, nil
}

// restoreHistory is how many restores' IDs the cluster record keeps.
const restoreHistory = 16

// restoredBy is the RestoredBy of an epoch committed by the restores ids (the committing one
// first, then those it took over; empty ones left out, each once) over the live record's.
func restoredBy(ids []string, epoch uint64, prev string) string {
	var out []string
	for _, id := range ids {
		if tok := id + "@" + strconv.FormatUint(epoch, 10); id != "" && !slices.Contains(out, tok) {
			out = append(out, tok)
		}
	}
	for _, tok := range strings.Fields(prev) {
		if len(out) == restoreHistory {
			break
		}
		out = append(out, tok)
	}
	return strings.Join(out, " ")
}

// restoredEpoch is the epoch the restore of this ID committed, by the cluster record's RestoredBy.
func restoredEpoch(restoredBy, id string) (uint64, bool) {
	if id == "" {
		return 0, false
	}
	for _, tok := range strings.Fields(restoredBy) {
		got, e, ok := strings.Cut(tok, "@")
		if !ok || got != id {
			continue
		}
		if epoch, err := strconv.ParseUint(e, 10, 64); err == nil {
			return epoch, true
		}
	}
	return 0, false
}

// errRestoreDone: the cluster record names the restore's ID: it committed the live epoch.
var errRestoreDone = errors.New("the restore committed already")

// releaseDone releases, after a retry found its restore committed, the claim that restore left if
// its commit's release was lost (the claim of this ID, or of one that took it over, naming the
// live epoch; compare-on-revision, so a newer claim is left alone).
func releaseDone(ctx context.Context, s Control, id string, cur Cluster) {
	e, err := s.LatestControl(ctx, RestoreKey)
	if err != nil {
		return
	}
	var held RestoreClaim
	if json.Unmarshal(e.Value, &held) != nil || held.Epoch != cur.Epoch {
		return
	}
	if held.ID == id || slices.Contains(held.TakenOverIDs, id) {
		_ = s.ControlDelete(ctx, RestoreKey, e.Revision)
	}
}

// claimRestore takes the restore key for a restore (CAS). A claim whose target epoch is already
// live (or older) belongs to a restore that finished: it is replaced. A live claim of another
// restore is refused unless takeover, which replaces it and restores into the epoch after it.
func claimRestore(ctx context.Context, s Control, want RestoreClaim, takeover bool) (RestoreClaim, uint64, error) {
	b, _ := json.Marshal(want)
	rev, err := s.ControlCreate(ctx, RestoreKey, b, 0)
	if !errors.Is(err, ErrConflict) {
		return want, rev, err
	}
	e, gerr := s.LatestControl(ctx, RestoreKey)
	if errors.Is(gerr, ErrNotFound) {
		rev, err := s.ControlCreate(ctx, RestoreKey, b, 0) // released meanwhile: one more try
		return want, rev, err
	}
	if gerr != nil {
		return RestoreClaim{}, 0, gerr
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
		want.TakenOverIDs = slices.Clone(held.TakenOverIDs)
		if held.ID != "" {
			want.TakenOverIDs = append(want.TakenOverIDs, held.ID)
		}
		b, _ = json.Marshal(want)
	default:
		return RestoreClaim{}, 0, &RestoreClaimedError{Claim: held, Revision: e.Revision}
	}
	// Finished (its epoch is live), or taken over: replace it, compare-on-revision.
	rev, err = s.ControlUpdate(ctx, RestoreKey, b, e.Revision, 0)
	if errors.Is(err, ErrConflict) {
		return RestoreClaim{}, 0, fmt.Errorf("%w: the claim changed while it was being taken", ErrRestoreClaimed)
	}
	return want, rev, err
}

// checkRestoreClaim: the restore key still holds our claim and the cluster record has not moved
// on, read through the stream leader. A claim still ours over a cluster that moved on (another
// restore committed after we read it) is released: its epoch will never go live.
func checkRestoreClaim(ctx context.Context, s Control, claimRev, clusterRev uint64) error {
	e, err := s.LatestControl(ctx, RestoreKey)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("check the restore claim: %w", err) // not known to be lost: stop all the same
	}
	if err != nil || e.Revision != claimRev {
		var who RestoreClaim
		_ = json.Unmarshal(e.Value, &who)
		return fmt.Errorf("%w: the restore key is now held by %q (revision %d, ours %d; %v)", ErrRestoreClaimLost,
			who.Operator, e.Revision, claimRev, err)
	}
	ce, err := s.LatestControl(ctx, ClusterKey)
	if err != nil {
		return fmt.Errorf("check the cluster record: %w", err)
	}
	if ce.Revision != clusterRev {
		_ = s.ControlDelete(ctx, RestoreKey, claimRev)
		return fmt.Errorf("%w: the cluster record changed (revision %d, read at %d)", ErrRestoreClaimLost, ce.Revision, clusterRev)
	}
	return nil
}

// AbandonRestore undoes a restore that crashed before it sealed anything: it deletes the buckets
// it may have made for its epoch and releases its claim. Once epoch E is sealed there is no going
// back (a sealed bucket stays sealed): finish it with a takeover instead. Only for a restorer
// whose process is gone: one that is merely frozen (or whose seal is still on the wire) can still
// seal epoch E after its last check (a takeover is safe against that; an undo is not).
func AbandonRestore(ctx context.Context, s EpochStore) (RestoreClaim, error) {
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
		sealed, err := s.PartitionSealed(ctx, held.FromEpoch, p)
		if err != nil {
			return held, err
		}
		if sealed {
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
		if err := s.DropPartition(ctx, held.Epoch, p); err != nil {
			return held, fmt.Errorf("deleting epoch %d: %w", held.Epoch, err)
		}
	}
	return held, s.ControlDelete(ctx, RestoreKey, rev)
}
