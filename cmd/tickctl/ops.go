package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tickfence/tickfence/auth"
	"github.com/tickfence/tickfence/coordinator"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/natskv"
)

// Operator commands: placement inputs live in the control bucket (drain.<node>, pin.<S>,
// weight.<node>); moves are move.<S> records the old owner and the coordinator carry out.

func (c *cli) state(ctx context.Context) (*coordinator.State, error) {
	return coordinator.ReadState(ctx, c.st)
}

// statusJSON is `tickctl status --json`: the cluster's state, its replicas (1 for a record that
// does not name them) and the stream of each data bucket of the current epoch.
type statusJSON struct {
	*coordinator.State
	Replicas   uint32                   `json:"replicas"`
	Partitions []natskv.PartitionStream `json:"partitions"`
	// Streams is every stream of the cluster (control bucket, data partitions, blobs, effects,
	// audit) as its leader reports it; StreamsOK says each has a leader and every replica current.
	Streams   []natskv.StreamStatus `json:"streams"`
	StreamsOK bool                  `json:"streams_ok"`
}

func (c *cli) status(ctx context.Context) error {
	s, err := c.state(ctx)
	if err != nil {
		return err
	}
	parts, err := c.st.PartitionStreams(ctx, s.Cluster.Epoch, s.Cluster.Partitions)
	if err != nil {
		return fmt.Errorf("data buckets of epoch %d: %w", s.Cluster.Epoch, err)
	}
	streams := c.streams(ctx, s.Cluster)
	allOK := true
	for _, st := range streams {
		allOK = allOK && st.OK()
	}
	if c.g.json {
		return c.printJSON(statusJSON{State: s, Replicas: s.Cluster.ReplicasOr1(), Partitions: parts, Streams: streams, StreamsOK: allOK})
	}
	leader := "(none)"
	if s.Leader != nil {
		leader = s.Leader.Node
	}
	unassigned := 0
	for _, sh := range s.Shards {
		if sh.Revision == 0 {
			unassigned++
		}
	}
	fmt.Fprintf(c.out, "cluster: %s, epoch %d; coordinator leader: %s\n", shape(s.Cluster), s.Cluster.Epoch, leader)
	fmt.Fprintf(c.out, "imbalance (max/mean node load): %.2f; unassigned shards: %d; moves under way: %d\n", s.Imbalance, unassigned, len(s.Moves))
	for _, st := range s.Stuck {
		fmt.Fprintf(c.out, "warning: %s is leaving but cannot hand off its %d shards: every other node is drained (%s); undrain one\n",
			st.Node, st.Shards, strings.Join(st.Drained, ", "))
	}
	fmt.Fprintln(c.out)
	if err := c.streamTable(streams, allOK); err != nil {
		return err
	}
	fmt.Fprintln(c.out)
	if err := c.partitionTable(parts); err != nil {
		return err
	}
	fmt.Fprintln(c.out)
	return c.nodeTable(s)
}

// streams asks every stream of the cluster about its replicas: the control bucket (leases, the
// shards' grants: its leader's loss stops every node's renewals), the data partitions of the
// epoch, blobs, effects and audit.
func (c *cli) streams(ctx context.Context, cl store.Cluster) []natskv.StreamStatus {
	out := []natskv.StreamStatus{c.st.StreamStatus(ctx, "control", "KV_"+store.ControlBucket)}
	for p := range cl.Partitions {
		out = append(out, c.st.StreamStatus(ctx, fmt.Sprintf("data p%d", p), "KV_"+store.DataBucket(cl.Epoch, p)))
	}
	return append(out, c.st.StreamStatus(ctx, "blobs", natskv.BlobStream),
		c.st.StreamStatus(ctx, "effects", natscmd.EffectsStream),
		c.st.StreamStatus(ctx, "audit", auth.AuditStream))
}

// streamTable shows one line per stream: its leader, the replicas current with it and those
// lagging or offline; and the readiness of a rolling restart.
func (c *cli) streamTable(streams []natskv.StreamStatus, allOK bool) error {
	w := c.table()
	fmt.Fprintln(w, "STREAM\tHOLDS\tREPLICAS\tLEADER\tCURRENT\tLAGGING")
	bad := 0
	for _, st := range streams {
		leader, current, lagging := st.Leader, strings.Join(st.Current, ","), strings.Join(st.Lagging, ", ")
		switch {
		case st.Err != "":
			leader, current, lagging = "(no answer: "+st.Err+")", "-", "-"
		case leader == "":
			leader, current = "(none: electing)", "-"
		}
		if current == "" {
			current = "-"
		}
		if lagging == "" {
			lagging = "-"
		}
		if !st.OK() {
			bad++
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%s\n", st.Stream, st.Role, st.Replicas, leader, current, lagging)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if allOK {
		fmt.Fprintf(c.out, "streams: all %d led, every replica current (safe to take one server down)\n", len(streams))
	} else {
		fmt.Fprintf(c.out, "streams: %d of %d without a leader or with a replica not current: wait before taking a server down\n", bad, len(streams))
	}
	return nil
}

// partitionTable shows each data bucket's stream: replicas (how many are current), its leader
// and the servers holding it.
func (c *cli) partitionTable(parts []natskv.PartitionStream) error {
	w := c.table()
	fmt.Fprintln(w, "PARTITION\tBUCKET\tREPLICAS\tCURRENT\tLEADER\tPEERS\tMESSAGES")
	for _, p := range parts {
		leader, peers := p.Leader, strings.Join(p.Peers, ",")
		if leader == "" {
			leader, peers = "(none: electing)", "-"
		}
		if p.Sealed {
			leader += " (sealed)"
		}
		fmt.Fprintf(w, "%d\t%s\t%d\t%d\t%s\t%s\t%d\n", p.Partition, p.Bucket, p.Replicas, p.Current, leader, peers, p.Messages)
	}
	return w.Flush()
}

func (c *cli) nodeTable(s *coordinator.State) error {
	w := c.table()
	stuck := map[string]bool{}
	for _, st := range s.Stuck {
		stuck[st.Node] = true
	}
	fmt.Fprintln(w, "NODE\tSESSION\tSHARDS\tINSTANCES\tTICK CPU\tP99 LATENESS\tLEASE AGE\tWEIGHT\tSTATE")
	for _, n := range s.Nodes {
		state := "active"
		switch {
		case n.Record.Leaving && stuck[n.ID]:
			state = "leaving (stuck: peers drained)"
		case n.Record.Leaving:
			state = "leaving"
		case n.Drained:
			state = "drained"
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%.1f%%\t%.2fms\t%s\t%g\t%s\n", n.ID, n.Record.Session, n.Owned, n.Instances,
			100*n.Load, n.Record.P99LatenessMs, n.LeaseAge.Round(10*time.Millisecond), n.Weight, state)
	}
	if len(s.Nodes) == 0 {
		fmt.Fprintln(w, "(no live node)")
	}
	return w.Flush()
}

func (c *cli) nodes(ctx context.Context) error {
	s, err := c.state(ctx)
	if err != nil {
		return err
	}
	if c.g.json {
		return c.printJSON(s.Nodes)
	}
	return c.nodeTable(s)
}

func shardArg(arg string, shards uint32) (uint32, error) {
	n, err := strconv.ParseUint(arg, 10, 32)
	if err != nil || uint32(n) >= shards {
		return 0, usageError{fmt.Sprintf("shard %q: want a number in 0..%d", arg, shards-1)}
	}
	return uint32(n), nil
}

func (c *cli) move(ctx context.Context, shardS, node string) error {
	sh, err := shardArg(shardS, c.cl.Shards)
	if err != nil {
		return err
	}
	from, err := coordinator.RequestMove(ctx, c.st, sh, node)
	if errors.Is(err, coordinator.ErrAlreadyPlaced) {
		return c.done(map[string]any{"shard": sh, "owner": node, "moved": false}, "shard %d is already on %s", sh, node)
	}
	if err != nil {
		return err
	}
	start := time.Now()
	owner, err := c.waitOwner(ctx, sh, func(a store.Assignment) bool { return a.Owner != from.Owner })
	if err != nil {
		return err
	}
	return c.done(map[string]any{"shard": sh, "from": from.Owner, "to": owner, "seconds": time.Since(start).Seconds()},
		"shard %d moved %s → %s in %v", sh, from.Owner, owner, time.Since(start).Round(time.Millisecond))
}

func (c *cli) waitOwner(ctx context.Context, sh uint32, ok func(store.Assignment) bool) (string, error) {
	for {
		a, _, err := c.st.Assignment(ctx, c.cl.Epoch, sh)
		if err == nil && ok(a) {
			return a.Owner, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("shard %d: %w (the move record stays; the coordinator may still finish it)", sh, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *cli) done(v any, format string, args ...any) error {
	if c.g.json {
		return c.printJSON(v)
	}
	fmt.Fprintf(c.out, format+"\n", args...)
	return nil
}

func (c *cli) drain(ctx context.Context, node string) error {
	if err := store.ValidID(node); err != nil {
		return usageError{err.Error()}
	}
	if err := coordinator.Drain(ctx, c.st, node); err != nil {
		return err
	}
	start := time.Now()
	last := -1
	for {
		s, err := c.state(ctx)
		if err != nil {
			return err
		}
		n, live := s.Live(node)
		if !live || n.Owned == 0 {
			return c.done(map[string]any{"node": node, "shards": 0, "seconds": time.Since(start).Seconds()},
				"%s drained in %v: it owns no shard", node, time.Since(start).Round(time.Millisecond))
		}
		if n.Owned != last && !c.g.json {
			fmt.Fprintf(os.Stderr, "draining %s: %d shards left (%d instances)\n", node, n.Owned, n.Instances)
			last = n.Owned
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s still owns %d shards after %v (the drain stays in place; undrain to cancel)", node, n.Owned, c.g.timeout)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (c *cli) undrain(ctx context.Context, node string) error {
	if err := coordinator.Undrain(ctx, c.st, node); err != nil {
		return err
	}
	return c.done(map[string]any{"node": node, "drained": false}, "%s undrained: the coordinator may place shards on it again", node)
}

func (c *cli) pin(ctx context.Context, shardS string, on bool) error {
	sh, err := shardArg(shardS, c.cl.Shards)
	if err != nil {
		return err
	}
	if err := coordinator.Pin(ctx, c.st, sh, on); err != nil {
		return err
	}
	if on {
		return c.done(map[string]any{"shard": sh, "pinned": true}, "shard %d pinned: the rebalancer leaves it where it is", sh)
	}
	return c.done(map[string]any{"shard": sh, "pinned": false}, "shard %d unpinned", sh)
}

func (c *cli) weight(ctx context.Context, node, ws string) error {
	w, err := strconv.ParseFloat(ws, 64)
	if err != nil || w <= 0 || w > 1000 {
		return usageError{fmt.Sprintf("weight %q: want a number in (0, 1000]", ws)}
	}
	if err := coordinator.SetWeight(ctx, c.st, node, w); err != nil {
		return err
	}
	return c.done(map[string]any{"node": node, "weight": w}, "%s weight %g", node, w)
}

func (c *cli) rebalance(ctx context.Context, dryRun bool) error {
	s, err := c.state(ctx)
	if err != nil {
		return err
	}
	plan := s.Plan(int(c.cl.Shards), c.g.tolerance)
	if dryRun || len(plan.Moves) == 0 {
		if c.g.json {
			return c.printJSON(plan)
		}
		fmt.Fprintf(c.out, "imbalance now %.2f, after the plan %.2f; %d moves\n", plan.Before, plan.After, len(plan.Moves))
		w := c.table()
		if len(plan.Moves) > 0 {
			fmt.Fprintln(w, "SHARD\tFROM\tTO")
		}
		sort.Slice(plan.Moves, func(i, j int) bool { return plan.Moves[i].Shard < plan.Moves[j].Shard })
		for _, m := range plan.Moves {
			fmt.Fprintf(w, "%d\t%s\t%s\n", m.Shard, m.From, m.To)
		}
		return w.Flush()
	}
	start := time.Now()
	pr := newProgress(c.g.json)
	done, err := coordinator.ApplyPlan(ctx, c.st, c.cl.Epoch, plan.Moves, c.g.maxMoves, func(p coordinator.ApplyProgress) {
		switch {
		case p.Refused != nil:
			pr.clear()
			fmt.Fprintf(os.Stderr, "shard %d: not moved: %v\n", p.Move.Shard, p.Refused)
		default:
			pr.show("rebalancing: %d/%d moves done", p.Done, p.Total)
		}
	})
	pr.clear()
	if err != nil {
		return err
	}
	after, err := c.state(ctx)
	if err != nil {
		return err
	}
	return c.done(map[string]any{"moves": done, "imbalance_before": plan.Before, "imbalance_after": after.Imbalance,
		"seconds": time.Since(start).Seconds()},
		"rebalanced: %d moves in %v; imbalance %.2f → %.2f", done, time.Since(start).Round(time.Millisecond), plan.Before, after.Imbalance)
}
