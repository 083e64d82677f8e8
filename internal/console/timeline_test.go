package console

import (
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tickfence/tickfence/coordinator"
	"github.com/tickfence/tickfence/store"
)

func bare() *Console {
	return &Console{cfg: Config{LeaseTTL: 2 * time.Second, LeaseMargin: 500 * time.Millisecond, History: time.Minute},
		log: slog.New(slog.DiscardHandler), changed: make(chan struct{}), lateness: map[string][]point{},
		joined: map[string]time.Time{}, lapsed: map[string]bool{}, moves: map[uint32]recentMove{}, plans: map[string]planned{}}
}

func control(key string, v any, deleted, expired bool) coordinator.Change {
	b, _ := json.Marshal(v)
	return coordinator.Change{Control: &store.Entry{Key: key, Value: b, Deleted: deleted, Expired: expired}}
}

func grant(sh uint32, rev uint64, owner, session string, prev coordinator.ShardState) coordinator.Change {
	return coordinator.Change{Shard: &store.AssignmentEvent{Shard: sh, Revision: rev,
		Assignment: store.Assignment{Owner: owner, Session: session}}, Prev: prev}
}

func on(owner, session string, rev uint64) coordinator.ShardState {
	return coordinator.ShardState{Owner: store.Assignment{Owner: owner, Session: session}, Revision: rev}
}

// TestTimeline: what the console makes of the changes its watches report — a grant after a move
// record is a hand-off, a grant away from a live owner without one is a failover, a rotation is
// nothing; grants of the same kind within two seconds are one entry; a lease that expires, a
// node that joins, a leader's renewal (nothing) and a new leader.
func TestTimeline(t *testing.T) {
	c := bare()
	c.onChange(control(store.NodeKey("n1"), store.NodeRecord{Session: "s1", P99LatenessMs: 2}, false, false))
	c.onChange(control(store.LeaderKey, store.LeaderRecord{Node: "n1", Session: "s1"}, false, false))
	c.onChange(control(store.LeaderKey, store.LeaderRecord{Node: "n1", Session: "s1"}, false, false)) // a renewal
	for sh := range uint32(3) {
		c.onChange(grant(sh, 10+uint64(sh), "n1", "s1", coordinator.ShardState{}))
	}
	c.onChange(control(store.MoveKey(1), store.MoveRecord{From: "n1", To: "n2", State: store.MoveRequested}, false, false))
	c.onChange(grant(1, 20, "n2", "s2", on("n1", "s1", 11)))
	c.onChange(grant(2, 21, "n1", "s1", on("n1", "s1", 12))) // a rotation
	c.onChange(control(store.NodeKey("n1"), nil, true, true))
	c.onChange(grant(0, 22, "n2", "s2", on("n1", "s1", 10)))
	c.onChange(grant(2, 23, "n2", "s2", on("n1", "s1", 21)))
	var got []string
	for _, e := range c.timeline {
		s := e.Kind
		if e.Count > 0 {
			s += " " + e.From + ">" + e.To + " " + join(e.Shards)
		}
		got = append(got, s)
	}
	want := []string{"joined", "leader", "placed >n1 0,1,2", "handoff n1>n2 1", "lease-expired", "failover n1>n2 0,2"}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Fatalf("timeline\n got %q\nwant %q", got, want)
	}
	if c.timeline[5].Count != 2 {
		t.Errorf("the failover entry counts %d shards, want 2", c.timeline[5].Count)
	}
	if pts := c.lateness["n1"]; len(pts) != 1 || pts[0].Ms != 2 {
		t.Errorf("n1's lateness points: %+v", pts)
	}
}

func join(shards []uint32) string {
	var parts []string
	for _, s := range shards {
		parts = append(parts, strconv.FormatUint(uint64(s), 10))
	}
	return strings.Join(parts, ",")
}

// TestNodeStates: a node's state on the page, from its lease age, record, drain and shards.
func TestNodeStates(t *testing.T) {
	c := bare()
	for _, tc := range []struct {
		n    coordinator.NodeView
		want string
	}{
		{coordinator.NodeView{Owned: 3, LeaseAge: 300 * time.Millisecond}, "serving"},
		{coordinator.NodeView{Owned: 0, LeaseAge: 300 * time.Millisecond}, "joining"},
		{coordinator.NodeView{Owned: 3, Drained: true}, "draining"},
		{coordinator.NodeView{Owned: 0, Drained: true}, "drained"},
		{coordinator.NodeView{Owned: 3, Record: store.NodeRecord{Leaving: true}}, "leaving"},
		{coordinator.NodeView{Owned: 3, LeaseAge: 1600 * time.Millisecond}, "unrenewed"}, // past 2 s − 500 ms
		{coordinator.NodeView{Owned: 3, LeaseAge: 1400 * time.Millisecond}, "serving"},
	} {
		if got := c.nodeInfo(tc.n, false, time.Now()).State; got != tc.want {
			t.Errorf("%+v: %s, want %s", tc.n, got, tc.want)
		}
	}
}
