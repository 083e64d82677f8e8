package actortest_test

import (
	"bytes"
	"fmt"

	"github.com/tickfence/tickfence/actor/dungeon"
	"github.com/tickfence/tickfence/actortest"
)

// t stands for the test's *testing.T in the examples (func TestDungeon(t *testing.T) { ... }):
// an example has none. This one prints the failure, and the harness then panics.
var t actortest.TB = exampleT{}

type exampleT struct{}

func (exampleT) Helper() {}
func (exampleT) Fatalf(format string, args ...any) {
	fmt.Printf("FAIL: "+format+"\n", args...)
}

// The demo dungeon's boss fight, tested: typed commands and their answers, ticks, the effects
// and frames the game made, its state, and the checks tickfence relies on.
func Example() {
	h := actortest.New(t, dungeon.Kind{FrameEvery: 5}, actortest.Create(map[string]any{"boss_hp": 300}))

	type command struct {
		Type   string `msgpack:"type"`
		Player string `msgpack:"player"`
	}
	var joined struct {
		Players int `msgpack:"players"`
	}
	h.SendAs(actortest.Player("ada"), command{Type: "join", Player: "ada"}).Decode(&joined)
	fmt.Println("players:", joined.Players)
	fmt.Println("ada attacking for bob:", h.SendAs(actortest.Player("ada"), command{Type: "attack", Player: "bob"}).Code())

	// One attack a tick until the boss is dead and refuses them.
	for h.SendAs(actortest.Player("ada"), command{Type: "attack", Player: "ada"}).OK() {
		h.Tick(1)
	}
	var st dungeon.State
	h.State(&st)
	fmt.Println("boss:", st.Phase, "at tick", st.DiedAt, "kills:", st.Kills)

	for _, e := range h.TakeEffects("loot") {
		var loot struct {
			Player string `msgpack:"player"`
			Item   string `msgpack:"item"`
		}
		e.Decode(&loot)
		fmt.Printf("effect %s at tick %d, from %s: %s gets %q\n", e.Kind, e.Tick, e.Command, loot.Player, loot.Item)
	}
	h.Tick(5)
	for _, f := range h.TakeFrames("") {
		var frame struct {
			HP    int64  `msgpack:"hp"`
			Phase string `msgpack:"phase"`
		}
		f.Decode(&frame)
		fmt.Println("frame of tick", f.Tick, "hp", frame.HP, "phase", frame.Phase)
	}

	h.CheckRoundTrip()   // what a node restoring it would load plays on the same
	h.CheckDeterminism() // and the same inputs from scratch give the same states, tick by tick
	fmt.Println("checked")
	// Output:
	// players: 1
	// ada attacking for bob: forbidden
	// boss: dead at tick 5 kills: 1
	// effect loot at tick 5, from attack: ada gets "frost helm"
	// frame of tick 5 hp 0 phase dead
	// frame of tick 10 hp 0 phase dead
	// checked
}

// WantResult checks an answer against the keys a test cares about; WantCode a refusal's code.
func ExampleResult_WantResult() {
	h := actortest.New(t, dungeon.Kind{})
	join := map[string]any{"type": "join", "player": "ada"}
	h.Send(join).WantResult(map[string]any{"joined": "ada", "players": 1})
	h.Send(map[string]any{"type": "leave", "player": "bob"}).WantCode("rejected")
	res := h.Send(map[string]any{"type": "jump", "player": "ada"}).WantCode("bad_request")
	fmt.Println(res.Message())
	// Output:
	// unknown command type "jump" (join, attack, leave, status)
}

// RoundTripEvery moves the instance as often as a test likes: after every n-th tick the game
// goes on from what Restore made of its state, beside the logic never restored, and the test
// fails at the first tick where the two differ.
func ExampleRoundTripEvery() {
	h := actortest.New(t, dungeon.Kind{FrameEvery: 2}, actortest.RoundTripEvery(1))
	h.Send(map[string]any{"type": "join", "player": "ada"}).WantOK()
	for range 20 {
		h.Send(map[string]any{"type": "attack", "player": "ada"}).WantOK()
		h.Tick(1)
	}
	fmt.Println("frames:", len(h.TakeFrames()), "last tick:", h.LastTick())
	// Output:
	// frames: 10 last tick: 20
}

// Replay runs a script again — here on the kind configured otherwise — to compare where it
// ends: the frames it publishes are no part of its state.
func ExampleReplay() {
	h := actortest.New(t, dungeon.Kind{}, actortest.ID("dungeon-7"))
	h.Send(map[string]any{"type": "join", "player": "ada"}).WantOK()
	h.Send(map[string]any{"type": "attack", "player": "ada"}).WantOK()
	h.Tick(30)

	r := actortest.Replay(t, dungeon.Kind{FrameEvery: 10}, h.Script())
	fmt.Println("same state:", bytes.Equal(h.StateBytes(), r.StateBytes()))
	fmt.Println("frames:", len(h.TakeFrames()), len(r.TakeFrames()))
	// Output:
	// same state: true
	// frames: 0 3
}
