package store

import (
	"fmt"
	"strconv"
	"strings"
)

// Keys and values of the control bucket (DESIGN.md section 3). Values are JSON.

// Control keys.
const (
	LeaderKey = "leader"
)

// NodeKey is a node's lease.
func NodeKey(node string) string { return "node." + node }

// MoveKey is a shard's graceful hand-off.
func MoveKey(shard uint32) string { return "move." + strconv.FormatUint(uint64(shard), 10) }

// PinKey, DrainKey and WeightKey are the operator's placement inputs.
func PinKey(shard uint32) string   { return "pin." + strconv.FormatUint(uint64(shard), 10) }
func DrainKey(node string) string  { return "drain." + node }
func WeightKey(node string) string { return "weight." + node }

// SplitKey splits a control key into its kind and name ("node", "n1").
func SplitKey(key string) (kind, name string) {
	kind, name, _ = strings.Cut(key, ".")
	return kind, name
}

// ShardName parses the shard number of a move.<S> or pin.<S> key's name.
func ShardName(name string) (uint32, error) {
	n, err := strconv.ParseUint(name, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("shard %q: %w", name, err)
	}
	return uint32(n), nil
}

// LeaderRecord is the value of leader.
type LeaderRecord struct {
	Node    string `json:"node"`
	Session string `json:"session"`
}

// NodeRecord is the value of node.<id>: the lease of one node session and its load report.
type NodeRecord struct {
	Session   string `json:"session"`
	Leaving   bool   `json:"leaving,omitempty"`
	Shards    int    `json:"shards"`
	Instances int    `json:"instances"`
	// TickCPU is seconds of tick work per second, by shard, over the last report interval.
	TickCPU map[uint32]float64 `json:"tick_cpu,omitempty"`
	// P99LatenessMs is the node's p99 tick lateness over the last report interval.
	P99LatenessMs float64 `json:"p99_lateness_ms"`
	// Failed lists the instances out of service on this node because the game's code failed in
	// them (answered instance_failed), at most MaxFailedReported of them; FailedCount counts them all.
	Failed      []FailedInstance `json:"failed,omitempty"`
	FailedCount int              `json:"failed_count,omitempty"`
}

// MaxFailedReported bounds the failed instances a node lists in its lease (the lease stays small).
const MaxFailedReported = 64

// FailedInstance is an instance out of service on its owner because the game's code failed in
// it: a panic in Handle or Tick (cause "panic"), a state its Kind could not Restore ("restore"),
// a kind the node does not know ("unknown_kind"), a record it could not read ("bad_record"), an
// invalid effect from an Emitter of the game's own ("invalid_effect"). It answers every command
// instance_failed until an operator reloads it (tickctl instance reload) or its shard moves.
type FailedInstance struct {
	ID     string `json:"id"`
	Shard  uint32 `json:"shard"`
	Cause  string `json:"cause"`
	Reason string `json:"reason"`
	// Since is when it failed, Unix ms on the node's clock (for display only).
	Since int64 `json:"since"`
}

// Move states.
const (
	MoveRequested = "requested" // written by the coordinator (or tickctl): the old owner should hand off
	MoveReleased  = "released"  // written by the old owner: flushed, stopped ticking at StoppedAt
	MoveDone      = "done"      // written by the coordinator once the new owner is assigned
)

// MoveRecord is the value of move.<S>.
type MoveRecord struct {
	From        string `json:"from"`
	FromSession string `json:"from_session"`
	// FromGrant is the grant the old owner held when the move was requested: a later grant to the
	// same session (given back to it) supersedes the move.
	FromGrant string `json:"from_grant,omitempty"`
	To        string `json:"to"`
	State     string `json:"state"`
	Reason    string `json:"reason,omitempty"`
	// StoppedAt is the old owner's wall clock (Unix ns) when its instances stopped ticking; the
	// new owner uses it only to report the hand-off pause.
	StoppedAt int64  `json:"stopped_at,omitempty"`
	Result    string `json:"result,omitempty"` // ok, timeout
}

// WeightRecord is the value of weight.<node>.
type WeightRecord struct {
	Weight float64 `json:"weight"`
}
