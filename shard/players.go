package shard

import (
	"fmt"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
)

// Players (actor.PlayerJoiner, actor.PlayerLeaver): the owner keeps who is in an instance in its
// record (store.Record.Players) and calls the game's hooks at ticks, as it applies commands, so
// that a join or a leave is stored by the same write as what the game made of it, or not at all.
// Everything here runs under the instance's lock, from its tick (or, for heartbeats, notes for
// the next tick).

// presence is what an instance holds of its players besides its record.
type presence struct {
	// heard: players heard from since the last tick (commands, heartbeats): they are seen at
	// the next tick, so that when a player was last seen is a tick the commands decide.
	heard map[string]struct{}
	// frames the logic made in the tick it ended (its players' LeaveEnded among them), published
	// after that tick: the logic is dropped with the end. endTick is that tick (the record's
	// does not count it: a tombstone does not tick), which stamps them after the frames before.
	frames  []actor.Frame
	endTick uint64
}

// heardLocked notes that player, if in, was heard from: it is seen at the next tick.
func (in *instance) heardLocked(player string) {
	if player == "" || !actor.TracksPlayers(in.logic) {
		return
	}
	if _, ok := in.rec.Present(player); !ok {
		return // a heartbeat joins no one; a command joins at its tick
	}
	if in.pl.heard == nil {
		in.pl.heard = map[string]struct{}{}
	}
	in.pl.heard[player] = struct{}{}
}

// heartbeat notes a heartbeat of c's player (wire.HeaderHeartbeat): never answered.
func (in *instance) heartbeat(c Command) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.dead || in.expiring || in.rec.Ended || in.fail != nil {
		return
	}
	in.heardLocked(c.Sender.Player)
}

// presenceTickLocked runs at tick, after its commands and before the game's Tick: the players
// heard from are seen at tick, and those not heard from for the logic's PresenceTimeout ticks
// leave, disconnected (in the order of their names).
func (in *instance) presenceTickLocked(tick uint64) {
	if !actor.TracksPlayers(in.logic) {
		in.pl.heard = nil
		if len(in.rec.Players) > 0 { // the game no longer tracks players: nobody is kept in
			in.rec.Players = nil
			in.forceWrite = true
		}
		return
	}
	if len(in.pl.heard) > 0 {
		in.rec.SeePlayers(in.pl.heard, tick)
		clear(in.pl.heard)
	}
	timeout := actor.PresenceTimeoutOf(in.logic)
	if timeout == 0 || len(in.rec.Players) == 0 {
		return
	}
	var silent []string
	for _, p := range in.rec.Players {
		if tick > p.Seen && tick-p.Seen >= timeout {
			silent = append(silent, p.Player)
		}
	}
	for _, p := range silent {
		in.leaveLocked(tick, p, actor.LeaveDisconnected)
	}
}

// joinLocked puts who's player in at tick, after the game's Join agreed (an error refuses it,
// and nothing changed).
func (in *instance) joinLocked(tick uint64, who actor.Sender) error {
	if len(in.rec.Players) >= store.MaxPlayers {
		return &actor.Rejected{Code: wire.CodeRejected, Message: fmt.Sprintf("instance %s has %d players in, as many as it may: %s cannot join", in.id, store.MaxPlayers, who.Player)}
	}
	if j, ok := in.logic.(actor.PlayerJoiner); ok {
		if err := j.Join(tick, who); err != nil {
			in.takeEffectsLocked() // a refusal changes nothing: no effect of it leaves
			return err
		}
	}
	in.rec.AddPlayer(who.Player, tick)
	in.forceWrite = true // a join is stored at its tick, with what the game made of it
	// Its effects are the join's, whatever becomes of the command (Handle may still refuse it
	// as malformed, which drops what Handle emitted).
	in.addEffects(tick, in.takeEffectsLocked())
	return nil
}

// takeEffectsLocked takes what the logic emitted since they were last taken.
func (in *instance) takeEffectsLocked() []actor.Effect {
	if e, ok := in.logic.(actor.Emitter); ok {
		return e.TakeEffects()
	}
	return nil
}

// leaveLocked takes player out at tick and tells the game why; false if it was not in.
func (in *instance) leaveLocked(tick uint64, player string, why actor.LeaveReason) bool {
	if !in.rec.RemovePlayer(player) {
		return false
	}
	in.forceWrite = true
	if l, ok := in.logic.(actor.PlayerLeaver); ok {
		l.Leave(tick, player, why)
		in.addEffects(tick, in.takeEffectsLocked())
	}
	return true
}

// endPlayersLocked: the instance ends at tick (its logic is dropped next): every player in
// leaves (actor.LeaveEnded), and what the logic made in this tick — those leaves' effects and
// frames, and the frames of the commands before the end — goes with the tombstone's write and
// after its tick, since nothing takes them from a dropped logic.
func (in *instance) endPlayersLocked(tick uint64) {
	in.pl.heard = nil
	if !actor.TracksPlayers(in.logic) {
		return
	}
	for len(in.rec.Players) > 0 {
		in.leaveLocked(tick, in.rec.Players[0].Player, actor.LeaveEnded)
	}
	if f, ok := in.logic.(actor.Framer); ok {
		in.pl.frames = append(in.pl.frames, f.TakeFrames()...)
		in.pl.endTick = tick
	}
}

// takeEndFramesLocked returns the frames endPlayersLocked kept, once, and the tick they were
// made at.
func (in *instance) takeEndFramesLocked() ([]actor.Frame, uint64) {
	f, t := in.pl.frames, in.pl.endTick
	in.pl.frames = nil
	return f, t
}

// handleLocked hands a command to the game at tick. For a logic that tracks players, the
// built-in "join" and "leave" are answered here, and any other command of a player that is not
// in makes it join first (Join may refuse it; then the command is refused and not handled).
func (in *instance) handleLocked(tick uint64, c Command) (any, error) {
	cmd := actor.Command{Type: c.Type, Body: c.Body, Sender: c.Sender}
	if !actor.TracksPlayers(in.logic) {
		return in.logic.Handle(tick, cmd)
	}
	switch c.Type {
	case "join":
		who, err := actor.PlayerOf(cmd)
		if err != nil {
			return nil, err
		}
		if _, ok := in.rec.Present(who.Player); !ok {
			if err := in.joinLocked(tick, who); err != nil {
				return nil, err
			}
		}
		p, _ := in.rec.Present(who.Player)
		return map[string]any{"player": who.Player, "since": p.Since, "tick": tick}, nil
	case "leave":
		who, err := actor.PlayerOf(cmd)
		if err != nil {
			return nil, err
		}
		left := in.leaveLocked(tick, who.Player, actor.LeaveLeft)
		return map[string]any{"player": who.Player, "left": left, "tick": tick}, nil
	}
	if p := c.Sender.Player; p != "" {
		if _, ok := in.rec.Present(p); !ok {
			if err := in.joinLocked(tick, c.Sender); err != nil {
				return nil, err
			}
		}
	}
	return in.logic.Handle(tick, cmd)
}

// heartbeat hands a heartbeat to its instance, if this shard runs it.
func (sh *shardRun) heartbeat(c Command) {
	if c.Sender.Player == "" {
		return
	}
	sh.mu.Lock()
	in := sh.insts[c.Instance]
	sh.mu.Unlock()
	if in != nil {
		in.heartbeat(c)
	}
}
