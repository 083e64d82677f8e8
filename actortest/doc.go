// Package actortest runs a game's actor.Kind in a test, without a node: one instance, ticked and
// commanded by the test's script, with commands given as Go values and answers, frames, effects
// and state read back as Go values. It is how a game tests its rules, and checks what tickfence
// relies on: that the game is deterministic, and that what MarshalState writes Restore reads back.
//
// Start with New and Send (see the package example):
//
//	h := actortest.New(t, arena.Kind{}, actortest.Create(map[string]any{"zone": 20}))
//	h.Send(join{Type: "join", Player: "ann"}).WantOK()
//	h.Tick(10)
//	var st arena.Arena
//	h.State(&st)
//	h.CheckRoundTrip()   // MarshalState → Restore → MarshalState: the same bytes, and the same behaviour from here on
//	h.CheckDeterminism() // the same inputs again, from scratch: the same answers, effects, frames and states, tick by tick
//
// The harness applies commands as a node does. A command is a struct or a map with a "type"
// key, encoded as the Go client sends it (canonical msgpack) and decoded as a node reads it, so
// the game's Handle gets the same actor.Command it would get on a cluster, from the sender the
// test chooses (Player, TrustedFor, Trusted). Commands sent between two calls to Tick are applied
// at the start of the next tick, in order, before Logic.Tick runs: Send runs Handle at once and
// returns its answer, as the node would answer it (an error becomes its code: a *actor.Rejected's,
// else "rejected"). Frames are taken after each tick, effects after each Handle and each tick.
//
// Players. For a game whose Logic implements actor.PlayerJoiner or actor.PlayerLeaver, the
// harness keeps who is in as a node does: a player's first command (SendAs(Player("ada"), …))
// makes it join, Join first; the built-in {"type":"join"} and {"type":"leave"} are answered as a
// node answers them; a player not heard from — no command, no Heartbeat — for the logic's
// PresenceTimeout ticks leaves, disconnected, at the start of a tick. Present lists who is in;
// a frame made with Frames.PublishTo has its player in Frame.To.
//
// Failures speak. The test fails (t.Fatalf), naming the tick and the command, when the game's code
// panics; when it publishes a frame the node would refuse (Publish returned an error:
// actor.ValidFrame), or emits an effect the node would refuse (actor.ValidEffect) and goes on as
// if it had not (Handle answers ok after Emit returned an error; Tick, Join and Leave cannot
// refuse anything: the effect is lost); when Handle answers bad_request, or Join refuses a player,
// after changing the state or emitting an effect (a node drops both: such a command must change
// nothing); when a result cannot be
// encoded for the wire; when MarshalState fails, writes nothing, or writes more than an instance
// can store. CheckRoundTrip and CheckDeterminism name the first tick that differs and what differs
// in it, down to the key of the state:
//
//	replaying the same inputs from scratch: tick 7 differs from the first run: the state:
//	    players[1].hp: 96 (first run), 95 (replay)
package actortest
