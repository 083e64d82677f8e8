package actortest_test

import (
	"fmt"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/actortest"
)

// lobby is a game that tracks its players: at most Cap in, a log of who came and went and why,
// and each player's own frame every 5 ticks.
type lobby struct{ Bug string } // "joinchange": Join refuses after changing the state

func (lobby) Name() string { return "lobby" }

func (k lobby) New(id string, create actor.Command) (actor.Logic, error) {
	return &room{Cap: 2, bug: k.Bug}, nil
}

func (k lobby) Restore(id string, b []byte) (actor.Logic, error) {
	r := &room{bug: k.Bug}
	return r, msgpack.Unmarshal(b, r)
}

type room struct {
	Cap  int      `msgpack:"cap"`
	In   []string `msgpack:"in"`
	Log  []string `msgpack:"log"`
	Said int      `msgpack:"said"`

	actor.Frames
	actor.Effects
	bug string
}

func (r *room) Join(tick uint64, who actor.Sender) error {
	if len(r.In) >= r.Cap {
		if r.bug == "joinchange" {
			r.Log = append(r.Log, "refused "+who.Player)
		}
		return actor.Reject("full")
	}
	r.In = append(r.In, who.Player)
	r.Log = append(r.Log, fmt.Sprintf("%d +%s", tick, who.Player))
	_ = r.Emit("welcome", []byte{0xa0 + byte(len(who.Player))}) // a msgpack string header; any bytes do
	return nil
}

func (r *room) Leave(tick uint64, player string, why actor.LeaveReason) {
	for i, p := range r.In {
		if p == player {
			r.In = append(r.In[:i], r.In[i+1:]...)
			break
		}
	}
	r.Log = append(r.Log, fmt.Sprintf("%d -%s %s", tick, player, why))
}

func (r *room) PresenceTimeout() uint64 { return 10 }

func (r *room) Tick(tick uint64) {
	if tick%5 != 0 {
		return
	}
	for _, p := range r.In {
		b, _ := msgpack.Marshal(map[string]any{"you": p, "tick": tick})
		_ = r.PublishTo(p, "hud", b)
	}
}

func (r *room) Handle(tick uint64, cmd actor.Command) (any, error) {
	if cmd.Type != "say" {
		return nil, &actor.Rejected{Code: "bad_request", Message: "unknown " + cmd.Type}
	}
	r.Said++
	return map[string]any{"said": r.Said, "by": cmd.Sender.Player}, nil
}

func (r *room) MarshalState() ([]byte, error) { return msgpack.Marshal(r) }

type say struct {
	Type string `msgpack:"type"`
}

// A game that tracks its players meets the node's rules in the harness: a first command joins,
// the built-in join and leave are answered without Handle, a refused join keeps the player out,
// silence disconnects, a heartbeat keeps a player in, frames for one player say whom they are
// for, and presence survives a round trip and replays the same.
func TestPlayersInTheHarness(t *testing.T) {
	h := actortest.New(t, lobby{}, actortest.RoundTripEvery(7))
	ada, bob, cy := actortest.Player("ada"), actortest.Player("bob"), actortest.Player("cy")

	r := h.SendAs(ada, say{"say"}).WantResult(map[string]any{"said": 1, "by": "ada"}) // her first command joins her
	if fx := r.Effects(); len(fx) != 1 || fx[0].Kind != "welcome" {
		t.Fatalf("the join's effects come with the command that made it: %v", fx)
	}
	h.SendAs(bob, map[string]any{"type": "join"}).WantResult(map[string]any{"player": "bob", "since": 1, "tick": 1})
	h.SendAs(bob, map[string]any{"type": "join"}).WantResult(map[string]any{"player": "bob", "since": 1}) // in already
	h.SendAs(cy, say{"say"}).WantCode("rejected")                                                         // full: Join refused it
	h.SendAs(ada, map[string]any{"type": "join", "player": "bob"}).WantCode("forbidden")
	h.Send(map[string]any{"type": "join"}).WantCode("bad_request") // a trusted sender naming no player
	h.Tick(1)
	if p := h.Present(); len(p) != 2 || p[0] != (actortest.Presence{Player: "ada", Since: 1, Seen: 1}) || p[1].Player != "bob" {
		t.Fatalf("present: %+v", p)
	}

	// bob leaves; the operator names ada in a leave of hers; then cy gets in.
	h.SendAs(bob, map[string]any{"type": "leave"}).WantResult(map[string]any{"player": "bob", "left": true, "tick": 2})
	h.SendAs(bob, map[string]any{"type": "leave"}).WantResult(map[string]any{"left": false})
	h.SendAs(cy, say{"say"}).WantOK()
	h.Tick(3) // ticks 2..4
	for range 3 {
		h.Heartbeat("cy") // cy only watches: her heartbeats keep her in
		h.Tick(4)
	}
	// ada, silent since tick 2 (her last command was at tick 1), left at tick 11.
	var st room
	h.State(&st)
	want := []string{"1 +ada", "1 +bob", "2 -bob left", "2 +cy", "11 -ada disconnected"}
	if fmt.Sprint(st.Log) != fmt.Sprint(want) || fmt.Sprint(st.In) != "[cy]" {
		t.Fatalf("log %q, in %v; want %q, [cy]", st.Log, st.In, want)
	}
	if p := h.Present(); len(p) != 1 || p[0].Player != "cy" || p[0].Seen != 13 {
		t.Fatalf("present: %+v", p)
	}
	hud := h.TakeFrames("hud")
	var toCy int
	for _, f := range hud {
		if f.To == "" {
			t.Fatalf("a frame for one player without its player: %+v", f)
		}
		var v struct {
			You string `msgpack:"you"`
		}
		f.Decode(&v)
		if v.You != f.To {
			t.Fatalf("%s's frame went to %s", v.You, f.To)
		}
		if f.To == "cy" {
			toCy++
		}
	}
	if toCy != 3 { // ticks 5, 10 and 15 (she joined at tick 2)
		t.Fatalf("cy got %d frames, want 3: %+v", toCy, hud)
	}
	h.CheckRoundTrip()
	h.Tick(20) // cy is silent now: she leaves too
	if p := h.Present(); len(p) != 0 {
		t.Fatalf("present after cy's silence: %+v", p)
	}
	h.CheckDeterminism()

	again := actortest.Replay(t, lobby{}, h.Script())
	var st2 room
	again.State(&st2)
	if fmt.Sprint(st2.Log) != fmt.Sprint(h.Logic().(*room).Log) {
		t.Fatalf("a replay of the script: log %q, want %q", st2.Log, h.Logic().(*room).Log)
	}
}

// A Join that refuses after changing the state fails the test: a node would store the change
// with the player out.
func TestRefusedJoinMustChangeNothing(t *testing.T) {
	msg := failure(func(t actortest.TB) {
		h := actortest.New(t, lobby{Bug: "joinchange"})
		for _, p := range []string{"ada", "bob", "cy"} {
			h.SendAs(actortest.Player(p), say{"say"})
		}
	})
	wantFailure(t, msg, "tick 1", "Join of cy", "after changing the state", "log")
}
