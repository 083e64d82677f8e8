package store

import (
	"fmt"
	"slices"
	"strings"
)

// Presence is one player in an instance (Record.Players): who, since which tick of the
// instance, and the instance's tick when it was last heard from (a command, or a heartbeat of its
// client). Ticks, never a wall clock: a player is disconnected when the instance has ticked
// long enough without hearing from it, which every owner decides alike from the record and the
// commands it applies (DESIGN 5), and no two owners' clocks are ever compared.
type Presence struct {
	Player string `msgpack:"p"`
	Since  uint64 `msgpack:"since"`
	Seen   uint64 `msgpack:"seen"`
}

// MaxPlayers bounds the players present in one instance: a join past it is refused.
const MaxPlayers = 256

// PresenceVersion is the schema version of a record that holds presence (Players). A record
// that holds none is still written as version 4, which builds that predate presence read: only
// a record they would forget something of is refused by them.
const PresenceVersion = 5

// WriteVersion is the schema version r is written at (the v EncodeRecord gives it): the lowest
// that holds what r holds.
func (r *Record) WriteVersion() int {
	switch {
	case len(r.Labels) > 0 || r.Passive:
		return LabelsVersion
	case len(r.Players) > 0:
		return PresenceVersion
	}
	return 4
}

// LabelsVersion is the schema version of a record that holds labels or is passive.
const LabelsVersion = 6

func (r *Record) player(name string) (int, bool) {
	return slices.BinarySearchFunc(r.Players, name, func(p Presence, n string) int { return strings.Compare(p.Player, n) })
}

// Present returns the presence of player, if it is in.
func (r *Record) Present(player string) (Presence, bool) {
	if i, ok := r.player(player); ok {
		return r.Players[i], true
	}
	return Presence{}, false
}

// AddPlayer puts player in at tick (Since and Seen); false if it is in already or MaxPlayers
// are. Like every change to presence it never changes what a copy of the record holds (a
// record in flight shares its arrays): it makes a new slice.
func (r *Record) AddPlayer(player string, tick uint64) bool {
	i, ok := r.player(player)
	if ok || len(r.Players) >= MaxPlayers {
		return false
	}
	r.Players = slices.Insert(slices.Clip(r.Players), i, Presence{Player: player, Since: tick, Seen: tick})
	return true
}

// RemovePlayer takes player out; false if it was not in.
func (r *Record) RemovePlayer(player string) bool {
	i, ok := r.player(player)
	if !ok {
		return false
	}
	if len(r.Players) == 1 {
		r.Players = nil
		return true
	}
	r.Players = slices.Delete(slices.Clone(r.Players), i, i+1)
	return true
}

// SeePlayers records that the players heard were seen at tick; those not in are ignored. It
// makes a new slice if anything changes.
func (r *Record) SeePlayers(heard map[string]struct{}, tick uint64) {
	var out []Presence
	for i := range r.Players {
		if _, ok := heard[r.Players[i].Player]; !ok || r.Players[i].Seen >= tick {
			continue
		}
		if out == nil {
			out = slices.Clone(r.Players)
		}
		out[i].Seen = tick
	}
	if out != nil {
		r.Players = out
	}
}

// checkPlayers is DecodeRecord's check of Players: a bounded list of distinct names in
// ascending order, none seen before it joined.
func checkPlayers(ps []Presence) error {
	if len(ps) > 4*MaxPlayers {
		return fmt.Errorf("%w: %d players present", ErrBadRecord, len(ps))
	}
	for i, p := range ps {
		if p.Player == "" || i > 0 && p.Player <= ps[i-1].Player {
			return fmt.Errorf("%w: players present not in strictly ascending order of their names (%q)", ErrBadRecord, p.Player)
		}
		if p.Seen < p.Since {
			return fmt.Errorf("%w: player %q present since tick %d, seen at %d", ErrBadRecord, p.Player, p.Since, p.Seen)
		}
	}
	return nil
}
