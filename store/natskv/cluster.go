package natskv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickfence/tickfence/store"
)

// Buckets on a JetStream cluster (DESIGN 10): every bucket and stream of a tickfence cluster has
// the replicas its cluster record names, its data buckets allow atomic batch publishes, and the
// stream leaders of an epoch's partitions are spread over the servers before the epoch is used.

// replicas is what a bucket or stream this adapter creates gets: the cluster record's once it was
// read and if it records them, else Options.Replicas (default 1).
func (s *Store) replicas() int {
	s.mu.Lock()
	c := s.cluster
	s.mu.Unlock()
	if c != nil && c.Replicas != 0 {
		return int(c.Replicas)
	}
	return max(s.opts.Replicas, 1)
}

// createDataBucket creates (or binds) a data bucket: history revisions kept per key (above 64, the
// KV API's limit), the given replicas, atomic batch publishes allowed on its stream and roll-ups
// refused. The KV API has neither setting, so the stream is created as the KV API makes a
// bucket's, with these two changed, and bound as a bucket. Refusing roll-ups: a message with
// Nats-Rollup (what a KV Purge sends) would erase a record's history (sub) or the whole partition
// (all) — a publish whose headers no subject permission can see, and one tickfence never sends
// to a data bucket (an instance ends with a fenced delete marker, a shard is released with a
// delete): DESIGN 9, nobody purges but admin, through the stream's purge API. A bucket that
// exists already is bound as it is (one made before atomic publishes were set answers
// ErrBatchesOff, and the host writes singly; Init refuses roll-ups on the live epoch's).
func (s *Store) createDataBucket(ctx context.Context, name string, history int64, replicas int) error {
	history = max(history, 1)
	cfg := jetstream.StreamConfig{
		Name:               "KV_" + name,
		Subjects:           []string{"$KV." + name + ".>"},
		MaxMsgsPerSubject:  history,
		MaxBytes:           -1,
		MaxMsgSize:         store.MaxRecordBytes + 1024,
		Storage:            s.opts.Storage,
		Replicas:           replicas,
		AllowRollup:        false,
		DenyDelete:         true,
		Duplicates:         2 * time.Minute,
		MaxMsgs:            -1,
		MaxConsumers:       -1,
		AllowDirect:        true,
		Discard:            jetstream.DiscardNew,
		AllowAtomicPublish: true,
	}
	// Made already (a bootstrap that stopped before its record): bound as it is. A create of a
	// stream that exists with the same configuration succeeds, so ask first, to tell.
	state := StepExists
	if _, err := s.js.Stream(ctx, cfg.Name); errors.Is(err, jetstream.ErrStreamNotFound) {
		state = StepCreated
		_, err = s.js.CreateStream(ctx, cfg)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			state = StepExists
		} else if err != nil {
			return fmt.Errorf("create bucket %s: %w", name, err)
		}
	} else if err != nil {
		return fmt.Errorf("create bucket %s: %w", name, err)
	}
	kv, err := s.bindMade(ctx, name)
	if err != nil {
		return fmt.Errorf("create bucket %s: %w", name, err)
	}
	s.mu.Lock()
	s.buckets[name] = kv
	s.reported[name] = true
	s.mu.Unlock()
	s.step("data bucket", name, state, fmt.Sprintf("%d replicas, %d revisions per key", replicas, history))
	return nil
}

// PartitionStream is the stream of one data bucket as JetStream reports it.
type PartitionStream struct {
	Partition uint32 `json:"partition"`
	Bucket    string `json:"bucket"`
	// Replicas configured, and the servers holding them: the leader first, then the others.
	Replicas int      `json:"replicas"`
	Leader   string   `json:"leader,omitempty"`
	Peers    []string `json:"peers,omitempty"`
	// Current counts the peers (leader included) that are current with the leader.
	Current       int    `json:"current"`
	AtomicPublish bool   `json:"atomic_publish"`
	Sealed        bool   `json:"sealed,omitempty"`
	Messages      uint64 `json:"messages"`
}

// PartitionStreams reports the streams of epoch's data buckets (partitions 0..partitions-1), as
// JetStream's stream info says: replicas, leader, peers.
func (s *Store) PartitionStreams(ctx context.Context, epoch uint64, partitions uint32) ([]PartitionStream, error) {
	out := make([]PartitionStream, 0, partitions)
	for p := range partitions {
		name := store.DataBucket(epoch, p)
		info, err := s.streamInfo(ctx, name)
		if err != nil {
			return nil, err
		}
		out = append(out, partitionStream(p, name, info))
	}
	return out, nil
}

func partitionStream(p uint32, name string, info *jetstream.StreamInfo) PartitionStream {
	ps := PartitionStream{Partition: p, Bucket: name, Replicas: max(info.Config.Replicas, 1),
		AtomicPublish: info.Config.AllowAtomicPublish, Sealed: info.Config.Sealed, Messages: info.State.Msgs}
	if c := info.Cluster; c != nil && c.Leader != "" {
		ps.Leader, ps.Peers, ps.Current = c.Leader, []string{c.Leader}, 1
		for _, r := range c.Replicas {
			ps.Peers = append(ps.Peers, r.Name)
			if r.Current && !r.Offline {
				ps.Current++
			}
		}
	} else if info.Cluster == nil || info.Cluster.Name == "" {
		ps.Current = 1 // a standalone server: the one copy is the current one
	}
	return ps
}

// spreadTimeout bounds SpreadLeaders within Bootstrap and ResetPartition.
const spreadTimeout = 15 * time.Second

// SpreadLeaders moves the stream leaders of epoch's data buckets (partitions 0..partitions-1) so
// that they spread over the servers: JetStream picks each new stream's leader at random among its
// peers, so three partitions on three servers all share one leader about one time in nine and
// are spread only two times in nine. Partitions are taken in order, each given to the least loaded
// of its peers (its current leader on a tie); a partition whose leader is not the one chosen gets a
// leader stepdown request naming the chosen one ($JS.API.STREAM.LEADER.STEPDOWN.<stream> with
// placement.preferred, nats-server ≥ 2.11), and the plan is made again from fresh stream info
// until nothing needs to move. Streams of one replica have one peer: nothing moves. Leaders move
// again when servers restart or fail; this balances a new epoch before anything writes to it.
func (s *Store) SpreadLeaders(ctx context.Context, epoch uint64, partitions uint32) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, spreadTimeout)
		defer cancel()
	}
	var last error // the last stepdown refused, for the error if time runs out
	for {
		infos, err := s.leadersOf(ctx, epoch, partitions)
		if err != nil {
			return err
		}
		moves := planLeaders(infos)
		if len(moves) == 0 {
			return nil
		}
		for _, m := range moves {
			if err := s.stepDown(ctx, m.stream, m.to); err != nil {
				last = err
			}
		}
		// An election takes a moment: wait until the chosen leaders are in place, or replan.
		if err := s.awaitLeaders(ctx, epoch, partitions, moves, 3*time.Second); err != nil {
			return fmt.Errorf("spread leaders of epoch %d: %w (moving %v; last refusal: %v)", epoch, err, moves, last)
		}
	}
}

// awaitLeaders polls the partitions' leaders until every moved stream has a new one, for at most
// wait; it fails only when ctx ends.
func (s *Store) awaitLeaders(ctx context.Context, epoch uint64, partitions uint32, moves []leaderMove, wait time.Duration) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for end := time.Now().Add(wait); time.Now().Before(end); {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		infos, err := s.leadersOf(ctx, epoch, partitions)
		if err != nil {
			return err
		}
		// Done when every moved stream has elected a new leader: the one asked for, or (a transfer
		// is a request, not a promise) another, which the next plan takes into account.
		if !slices.ContainsFunc(moves, func(m leaderMove) bool {
			l := infos[m.partition].leader
			return l == "" || l == m.from
		}) {
			return nil
		}
	}
	return ctx.Err()
}

// spreadLeaders is SpreadLeaders with its own deadline, for the steps that create an epoch's
// buckets: its failure leaves the leaders where JetStream put them, which works, only unevenly.
func (s *Store) spreadLeaders(ctx context.Context, epoch uint64, partitions uint32, replicas int) {
	if replicas < 2 || partitions < 2 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, spreadTimeout)
	defer cancel()
	_ = s.SpreadLeaders(ctx, epoch, partitions)
}

type streamLeader struct {
	stream string
	leader string   // "" while it elects one
	peers  []string // leader and replicas
}

type leaderMove struct {
	partition uint32
	stream    string
	from, to  string
}

func (m leaderMove) String() string { return fmt.Sprintf("%s→%s", m.stream, m.to) }

// leadersOf reads every partition's stream leader and peers, waiting (polling) while one elects
// (or its info cannot be read).
func (s *Store) leadersOf(ctx context.Context, epoch uint64, partitions uint32) ([]streamLeader, error) {
	out := make([]streamLeader, partitions)
	for p := range partitions {
		name := store.DataBucket(epoch, p)
		for {
			info, err := s.streamInfo(ctx, name)
			if errors.Is(err, store.ErrNotFound) {
				return nil, err
			}
			if err == nil {
				ps := partitionStream(p, name, info)
				if ps.Leader != "" || info.Cluster == nil || info.Cluster.Name == "" {
					out[p] = streamLeader{stream: "KV_" + name, leader: ps.Leader, peers: ps.Peers}
					break
				}
			} // else no answer while it elects: ask again
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("stream KV_%s has no leader: %w", name, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return out, nil
}

// planLeaders gives each partition, in order, to the least loaded of its peers (loads counted
// over the plan so far; the current leader wins a tie, then the lower name), and returns the
// partitions whose leader should change.
func planLeaders(infos []streamLeader) []leaderMove {
	load := map[string]int{}
	for _, in := range infos {
		for _, p := range in.peers {
			load[p] += 0
		}
	}
	var moves []leaderMove
	for i, in := range infos {
		if len(in.peers) < 2 {
			load[in.leader]++
			continue
		}
		best := in.leader
		for _, p := range in.peers {
			if load[p] < load[best] || load[p] == load[best] && best != in.leader && p < best {
				best = p
			}
		}
		load[best]++
		if best != in.leader {
			moves = append(moves, leaderMove{partition: uint32(i), stream: in.stream, from: in.leader, to: best})
		}
	}
	return moves
}

// stepDown asks a stream's leader to hand its leadership to the server named to.
func (s *Store) stepDown(ctx context.Context, stream, to string) error {
	req, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": to}})
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	msg, err := s.nc.RequestWithContext(rctx, "$JS.API.STREAM.LEADER.STEPDOWN."+stream, req)
	if err != nil {
		return fmt.Errorf("leader stepdown of %s: %w", stream, err)
	}
	var resp struct {
		Success bool `json:"success"`
		Error   *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return fmt.Errorf("leader stepdown of %s: %w", stream, err)
	}
	if resp.Error != nil {
		return fmt.Errorf("leader stepdown of %s to %s: %s (%d)", stream, to, resp.Error.Description, resp.Error.ErrCode)
	}
	if !resp.Success {
		return errors.New("leader stepdown of " + stream + ": not done")
	}
	return nil
}

// BlobStream is the stream of the blobs Object Store bucket (store.BlobBucket).
const BlobStream = blobStream

// StreamStatus is one stream of a tickfence cluster as its leader reports it: its replicas, which
// are current with the leader and which lag or are offline (tickctl status: whether a server may
// be taken down now).
type StreamStatus struct {
	Stream   string   `json:"stream"`
	Role     string   `json:"role"` // what it holds: control, data p<k>, blobs, effects, audit
	Replicas int      `json:"replicas"`
	Leader   string   `json:"leader,omitempty"`  // "" while it elects one (or could not be asked)
	Current  []string `json:"current,omitempty"` // servers whose replica is current, the leader first
	// Lagging are the other replicas: "name (N operations behind)", or "name (offline)".
	Lagging  []string `json:"lagging,omitempty"`
	Messages uint64   `json:"messages"`
	Err      string   `json:"error,omitempty"` // its info could not be read (no leader answers while it elects)
}

// OK says the stream has a leader and every replica is current.
func (s StreamStatus) OK() bool {
	return s.Err == "" && s.Leader != "" && len(s.Current) == s.Replicas && len(s.Lagging) == 0
}

// StreamStatus asks a stream's leader about it (within 3 s: a stream without a leader does not
// answer).
func (s *Store) StreamStatus(ctx context.Context, role, stream string) StreamStatus {
	st := StreamStatus{Stream: stream, Role: role}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	str, err := s.js.Stream(ctx, stream)
	var info *jetstream.StreamInfo
	if err == nil {
		info, err = str.Info(ctx)
	}
	if err != nil {
		st.Err = err.Error()
		return st
	}
	st.Replicas, st.Messages = max(info.Config.Replicas, 1), info.State.Msgs
	c := info.Cluster
	if c == nil || c.Name == "" { // a standalone server: its one copy is the current one
		st.Leader, st.Current = "(standalone)", []string{"(standalone)"}
		if c != nil && c.Leader != "" {
			st.Leader, st.Current = c.Leader, []string{c.Leader}
		}
		return st
	}
	if c.Leader == "" {
		return st
	}
	st.Leader, st.Current = c.Leader, []string{c.Leader}
	for _, r := range c.Replicas {
		switch {
		case r.Offline:
			st.Lagging = append(st.Lagging, r.Name+" (offline)")
		case !r.Current:
			st.Lagging = append(st.Lagging, fmt.Sprintf("%s (%d operations behind)", r.Name, r.Lag))
		default:
			st.Current = append(st.Current, r.Name)
		}
	}
	return st
}
