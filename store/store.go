// Package store defines tickfence's persistence contract: the storage layout of DESIGN.md section 3,
// fenced writes (section 4), and the errors callers branch on. Backends live in sub-packages:
// natskv (NATS JetStream KV, the real one) and memstore (in-memory, for fast core tests). Both pass
// the conformance suite in storetest.
package store

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"time"
)

// Sentinel errors. Callers branch on them with errors.Is; backends classify their own errors
// (by API error code, never by message) into these.
var (
	// ErrStaleOwner: the write's token is no longer the revision of shard.<S>. The write was
	// rejected by the store, atomically; the shard belongs to someone else or was rotated.
	ErrStaleOwner = errors.New("tickfence: stale owner: token is not the shard's current revision")
	// ErrConflict: a compare-on-revision of the key itself failed (registration, Create, Assign).
	ErrConflict = errors.New("tickfence: conflict: key changed since it was read")
	// ErrNotFound: no such key (or it was deleted).
	ErrNotFound = errors.New("tickfence: not found")
	// ErrUnknownOutcome: the write may or may not have been stored (timeout, lost ack, lost
	// connection). The owner must rotate its token before it reads back (DESIGN 4).
	ErrUnknownOutcome = errors.New("tickfence: write outcome unknown")
	// ErrTooLarge: an encoded record or a command exceeds its size limit. Nothing was stored.
	ErrTooLarge = errors.New("tickfence: too large")
	// ErrInvalidID: an instance ID outside ^[A-Za-z0-9_-]{1,64}$.
	ErrInvalidID = errors.New("tickfence: invalid instance id")
	// ErrBadRecord: bytes that do not decode as an instance record of a known schema version.
	ErrBadRecord = errors.New("tickfence: malformed instance record")
	// ErrWrongShard: the instance ID does not hash to the shard it was addressed to.
	ErrWrongShard = errors.New("tickfence: instance does not belong to this shard")
	// ErrSealed: the write went to a data bucket of an epoch that a restore sealed (DESIGN 6).
	// Nothing was stored and nothing ever will be there: no grant of that epoch is valid any more.
	// A fenced write's error wraps ErrStaleOwner too.
	ErrSealed = errors.New("tickfence: its epoch is sealed")
	// ErrRefused: the store answered that it did not store the write, for a reason other than the
	// fence (out of space, a payload over the server's limit, a misconfigured stream). It is a
	// definite outcome: nothing was stored and the token was not spent, so the writer undoes what
	// the write carried and keeps its token (no rotation).
	ErrRefused = errors.New("tickfence: refused by the store")
)

// Refused reports whether a write's error is a definite refusal that leaves the token valid:
// nothing was stored, and nothing of it ever will be (ErrRefused, ErrTooLarge, and the input
// errors found before sending). Stale-owner and sealed refusals are definite too but spend the
// grant; everything else is an unknown outcome (DESIGN 4: rotate before reading back).
func Refused(err error) bool {
	if err == nil || errors.Is(err, ErrStaleOwner) || errors.Is(err, ErrSealed) || errors.Is(err, ErrUnknownOutcome) {
		return false
	}
	return errors.Is(err, ErrRefused) || errors.Is(err, ErrTooLarge) || errors.Is(err, ErrInvalidID) ||
		errors.Is(err, ErrWrongShard) || errors.Is(err, ErrBadRecord)
}

// Cluster is the `cluster` record of the control bucket. It is created once, by the first tickd,
// and its shape (shards, partitions, replicas) never changes; a restore moves only the epoch (and
// records itself in RestoredBy).
type Cluster struct {
	Shards     uint32 `json:"shards"`
	Partitions uint32 `json:"partitions"`
	Epoch      uint64 `json:"epoch"`
	// Replicas of every bucket and stream of the cluster (data buckets of every epoch, the control
	// bucket, blobs, effects): 1, or 3 or 5 on a JetStream cluster (DESIGN 10). A record written
	// before replicas were recorded has none: read it with ReplicasOr1.
	Replicas uint32 `json:"replicas,omitempty"`
	// RestoredBy: the restores that committed recent epochs, as "ID@epoch" (RestoreOptions.ID),
	// newest first, space-separated, the last restoreHistory of them: the one that committed this
	// epoch, those it took over, then those of earlier epochs. A retry of one of them then knows it
	// committed, and whether its epoch is still the live one.
	RestoredBy string `json:"restored_by,omitempty"`
}

// MaxReplicas is JetStream's limit on the replicas of a stream.
const MaxReplicas = 5

// DefaultCluster is what a new cluster gets unless flags say otherwise.
func DefaultCluster() Cluster { return Cluster{Shards: 256, Partitions: 1, Epoch: 1, Replicas: 1} }

// ReplicasOr1 is the cluster's replicas; a record without them (written before they were
// recorded, when every tickd made R1 buckets) has 1.
func (c Cluster) ReplicasOr1() uint32 { return max(c.Replicas, 1) }

// Validate reports a cluster record that cannot be used. Replicas 0 is an older record's (1).
func (c Cluster) Validate() error {
	switch {
	case c.Shards == 0 || c.Shards > 1<<16:
		return fmt.Errorf("cluster: shards must be in 1..65536, got %d", c.Shards)
	case c.Partitions == 0 || c.Partitions > c.Shards:
		return fmt.Errorf("cluster: partitions must be in 1..shards (%d), got %d", c.Shards, c.Partitions)
	case c.Replicas > MaxReplicas:
		return fmt.Errorf("cluster: replicas must be in 1..%d, got %d", MaxReplicas, c.Replicas)
	case c.Epoch == 0:
		return fmt.Errorf("cluster: epoch starts at 1")
	}
	return nil
}

// Assignment is the value of shard.<S>: which node, in which session, owns the shard, by which
// decision of the coordinator. A token rotation rewrites it byte for byte; only a new grant changes
// Grant, so a coordinator that re-reads a key after a conflict can tell "rotated by its owner"
// (same value) from "granted again by someone else" (A→B→A has a new Grant).
type Assignment struct {
	Owner   string `json:"owner"`
	Session string `json:"session"`
	// Grant identifies the coordinator's decision: "<leader lease revision>.<counter>" of the
	// leader that wrote it (empty in a value written by a restore or an older version).
	Grant string `json:"grant,omitempty"`
}

// Holds reports whether a names the same node session as b, whatever the grant.
func (a Assignment) Holds(b Assignment) bool { return a.Owner == b.Owner && a.Session == b.Session }

// Grant is what an owner holds: the right to write the instances of one shard in one epoch,
// as long as shard.<S> is still at revision Token.
type Grant struct {
	Epoch uint64
	Shard uint32
	Token uint64
	Assignment
}

func (g Grant) String() string {
	return fmt.Sprintf("e%d/shard %d@%d(%s/%s)", g.Epoch, g.Shard, g.Token, g.Owner, g.Session)
}

// AssignmentEvent is one change of shard.<S> seen by a watch. Deleted means the key was released.
type AssignmentEvent struct {
	Shard    uint32
	Revision uint64
	Deleted  bool
	Assignment
}

// StaleOwnerError is a fenced write (Write, WriteAsync, End) the store refused: shard.<S> is no
// longer at the grant's token. errors.Is(err, ErrStaleOwner) holds, and ErrSealed too if the
// epoch was sealed by a restore. Revision is the revision of shard.<S> the store met (0 if it did
// not say: a sealed epoch); the owner at that revision is Assignment(epoch, shard) or a
// LatestAssignment read.
type StaleOwnerError struct {
	Op       string // what was refused, e.g. "write inst.3.x"
	Grant    Grant  // the grant it was sent under
	Revision uint64 // the revision of shard.<S> the store met (0: not said)
	Sealed   bool
	// Holder is the value of shard.<S> at Revision — who the store found holding the shard —
	// when the backend could read it exactly (HolderKnown; read from the stream leader on
	// JetStream). A zero Holder that is known is a released (deleted) key.
	Holder      Assignment
	HolderKnown bool
	Cause       error // the backend's own error, if any
}

func (e *StaleOwnerError) Error() string {
	msg := fmt.Sprintf("%s under %s: %v", e.Op, e.Grant, ErrStaleOwner)
	switch {
	case e.Sealed:
		msg += ": " + ErrSealed.Error()
	case e.Revision != 0 && e.HolderKnown && e.Holder.Owner != "":
		msg += fmt.Sprintf(" (shard.%d is at revision %d, held by %s session %s)", e.Grant.Shard, e.Revision, e.Holder.Owner, e.Holder.Session)
	case e.Revision != 0:
		msg += fmt.Sprintf(" (shard.%d is at revision %d)", e.Grant.Shard, e.Revision)
	}
	if e.Cause != nil {
		msg += ": " + e.Cause.Error()
	}
	return msg
}

// Is reports ErrStaleOwner, and ErrSealed for a sealed epoch.
func (e *StaleOwnerError) Is(target error) bool {
	return target == ErrStaleOwner || e.Sealed && target == ErrSealed
}

// Unwrap is the backend's own error.
func (e *StaleOwnerError) Unwrap() error { return e.Cause }

// Store is the persistence a node and the coordinator need. Write, WriteAsync and End are fenced
// by their Grant: the store checks the grant's token against shard.<S> atomically with the write.
// Register and Create take a Grant too but are compare-and-set on the instance key only (DESIGN
// 4): what makes them safe is the fenced write that must follow before anything is answered.
// Rotate and ReleaseShard are compare-and-set on shard.<S> itself.
type Store interface {
	// Bootstrap creates the cluster record and the buckets of its epoch if absent, and returns
	// the record as stored (which may differ from want: the caller decides if that is an error).
	Bootstrap(ctx context.Context, want Cluster) (Cluster, error)
	// Cluster reads the cluster record; ErrNotFound before Bootstrap.
	Cluster(ctx context.Context) (Cluster, error)

	// Assignment reads shard.<S> and its revision (the token). It may be served by any replica
	// and lag behind writes already acknowledged: for display and hints, never for a decision
	// that a newer revision would change.
	Assignment(ctx context.Context, epoch uint64, shard uint32) (Assignment, uint64, error)
	// LatestAssignment reads shard.<S> through the stream leader: it reflects every write
	// acknowledged before the call. After an uncertain write or a conflict, this is the read
	// that decides whether the shard is still yours (DESIGN 4).
	LatestAssignment(ctx context.Context, epoch uint64, shard uint32) (Assignment, uint64, error)
	// ListAssignments returns every shard.<S> of an epoch (deleted ones with Deleted set). Like
	// Assignment it may lag.
	ListAssignments(ctx context.Context, epoch uint64) ([]AssignmentEvent, error)
	// Assign writes shard.<S> if its revision is still expect (0: the key must not exist).
	// Returns the new revision; ErrConflict if the key moved on.
	Assign(ctx context.Context, epoch uint64, shard uint32, a Assignment, expect uint64) (uint64, error)
	// WatchAssignments streams every current shard.<S> and then each change, until ctx ends or
	// the watch fails; then the channel closes. A caller that still needs it opens a new one:
	// the replay of current values makes that safe (drop revisions already seen).
	WatchAssignments(ctx context.Context, epoch uint64) (<-chan AssignmentEvent, error)
	// Rotate rewrites shard.<S> with the grant's own value, compare-on-revision: every write
	// still in flight under the old token will fail the fence. ErrStaleOwner if the grant was
	// no longer current.
	Rotate(ctx context.Context, g Grant) (Grant, error)
	// ReleaseShard deletes shard.<S> only if it is still at the grant's token.
	ReleaseShard(ctx context.Context, g Grant) error

	// Instances lists the instance IDs of a shard (tombstones of ended instances included). The
	// listing covers every instance key written before the call (a backend that reads from a
	// replica checks that the replica has caught up with the stream leader); never create from it.
	Instances(ctx context.Context, epoch uint64, shard uint32) ([]string, error)
	// Load reads an instance record and its revision.
	Load(ctx context.Context, epoch uint64, shard uint32, id string) (Record, uint64, error)
	// Register rewrites the loaded record with the grant's token, if the instance key is still
	// at loadedRev (the proof that the load was current). ErrConflict: reload and retry.
	Register(ctx context.Context, g Grant, id string, rec Record, loadedRev uint64) (uint64, error)
	// Create stores rec, which holds no game state (only its kind, the create command in Create
	// and that command's request), if the instance does not exist (KV Create): a rebuild that
	// finds it makes the instance from the same command. ErrConflict if it exists. Follow it with
	// a fenced Write of the initial state.
	Create(ctx context.Context, g Grant, id string, rec Record) (uint64, error)
	// Write is the fenced write of a record.
	Write(ctx context.Context, g Grant, id string, rec Record) (uint64, error)
	// WriteAsync is Write, pipelined: it returns at once and calls done exactly once with the
	// outcome, possibly before WriteAsync returns and from any goroutine. Callers keep at most
	// one write in flight per instance.
	WriteAsync(g Grant, id string, rec Record, done func(rev uint64, err error))
	// End stores a fenced delete marker for the instance.
	End(ctx context.Context, g Grant, id string) (uint64, error)

	Control

	Close() error
}

// Entry is one value of a key in the control bucket. Deleted marks a delete, a purge or a
// per-message TTL that ran out (then Expired is set too: a marker of the server's, or one a
// watch makes when it finds the key gone; its Revision is then the lease's revision + 1).
type Entry struct {
	Key      string
	Value    []byte
	Revision uint64
	Deleted  bool
	Expired  bool
	// Created is the store's timestamp of this revision: for display only (lease age), never
	// compared with a local clock to decide anything.
	Created time.Time
}

// Control is the control bucket (DESIGN.md section 3): leases with per-message TTLs, hand-offs and
// the operator's placement inputs. Values are JSON; TTLs are whole seconds (at least 1 s).
type Control interface {
	// ControlGet reads a key; ErrNotFound if it is absent, deleted or expired. It may be served
	// by any replica and lag.
	ControlGet(ctx context.Context, key string) (Entry, error)
	// LatestControl reads a key through the stream leader: it reflects every write acknowledged
	// before the call (a lease deciding whether a conflicted renewal was its own uses it).
	LatestControl(ctx context.Context, key string) (Entry, error)
	// ControlCreate writes a key that does not exist (or was deleted or expired), with a TTL if
	// ttl > 0. ErrConflict if it exists.
	ControlCreate(ctx context.Context, key string, value []byte, ttl time.Duration) (uint64, error)
	// ControlUpdate writes a key still at revision expect, with a fresh TTL if ttl > 0 (a renewal).
	// ErrConflict if it moved on.
	ControlUpdate(ctx context.Context, key string, value []byte, expect uint64, ttl time.Duration) (uint64, error)
	// ControlDelete deletes a key still at revision expect (0: whatever its revision). ErrConflict
	// if it moved on: a stale holder's release changes nothing.
	ControlDelete(ctx context.Context, key string, expect uint64) error
	// ControlList returns the live entries whose keys match a KV filter such as "node.*".
	ControlList(ctx context.Context, filter string) ([]Entry, error)
	// ControlWatch streams the current entries matching filter, then every change (markers
	// included), until ctx ends or the watch fails; then the channel closes (see WatchAssignments).
	ControlWatch(ctx context.Context, filter string) (<-chan Entry, error)
}

// ValidTTL checks a lease TTL: JetStream counts per-message TTLs in whole seconds.
func ValidTTL(ttl time.Duration) error {
	if ttl < time.Second || ttl%time.Second != 0 {
		return fmt.Errorf("TTL %v: must be a whole number of seconds, at least 1s", ttl)
	}
	return nil
}

// HeldWrite is a fenced write that a fault test kept from reaching the store: its sender was told
// the outcome is unknown. Deliver lands it late and returns the store's verdict.
type HeldWrite interface {
	Instance() string
	Deliver(ctx context.Context) error
}

// FaultInjector is implemented by backends that let tests lose the answer to a write.
type FaultInjector interface {
	// HoldWrites makes every fenced write of an instance for which hold returns true stay
	// undelivered; the writer sees ErrUnknownOutcome. nil stops holding.
	HoldWrites(hold func(id string) bool)
	// TakeHeld returns the writes held so far and forgets them.
	TakeHeld() []HeldWrite
}

// ShardOf maps an instance ID to its shard: FNV-1a-32(id) mod shards.
func ShardOf(id string, shards uint32) uint32 {
	h := fnv.New32a()
	h.Write([]byte(id))
	return h.Sum32() % shards
}

// ValidID reports whether id matches ^[A-Za-z0-9_-]{1,64}$, wrapping ErrInvalidID if not.
func ValidID(id string) error {
	if len(id) == 0 || len(id) > 64 {
		return fmt.Errorf("%w: %q: length must be 1..64", ErrInvalidID, id)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("%w: %q: only A-Z a-z 0-9 _ - allowed", ErrInvalidID, id)
		}
	}
	return nil
}

// Key names of the storage layout (DESIGN.md section 3).
const (
	ControlBucket = "tickfence-control"
	ClusterKey    = "cluster"
)

// DataBucket names the data bucket of an epoch and partition.
func DataBucket(epoch uint64, partition uint32) string {
	return fmt.Sprintf("tickfence-data-e%d-p%d", epoch, partition)
}

// ShardKey is the key of a shard's assignment; its revision is the token.
func ShardKey(shard uint32) string { return fmt.Sprintf("shard.%d", shard) }

// InstanceKey is the key of an instance record.
func InstanceKey(shard uint32, id string) string { return fmt.Sprintf("inst.%d.%s", shard, id) }
