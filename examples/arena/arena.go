package main

import (
	"fmt"
	"sort"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tickfence/tickfence/actor"
)

// The rules of the arena: players move on a square field while a safe zone, a circle around its
// centre, shrinks; outside it they lose health every tick; the last one standing wins.
const (
	Field      = 100 // the field is Field × Field
	StartZone  = 70  // the zone's radius at the start of a round
	MinZone    = 5   // it never shrinks below this
	ShrinkEach = 10  // ticks between two shrinks of one unit
	MaxStep    = 3   // the longest move, in each axis, of one command
	StartHP    = 100
	MaxPlayers = 16
	FrameEvery = 5 // ticks between two frames of the arena's status (and one when a round ends)
)

// Kind is the arena's kind of instance: "arena".
type Kind struct{}

// Name implements actor.Kind.
func (Kind) Name() string { return "arena" }

// New implements actor.Kind: {"type":"create","kind":"arena"}, optionally with "zone" (the
// starting radius).
func (Kind) New(id string, create actor.Command) (actor.Logic, error) {
	var args struct {
		Zone int `msgpack:"zone"`
	}
	if err := create.Decode(&args); err != nil {
		return nil, err
	}
	if args.Zone == 0 {
		args.Zone = StartZone
	}
	if args.Zone < MinZone || args.Zone > Field {
		return nil, &actor.Rejected{Code: "bad_request", Message: fmt.Sprintf("zone must be in %d..%d", MinZone, Field)}
	}
	return &Arena{Zone: args.Zone, StartZone: args.Zone}, nil
}

// Restore implements actor.Kind.
func (Kind) Restore(id string, state []byte) (actor.Logic, error) {
	a := &Arena{}
	if err := msgpack.Unmarshal(state, a); err != nil {
		return nil, fmt.Errorf("arena %s: %w", id, err)
	}
	return a, nil
}

// Arena is one arena's whole state: what its record stores.
type Arena struct {
	LastTick  uint64    `msgpack:"tick"`
	Zone      int       `msgpack:"zone"` // radius of the safe zone around (Field/2, Field/2)
	StartZone int       `msgpack:"start_zone"`
	Players   []Fighter `msgpack:"players"` // sorted by name
	Winner    string    `msgpack:"winner,omitempty"`
	Rounds    int       `msgpack:"rounds"`
	// Frames is the outbox of what watchers are shown (its status): never stored.
	actor.Frames
}

// Fighter is one player in the arena.
type Fighter struct {
	Name string `msgpack:"name"`
	X    int    `msgpack:"x"`
	Y    int    `msgpack:"y"`
	HP   int    `msgpack:"hp"`
}

// Tick implements actor.Logic: the zone shrinks, whoever stands outside it loses health, and
// when one fighter is left standing the round ends. Every FrameEvery ticks, and when a round
// ends, it shows its status to its watchers (a frame).
func (a *Arena) Tick(tick uint64) {
	a.LastTick = tick
	rounds := a.Rounds
	defer func() {
		if tick%FrameEvery == 0 || a.Rounds != rounds {
			b, _ := msgpack.Marshal(a.status())
			a.Publish("", b)
		}
	}()
	if a.Winner != "" || len(a.Players) < 2 {
		return
	}
	if tick%ShrinkEach == 0 && a.Zone > MinZone {
		a.Zone--
	}
	alive, last := 0, ""
	for i := range a.Players {
		p := &a.Players[i]
		if p.HP > 0 && !a.inside(p.X, p.Y) {
			p.HP--
		}
		if p.HP > 0 {
			alive++
			last = p.Name
		}
	}
	if alive <= 1 {
		a.Winner = last
		a.Rounds++
	}
}

func (a *Arena) inside(x, y int) bool {
	dx, dy := x-Field/2, y-Field/2
	return dx*dx+dy*dy <= a.Zone*a.Zone
}

type args struct {
	Player string `msgpack:"player"`
	DX     int    `msgpack:"dx"`
	DY     int    `msgpack:"dy"`
}

// Handle implements actor.Logic: join, move, status, restart.
func (a *Arena) Handle(tick uint64, cmd actor.Command) (any, error) {
	var c args
	if err := cmd.Decode(&c); err != nil {
		return nil, err
	}
	switch cmd.Type {
	case "status":
		return a.status(), nil
	case "restart": // a new round: everyone back to full health at the field's corners
		if !cmd.Sender.Trusted {
			// Only the game's own servers and operators start rounds, never a player.
			return nil, &actor.Rejected{Code: "forbidden", Message: "restart: only a trusted sender (the game's gateway, an operator) starts a round"}
		}
		a.Zone, a.Winner = a.StartZone, ""
		for i := range a.Players {
			a.Players[i].HP = StartHP
			a.Players[i].X, a.Players[i].Y = corner(i)
		}
		return a.status(), nil
	case "join", "move":
		if c.Player == "" || len(c.Player) > 32 {
			return nil, &actor.Rejected{Code: "bad_request", Message: cmd.Type + ": player must be 1..32 characters"}
		}
		// Authorise on who sent it (the NATS server's word, never the command's): a player
		// joins and moves only itself; a trusted gateway acts for the player it names.
		if !cmd.Sender.ActsFor(c.Player) {
			return nil, &actor.Rejected{Code: "forbidden", Message: fmt.Sprintf("%s: %q may act only for itself, not for %q", cmd.Type, cmd.Sender.Player, c.Player)}
		}
	default:
		return nil, &actor.Rejected{Code: "bad_request", Message: fmt.Sprintf("unknown command %q (join, move, status, restart)", cmd.Type)}
	}
	i := sort.Search(len(a.Players), func(i int) bool { return a.Players[i].Name >= c.Player })
	found := i < len(a.Players) && a.Players[i].Name == c.Player
	if cmd.Type == "join" {
		if found {
			return map[string]any{"joined": c.Player}, nil // joining twice is harmless
		}
		if len(a.Players) >= MaxPlayers {
			return nil, actor.Reject("the arena is full (%d players)", MaxPlayers)
		}
		x, y := corner(len(a.Players))
		a.Players = append(a.Players, Fighter{})
		copy(a.Players[i+1:], a.Players[i:])
		a.Players[i] = Fighter{Name: c.Player, X: x, Y: y, HP: StartHP}
		return map[string]any{"joined": c.Player, "x": x, "y": y}, nil
	}
	// move
	if !found {
		return nil, actor.Reject("%s has not joined", c.Player)
	}
	if c.DX < -MaxStep || c.DX > MaxStep || c.DY < -MaxStep || c.DY > MaxStep {
		return nil, &actor.Rejected{Code: "bad_request", Message: fmt.Sprintf("a move is at most %d in each axis", MaxStep)}
	}
	p := &a.Players[i]
	if p.HP == 0 {
		return nil, actor.Reject("%s is out", c.Player)
	}
	p.X = min(max(p.X+c.DX, 0), Field)
	p.Y = min(max(p.Y+c.DY, 0), Field)
	return map[string]any{"x": p.X, "y": p.Y, "hp": p.HP, "safe": a.inside(p.X, p.Y), "zone": a.Zone}, nil
}

func corner(i int) (int, int) {
	return []int{0, Field, 0, Field}[i%4], []int{0, 0, Field, Field}[i%4]
}

func (a *Arena) status() map[string]any {
	alive := 0
	for _, p := range a.Players {
		if p.HP > 0 {
			alive++
		}
	}
	return map[string]any{"tick": a.LastTick, "zone": a.Zone, "players": len(a.Players), "alive": alive,
		"winner": a.Winner, "rounds": a.Rounds}
}

// MarshalState implements actor.Logic.
func (a *Arena) MarshalState() ([]byte, error) { return msgpack.Marshal(a) }
