package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tickfence/tickfence"
	"github.com/tickfence/tickfence/actor"
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
	for tick = 1; a.Winner == "" && tick < 1000; tick++ {
		a.Tick(tick)
	}
	if a.Winner != "ann" || a.Rounds != 1 {
		t.Fatalf("winner %q after %d ticks (rounds %d), want ann: %+v", a.Winner, tick, a.Rounds, a)
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
	send(map[string]any{"type": "join", "player": "ann"})
	if m := send(map[string]any{"type": "move", "player": "ann", "dx": 2, "dy": 3}); fmt.Sprint(m["x"], m["y"]) != "2 3" {
		t.Fatalf("move answered %v", m)
	}
	time.Sleep(300 * time.Millisecond) // a few ticks
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
