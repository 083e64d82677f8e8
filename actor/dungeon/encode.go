package dungeon

import (
	"encoding/binary"
	"math"
)

// MarshalState implements actor.Logic. It writes the msgpack map msgpack.Marshal(s) would (the
// same keys and values, so Restore reads either; integers in their smallest form, where
// msgpack.Marshal spends 9 bytes on any beyond -32..127), without reflection: it runs for every write
// of the instance, on the tick path, and the reflective encoder cost about 8 % of a busy node's
// CPU at 5 000 demo dungeons. TestMarshalStateIsMsgpack keeps them equal.
func (s *State) MarshalState() ([]byte, error) {
	b := make([]byte, 0, 160+len(s.Players)*40+len(s.Loot)*48)
	b = appendMapLen(b, 12)
	b = appendStr(b, "run")
	b = appendInt(b, int64(s.Run))
	b = appendStr(b, "hp")
	b = appendInt(b, s.HP)
	b = appendStr(b, "max_hp")
	b = appendInt(b, s.MaxHP)
	b = appendStr(b, "phase")
	b = appendStr(b, s.Phase)
	b = appendPlayers(b, s.Players, s.Players == nil)
	b = appendStr(b, "loot")
	b = appendArrayLen(b, len(s.Loot), s.Loot == nil)
	for _, l := range s.Loot {
		b = l.append(b)
	}
	b = appendStr(b, "died_at")
	b = appendUint(b, s.DiedAt)
	b = appendStr(b, "kills")
	b = appendInt(b, int64(s.Kills))
	b = appendStr(b, "rng")
	b = appendUint(b, s.RNG)
	b = appendStr(b, "last_tick")
	b = appendUint(b, s.LastTick)
	b = appendStr(b, "total_damage")
	b = appendInt(b, s.TotalDmg)
	b = appendStr(b, "loot_given")
	b = appendInt(b, int64(s.LootGiven))
	return b, nil
}

// Frame is what a dungeon shows its watchers: a msgpack map {tick, run, hp, max_hp, phase,
// players: [{name, hp, damage}]} (about 190 bytes with four players).
func (s *State) Frame() []byte {
	b := make([]byte, 0, 64+len(s.Players)*40)
	b = appendMapLen(b, 6)
	b = appendStr(b, "tick")
	b = appendUint(b, s.LastTick)
	b = appendStr(b, "run")
	b = appendInt(b, int64(s.Run))
	b = appendStr(b, "hp")
	b = appendInt(b, s.HP)
	b = appendStr(b, "max_hp")
	b = appendInt(b, s.MaxHP)
	b = appendStr(b, "phase")
	b = appendStr(b, s.Phase)
	return appendPlayers(b, s.Players, false)
}

// appendPlayers writes "players" and the array of {name, hp, damage} maps (nil: a msgpack nil,
// as msgpack.Marshal writes a nil slice).
func appendPlayers(b []byte, ps []Player, null bool) []byte {
	b = appendStr(b, "players")
	b = appendArrayLen(b, len(ps), null)
	for _, p := range ps {
		b = appendMapLen(b, 3)
		b = appendStr(b, "name")
		b = appendStr(b, p.Name)
		b = appendStr(b, "hp")
		b = appendInt(b, p.HP)
		b = appendStr(b, "damage")
		b = appendInt(b, p.Damage)
	}
	return b
}

// effect is a loot grant as the "loot" effect carries it: a msgpack map {run, player, item}.
func (l Loot) effect() []byte { return l.append(make([]byte, 0, 24+len(l.Player)+len(l.Item))) }

// append writes a loot grant as the msgpack map {run, player, item}.
func (l Loot) append(b []byte) []byte {
	b = appendMapLen(b, 3)
	b = appendStr(b, "run")
	b = appendInt(b, int64(l.Run))
	b = appendStr(b, "player")
	b = appendStr(b, l.Player)
	b = appendStr(b, "item")
	return appendStr(b, l.Item)
}

func appendMapLen(b []byte, n int) []byte {
	if n < 16 {
		return append(b, 0x80|byte(n))
	}
	return binary.BigEndian.AppendUint16(append(b, 0xde), uint16(n))
}

func appendArrayLen(b []byte, n int, null bool) []byte {
	switch {
	case null:
		return append(b, 0xc0) // a nil slice, as msgpack.Marshal writes it
	case n < 16:
		return append(b, 0x90|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xdc), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, 0xdd), uint32(n))
}

func appendStr(b []byte, s string) []byte {
	switch n := len(s); {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n <= math.MaxUint8:
		b = append(b, 0xd9, byte(n))
	case n <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, 0xda), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xdb), uint32(n))
	}
	return append(b, s...)
}

// appendInt writes v in the smallest msgpack integer form that holds it (a positive one in an
// unsigned form, as msgpack does for an int): 1, 2, 3, 5 or 9 bytes.
func appendInt(b []byte, v int64) []byte {
	switch {
	case v >= 0:
		return appendUint(b, uint64(v))
	case v >= -32:
		return append(b, byte(v))
	case v >= math.MinInt8:
		return append(b, 0xd0, byte(v))
	case v >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(b, 0xd1), uint16(v))
	case v >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(b, 0xd2), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xd3), uint64(v))
}

// appendUint writes v in the smallest msgpack unsigned form that holds it.
func appendUint(b []byte, v uint64) []byte {
	switch {
	case v <= math.MaxInt8:
		return append(b, byte(v))
	case v <= math.MaxUint8:
		return append(b, 0xcc, byte(v))
	case v <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xcd), uint16(v))
	case v <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xcf), v)
}
