package actortest

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
)

// Players (actor.PlayerJoiner, actor.PlayerLeaver): for a Logic that implements either, the
// harness keeps who is in as a node keeps it in the instance's record (shard/players.go), and
// calls the hooks at the same points:
//
//   - a player's first command (SendAs(Player("ada"), …), or a trusted sender's TrustedFor("ada"))
//     makes it join — Join is called just before Handle, and an error refuses the command;
//   - the built-in {"type":"join"} and {"type":"leave"} are answered by the harness as a node
//     answers them ({"player","since","tick"}, {"player","left","tick"}), never handed to Handle;
//   - a player the instance has not heard from — no command, no Heartbeat — for the logic's
//     PresenceTimeout ticks leaves, disconnected, at the start of a tick (before Logic.Tick).
//
// Who is in is the record's, not the state's: a round trip keeps it, as a failover does.

// Presence is a player in the instance: since the tick it joined, last heard from at Seen.
type Presence struct {
	Player string
	Since  uint64
	Seen   uint64
}

// presence is what a life holds of its players (the record's Players, and who was heard from
// since the last tick).
type presence struct {
	in    []Presence // sorted by Player
	heard map[string]struct{}
}

func (p *presence) find(player string) (int, bool) {
	return slices.BinarySearchFunc(p.in, player, func(x Presence, name string) int {
		switch {
		case x.Player < name:
			return -1
		case x.Player > name:
			return 1
		}
		return 0
	})
}

func (p *presence) present(player string) bool {
	_, ok := p.find(player)
	return ok
}

// hear notes that player, if in, was heard from: it is seen at the next tick.
func (p *presence) hear(player string) {
	if player == "" || !p.present(player) {
		return // a heartbeat joins no one; a command joins at its tick
	}
	if p.heard == nil {
		p.heard = map[string]struct{}{}
	}
	p.heard[player] = struct{}{}
}

func (p *presence) clone() presence {
	c := presence{in: slices.Clone(p.in)}
	if len(p.heard) > 0 {
		c.heard = make(map[string]struct{}, len(p.heard))
		for k := range p.heard {
			c.heard[k] = struct{}{}
		}
	}
	return c
}

// Present is who is in the instance now, sorted by name (nil for a game that does not track its
// players: actor.PlayerJoiner, actor.PlayerLeaver).
func (h *Harness) Present() []Presence {
	return slices.Clone(h.cur.players.in)
}

// Heartbeat is a heartbeat of player, as its client's watch sends one every 5 s (client.Watch):
// the player, if in, is seen at the next tick and not disconnected for its silence. It joins no
// one and is never answered.
func (h *Harness) Heartbeat(player string) {
	h.t.Helper()
	if !actor.ValidPlayer(player) {
		h.fatalf("Heartbeat(%q): want a player's name, 1-64 of A-Z a-z 0-9 _ -", player)
	}
	h.cur.players.hear(player)
	if h.shadow != nil {
		h.shadow.players.hear(player)
	}
	h.steps = append(h.steps, step{tick: h.next(), heartbeat: player})
}

// players runs what a node does with a command of a game that tracks its players, before
// Handle: the built-in join and leave (done: their answer, Handle is not called), and the join of
// a player not in yet (refused: the answer; else joinFx, what Join emitted).
func (h *Harness) players(l *life, tick uint64, c actor.Command, where string) (reply []byte, joinFx []actor.Effect, done bool) {
	h.t.Helper()
	switch c.Type {
	case "join", "leave":
		who, err := actor.PlayerOf(c)
		if err != nil {
			reply, _ = wire.ReplyFor(nil, err)
			return reply, nil, true
		}
		if c.Type == "leave" {
			fx, left := h.leave(l, tick, who.Player, actor.LeaveLeft, where)
			reply, _ = wire.ReplyFor(map[string]any{"player": who.Player, "left": left, "tick": tick}, nil)
			return reply, fx, true
		}
		if !l.players.present(who.Player) {
			if reply, joinFx = h.join(l, tick, who, where); reply != nil {
				return reply, nil, true
			}
		}
		i, _ := l.players.find(who.Player)
		reply, _ = wire.ReplyFor(map[string]any{"player": who.Player, "since": l.players.in[i].Since, "tick": tick}, nil)
		return reply, joinFx, true
	}
	if p := c.Sender.Player; p != "" && !l.players.present(p) {
		if reply, joinFx = h.join(l, tick, c.Sender, where); reply != nil {
			return reply, nil, true
		}
	}
	return nil, joinFx, false
}

// join puts who's player in at tick if the game's Join agrees: nil and Join's effects, or the
// refusal's answer.
func (h *Harness) join(l *life, tick uint64, who actor.Sender, where string) (refusal []byte, fx []actor.Effect) {
	h.t.Helper()
	if len(l.players.in) >= store.MaxPlayers {
		reply, _ := wire.ReplyFor(nil, &actor.Rejected{Code: wire.CodeRejected, Message: fmt.Sprintf(
			"instance %s has %d players in, as many as it may: %s cannot join", h.id, store.MaxPlayers, who.Player)})
		return reply, nil
	}
	var err error
	if j, ok := l.logic.(actor.PlayerJoiner); ok {
		before := h.marshal(l, where+": before Join")
		h.call(where+": Join of "+who.Player, func() { err = j.Join(tick, who) })
		fx = h.takeEffects(l, where+": Join of "+who.Player)
		h.refusals(l, where+": Join of "+who.Player, err == nil)
		if err != nil {
			reply, code := wire.ReplyFor(nil, err)
			if code == "" {
				h.fatalf("%s: Join of %s refused it with an *actor.Rejected without a Code (%q): clients branch on the code", where, who.Player, errMessage(err))
			}
			if len(fx) > 0 {
				h.fatalf("%s: Join of %s refused it (%s) after emitting %d effect(s) (first %q): a node drops them; a refused Join must change nothing", where, who.Player, errMessage(err), len(fx), fx[0].Kind)
			}
			if after := h.marshal(l, where+": after Join"); !bytes.Equal(before, after) {
				h.fatalf("%s: Join of %s refused it (%s) after changing the state: a node stores that change with the player out; a refused Join must change nothing:\n%s",
					where, who.Player, errMessage(err), diffStates(before, after, "before", "after"))
			}
			return reply, nil
		}
	}
	i, _ := l.players.find(who.Player)
	l.players.in = slices.Insert(l.players.in, i, Presence{Player: who.Player, Since: tick, Seen: tick})
	return nil, fx
}

// leave takes player out at tick and tells the game why: what Leave emitted, and false if the
// player was not in.
func (h *Harness) leave(l *life, tick uint64, player string, why actor.LeaveReason, where string) ([]actor.Effect, bool) {
	h.t.Helper()
	i, ok := l.players.find(player)
	if !ok {
		return nil, false
	}
	l.players.in = slices.Delete(l.players.in, i, i+1)
	if lv, ok := l.logic.(actor.PlayerLeaver); ok {
		what := fmt.Sprintf("%s: Leave of %s (%s)", where, player, why)
		h.call(what, func() { lv.Leave(tick, player, why) })
		fx := h.takeEffects(l, what)
		h.refusals(l, what, true)
		return fx, true
	}
	return nil, true
}

// presenceTick runs at the start of tick, before Logic.Tick: the players heard from are seen,
// and those not heard from for the logic's PresenceTimeout ticks leave, disconnected, in the
// order of their names. Their Leave's effects are the tick's.
func (h *Harness) presenceTick(l *life, tick uint64, where string) []actor.Effect {
	h.t.Helper()
	if !actor.TracksPlayers(l.logic) {
		l.players = presence{}
		return nil
	}
	for p := range l.players.heard {
		if i, ok := l.players.find(p); ok {
			l.players.in[i].Seen = tick
		}
	}
	clear(l.players.heard)
	timeout := actor.PresenceTimeoutOf(l.logic)
	if timeout == 0 {
		return nil
	}
	var silent []string
	for _, p := range l.players.in {
		if tick > p.Seen && tick-p.Seen >= timeout {
			silent = append(silent, p.Player)
		}
	}
	var fx []actor.Effect
	for _, p := range silent {
		e, _ := h.leave(l, tick, p, actor.LeaveDisconnected, where)
		fx = append(fx, e...)
	}
	return fx
}

// takeEffects takes what l's logic emitted since they were last taken, and checks each.
func (h *Harness) takeEffects(l *life, where string) []actor.Effect {
	h.t.Helper()
	var effs []actor.Effect
	if e, ok := l.logic.(actor.Emitter); ok {
		h.call(where+": TakeEffects", func() { effs = e.TakeEffects() })
	}
	for _, e := range effs {
		if err := actor.ValidEffect(e); err != nil {
			h.fatalf("%s emitted an effect a node refuses (logs and drops): %v", where, err)
		}
	}
	return effs
}

// refusals fails the test if the game's call (where) published a frame that Publish refused
// (no watcher sees it: a node logs and counts it), or emitted an effect that Emit refused while
// the call went on as if it had not (ok: Handle answered the command ok, or a Tick, a Join that
// agreed, a Leave): that effect is lost. A Handle that refuses its command after a refused Emit
// has done what it should (README: Effects).
func (h *Harness) refusals(l *life, where string, ok bool) {
	h.t.Helper()
	var frames, effects []error
	if r, is := l.logic.(actor.RefusedFrames); is {
		h.call(where+": TakeRefusedFrames", func() { frames = r.TakeRefusedFrames() })
	}
	if r, is := l.logic.(actor.RefusedEffects); is {
		h.call(where+": TakeRefusedEffects", func() { effects = r.TakeRefusedEffects() })
	}
	if len(frames) > 0 {
		h.fatalf("%s: Publish refused a frame (no watcher sees it; a node logs it and counts it in tickfence_frames_refused_total): %v", where, frames[0])
	}
	if len(effects) > 0 && ok {
		h.fatalf("%s: Emit refused an effect, and the game went on as if it had not: the effect is lost (a node logs it and counts it in tickfence_effects_refused_total). "+
			"Check Emit's error: in Handle, refuse the command (bad_request) before changing anything: %v", where, effects[0])
	}
}
