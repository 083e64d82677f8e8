package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tickfence/tickfence"
	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/shard/natscmd"
)

func command(t *testing.T, m map[string]any) actor.Command {
	t.Helper()
	b, err := msgpack.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return actor.Command{Type: m["type"].(string), Body: b, Sender: actor.Sender{Trusted: true}}
}

// TestPlayersMoveOnlyThemselves: an untrusted sender moves and joins only as its own player and
// cannot restart the round.
func TestPlayersMoveOnlyThemselves(t *testing.T) {
	l, err := Kind{}.New("a", command(t, map[string]any{"type": "create", "kind": "arena"}))
	if err != nil {
		t.Fatal(err)
	}
	a := l.(*Arena)
	ann := actor.Sender{Name: "ann", Player: "ann"}
	as := func(m map[string]any) actor.Command { c := command(t, m); c.Sender = ann; return c }
	if _, err := a.Handle(0, as(map[string]any{"type": "join", "player": "ann"})); err != nil {
		t.Fatalf("ann joins as ann: %v", err)
	}
	for _, m := range []map[string]any{{"type": "join", "player": "bob"}, {"type": "move", "player": "bob", "dx": 1}, {"type": "restart"}} {
		if _, err := a.Handle(0, as(m)); err == nil {
			t.Errorf("ann's %v was applied", m)
		}
	}
}

// The rules: the zone shrinks, fighters outside it lose health, the last one standing wins; a
// restored arena goes on from where it was.
func TestArenaRules(t *testing.T) {
	l, err := (Kind{}).New("a", command(t, map[string]any{"type": "create", "kind": "arena", "zone": 20}))
	if err != nil {
		t.Fatal(err)
	}
	a := l.(*Arena)
	for _, p := range []string{"ann", "bob"} {
		if _, err := a.Handle(0, command(t, map[string]any{"type": "join", "player": p})); err != nil {
			t.Fatal(err)
		}
	}
	// ann walks to the centre; bob stays in his corner, outside the zone.
	for range 20 {
		if _, err := a.Handle(0, command(t, map[string]any{"type": "move", "player": "ann", "dx": 3, "dy": 3})); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Handle(0, command(t, map[string]any{"type": "move", "player": "bob", "dx": 9})); err == nil {
		t.Fatal("a move longer than MaxStep was accepted")
	}
	var tick uint64
	frames := 0
	for tick = 1; a.Winner == "" && tick < 1000; tick++ {
		a.Tick(tick)
		frames += len(a.TakeFrames())
	}
	if a.Winner != "ann" || a.Rounds != 1 {
		t.Fatalf("winner %q after %d ticks (rounds %d), want ann: %+v", a.Winner, tick, a.Rounds, a)
	}
	// A frame every FrameEvery ticks, and one when the round ended.
	last := tick - 1
	want := int(last / FrameEvery)
	if last%FrameEvery != 0 {
		want++ // the round's end, between two
	}
	if frames != want {
		t.Fatalf("%d frames in %d ticks; want one every %d and one at the round's end (%d)", frames, last, FrameEvery, want)
	}
	if a.Zone >= 20 {
		t.Fatalf("the zone never shrank: %d", a.Zone)
	}
	b, _ := a.MarshalState()
	back, err := (Kind{}).Restore("a", b)
	if err != nil {
		t.Fatal(err)
	}
	if r := back.(*Arena); r.Winner != "ann" || r.Rounds != 1 || r.LastTick != a.LastTick {
		t.Fatalf("restored arena: %+v", r)
	}
	if _, err := (Kind{}).New("b", command(t, map[string]any{"type": "create", "kind": "arena", "zone": 1000})); err == nil {
		t.Fatal("a zone larger than the field was accepted")
	}
}

// The arena runs on a real tickfence node (an embedded NATS JetStream server) through the
// exported API only, and its commands go over NATS.
func TestArenaOnANode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	node, err := tickfence.Start(ctx, tickfence.Options{Kinds: []actor.Kind{Kind{}}, NodeID: "test", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	c, err := node.Client()
	if err != nil {
		t.Fatal(err)
	}
	send := func(cmd map[string]any) map[string]any {
		t.Helper()
		r, err := c.SendMap(ctx, "arena-t", "", cmd)
		if err != nil || !r.OK {
			t.Fatalf("%v: %v %v", cmd, err, r.Error)
		}
		m, _ := r.Result.(map[string]any)
		return m
	}
	send(map[string]any{"type": "create", "kind": "arena"})
	w, err := c.WatchDurable(ctx, "arena-t")
	if err != nil {
		t.Fatal(err)
	}
	send(map[string]any{"type": "join", "player": "ann"})
	if m := send(map[string]any{"type": "move", "player": "ann", "dx": 2, "dy": 3}); fmt.Sprint(m["x"], m["y"]) != "2 3" {
		t.Fatalf("move answered %v", m)
	}
	// The arena's frames, watched durably: one showing ann comes once the write of its tick is stored.
	for deadline := time.After(10 * time.Second); ; {
		select {
		case f := <-w.C:
			var st status
			if err := msgpack.Unmarshal(f.Payload, &st); err != nil {
				t.Fatal(err)
			}
			if st.Players != 1 {
				continue
			}
			t.Logf("durable frame of tick %d (stored %d when it left): %+v", f.Tick, f.Stored, st)
		case <-deadline:
			t.Fatal("no durable frame showing ann in 10 s")
		}
		break
	}
	if m := send(map[string]any{"type": "status"}); m["players"] == nil {
		t.Fatalf("status answered %v", m)
	} else {
		t.Logf("status: %v", m)
	}
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer scancel()
	if err := node.Stop(sctx); err != nil {
		t.Fatal(err)
	}
}

// TestFollowSaysRewindsAndStoredWinners: the bots' client prints a rewind its watch reports, and
// announces a round's winner once, however many frames show it.
func TestFollowSaysRewindsAndStoredWinners(t *testing.T) {
	ch := make(chan natscmd.Frame, 8)
	frame := func(tick uint64, rewound bool, st status) {
		st.Tick = tick
		b, _ := msgpack.Marshal(st)
		f := natscmd.Frame{Payload: b, Rewound: rewound}
		f.Tick, f.Stored = tick, tick
		ch <- f
	}
	frame(10, false, status{Players: 2, Alive: 2, Rounds: 3, Winner: "bob"}) // won before we watched
	frame(15, false, status{Players: 2, Alive: 2, Rounds: 3})
	frame(18, true, status{Players: 2, Alive: 2, Rounds: 3})
	frame(20, false, status{Players: 2, Alive: 1, Rounds: 4, Winner: "ann"})
	frame(25, false, status{Players: 2, Alive: 1, Rounds: 4, Winner: "ann"})
	close(ch)
	var out strings.Builder
	var won []int
	follow(context.Background(), "a", &natscmd.Watch{C: ch}, &out, time.Hour, func(r int) { won = append(won, r) })
	if !strings.Contains(out.String(), "a: rewound") || strings.Count(out.String(), "won by") != 1 || len(won) != 1 || won[0] != 4 {
		t.Fatalf("printed:\n%swon %v; want one rewind and round 4 won by ann, once", out.String(), won)
	}
}
