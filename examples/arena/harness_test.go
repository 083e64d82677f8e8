package main

import (
	"testing"

	"github.com/tickfence/tickfence/actortest"
)

// The arena's commands as a client sends them.
type joinCmd struct {
	Type   string `msgpack:"type"` // "join"
	Player string `msgpack:"player"`
}

type moveCmd struct {
	Type   string `msgpack:"type"` // "move"
	Player string `msgpack:"player"`
	DX     int    `msgpack:"dx"`
	DY     int    `msgpack:"dy"`
}

// moved is a move's answer.
type moved struct {
	X    int  `msgpack:"x"`
	Y    int  `msgpack:"y"`
	HP   int  `msgpack:"hp"`
	Safe bool `msgpack:"safe"`
	Zone int  `msgpack:"zone"`
}

// A round through the harness, as players play it: ann walks into the zone, bob stays in his
// corner and loses; the arena moves to another node every 10 ticks on the way, and the same
// inputs played again from scratch give the same states.
func TestRoundWithHarness(t *testing.T) {
	h := actortest.New(t, Kind{}, actortest.Create(map[string]any{"zone": 20}), actortest.RoundTripEvery(10))
	ann, bob := actortest.Player("ann"), actortest.Player("bob")
	h.SendAs(ann, joinCmd{"join", "ann"}).WantResult(map[string]any{"joined": "ann", "x": 0, "y": 0})
	h.SendAs(bob, joinCmd{"join", "bob"}).WantResult(map[string]any{"joined": "bob", "x": Field, "y": 0})

	// A player moves only itself, a step at a time, and never starts a round.
	h.SendAs(bob, moveCmd{"move", "ann", 1, 1}).WantCode("forbidden")
	h.SendAs(bob, moveCmd{"move", "bob", MaxStep + 1, 0}).WantCode("bad_request")
	h.SendAs(bob, map[string]any{"type": "restart"}).WantCode("forbidden")
	h.SendAs(ann, map[string]any{"type": "dance", "player": "ann"}).WantCode("bad_request")
	h.SendAs(actortest.Player("cy"), moveCmd{"move", "cy", 1, 0}).WantCode("rejected") // not joined

	// ann walks to the centre, one step a tick.
	var m moved
	for !m.Safe {
		h.SendAs(ann, moveCmd{"move", "ann", MaxStep, MaxStep}).Decode(&m)
		h.Tick(1)
	}
	if m.X != m.Y || m.HP <= 0 || m.HP >= StartHP { // she lost health on the way, outside the zone
		t.Fatalf("ann reached the zone at %+v", m)
	}
	n := h.TickUntil(1000, func() bool { return h.Logic().(*Arena).Winner != "" })
	t.Logf("bob lasted %d more ticks", n)

	var a Arena
	h.State(&a)
	if a.Winner != "ann" || a.Rounds != 1 || a.Zone >= 20 || a.Players[1].Name != "bob" || a.Players[1].HP != 0 {
		t.Fatalf("after the round: %+v", a)
	}
	h.SendAs(bob, moveCmd{"move", "bob", 1, 0}).WantCode("rejected") // bob is out
	h.Send(map[string]any{"type": "status"}).WantResult(map[string]any{"winner": "ann", "rounds": 1, "alive": 1, "players": 2})

	// The game's gateway starts the next round: everyone whole, back in the corners.
	h.SendAs(actortest.TrustedFor("ann"), map[string]any{"type": "restart"}).WantResult(map[string]any{"winner": "", "alive": 2, "zone": 20})
	h.Tick(5)
	h.State(&a)
	// Both in their corners, outside the zone: a point of health a tick.
	if a.Winner != "" || a.Players[0].HP != StartHP-5 || a.Players[0].X != 0 || a.Players[1].X != Field {
		t.Fatalf("after the restart: %+v", a)
	}
	h.CheckRoundTrip()
	h.CheckDeterminism()
}

// The create's zone is checked; a full arena refuses joins.
func TestCreateAndFullWithHarness(t *testing.T) {
	if _, res := actortest.TryNew(t, Kind{}, actortest.Create(map[string]any{"zone": 1000})); res.Code() != "bad_request" {
		t.Fatalf("a zone larger than the field: %v", res)
	}
	h := actortest.New(t, Kind{})
	for i := range MaxPlayers {
		h.Send(joinCmd{"join", string(rune('a'+i)) + "x"}).WantOK()
	}
	h.Send(joinCmd{"join", "late"}).WantCode("rejected")
	h.Send(joinCmd{"join", "ax"}).WantResult(map[string]any{"joined": "ax"}) // joining twice is harmless
	h.Tick(3)
	h.CheckDeterminism()
}
