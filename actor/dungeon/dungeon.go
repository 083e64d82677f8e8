// Package dungeon is tickfence's demo kind: a boss fight. Players join and attack through
// commands; the boss enters phase 2 below 50% HP and enrages below 20%, hitting players; when it
// dies, loot is granted once, and a new run starts a few seconds later. Everything is
// deterministic given the instance ID, the tick numbers and the commands.
package dungeon

import (
	"fmt"
	"hash/fnv"
	"sort"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tickfence/tickfence/actor"
)

// Tuning of the demo fight.
const (
	DefaultBossHP  = 10000
	MaxPlayers     = 40
	PlayerHP       = 1000
	RespawnTicks   = 100 // ticks between the boss's death and the next run
	EnrageHitEvery = 10  // ticks between the enraged boss's hits
	maxLoot        = 32
)

// Phases of the boss.
const (
	Phase1 = "1"
	Phase2 = "2"
	Enrage = "enrage"
	Dead   = "dead"
)

var lootTable = []string{"sword of embers", "frost helm", "gilded boots", "ring of echoes", "tome of tides", "dragon scale"}

// Kind is the dungeon kind. Its name is "dungeon".
type Kind struct {
	// FrameEvery, if not 0, makes every dungeon publish a frame every this many ticks (see
	// Frame): its boss's HP and phase and its players, for the players watching it.
	FrameEvery uint64
	// Options are the kind's own tick rate, checkpoints and passivation (actor.KindOptions;
	// zero: the node's).
	Options actor.KindOptions
}

// Name implements actor.Kind.
func (Kind) Name() string { return "dungeon" }

// KindOptions implements actor.KindOptioner.
func (k Kind) KindOptions() actor.KindOptions { return k.Options }

// New implements actor.Kind. The create command may carry "boss_hp".
func (k Kind) New(id string, create actor.Command) (actor.Logic, error) {
	var args struct {
		BossHP int64 `msgpack:"boss_hp"`
	}
	if len(create.Body) > 0 {
		if err := create.Decode(&args); err != nil {
			return nil, err
		}
	}
	if args.BossHP < 0 || args.BossHP > 1e12 {
		return nil, &actor.Rejected{Code: "bad_request", Message: fmt.Sprintf("boss_hp %d out of range", args.BossHP)}
	}
	if args.BossHP == 0 {
		args.BossHP = DefaultBossHP
	}
	h := fnv.New64a()
	h.Write([]byte(id))
	s := &State{Run: 1, MaxHP: args.BossHP, HP: args.BossHP, Phase: Phase1, RNG: h.Sum64() | 1, frameEvery: k.FrameEvery}
	return s, nil
}

// PlayerMaxBossHP bounds the boss a player (an untrusted sender) may create: a trusted sender
// may ask for up to 1e12.
const PlayerMaxBossHP = 1_000_000

// AuthorizeCreate implements actor.CreateAuthorizer: players may open a dungeon, with a boss of
// at most PlayerMaxBossHP (their creates are bounded per minute by the node's quota).
func (Kind) AuthorizeCreate(id string, create actor.Command) error {
	if create.Sender.Trusted {
		return nil
	}
	var args struct {
		BossHP int64 `msgpack:"boss_hp"`
	}
	if err := create.Decode(&args); err != nil {
		return err
	}
	if args.BossHP > PlayerMaxBossHP {
		return &actor.Rejected{Code: "forbidden", Message: fmt.Sprintf("a player may open a dungeon with a boss of at most %d HP, not %d", PlayerMaxBossHP, args.BossHP)}
	}
	return nil
}

// Restore implements actor.Kind.
func (k Kind) Restore(id string, b []byte) (actor.Logic, error) {
	s := &State{frameEvery: k.FrameEvery}
	if err := msgpack.Unmarshal(b, s); err != nil {
		return nil, fmt.Errorf("dungeon %s: %w", id, err)
	}
	if s.MaxHP <= 0 || s.RNG == 0 {
		return nil, fmt.Errorf("dungeon %s: invalid state (max_hp %d)", id, s.MaxHP)
	}
	return s, nil
}

// State is a dungeon's whole state; it is what the record's "state" holds.
type State struct {
	Run       int      `msgpack:"run"`
	HP        int64    `msgpack:"hp"`
	MaxHP     int64    `msgpack:"max_hp"`
	Phase     string   `msgpack:"phase"`
	Players   []Player `msgpack:"players"` // sorted by name
	Loot      []Loot   `msgpack:"loot"`    // the last few grants, oldest first
	DiedAt    uint64   `msgpack:"died_at"`
	Kills     int      `msgpack:"kills"`
	RNG       uint64   `msgpack:"rng"`
	LastTick  uint64   `msgpack:"last_tick"`
	TotalDmg  int64    `msgpack:"total_damage"`
	LootGiven int      `msgpack:"loot_given"` // run whose loot was granted: loot is granted once per run

	actor.Frames         // this tick's frames (never stored)
	actor.Effects        // this tick's effects (stored by the instance's record, not here)
	frameEvery    uint64 // Kind.FrameEvery
}

// Player is a member of the raid.
type Player struct {
	Name   string `msgpack:"name"`
	HP     int64  `msgpack:"hp"`
	Damage int64  `msgpack:"damage"`
}

// Loot is one item granted to one player for one run.
type Loot struct {
	Run    int    `msgpack:"run"`
	Player string `msgpack:"player"`
	Item   string `msgpack:"item"`
}

func (s *State) rand() uint64 { // xorshift64: deterministic, kept in the state
	x := s.RNG
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	s.RNG = x
	return x
}

func (s *State) player(name string) (int, bool) {
	i := sort.Search(len(s.Players), func(i int) bool { return s.Players[i].Name >= name })
	return i, i < len(s.Players) && s.Players[i].Name == name
}

// Tick implements actor.Logic.
func (s *State) Tick(tick uint64) {
	s.LastTick = tick
	if s.frameEvery > 0 && tick%s.frameEvery == 0 {
		defer func() { s.Publish("", s.Frame()) }()
	}
	switch s.Phase {
	case Dead:
		if tick-s.DiedAt >= RespawnTicks {
			s.Run++
			s.HP, s.Phase = s.MaxHP, Phase1
			for i := range s.Players {
				s.Players[i].HP = PlayerHP
			}
		}
	case Enrage:
		if tick%EnrageHitEvery == 0 && len(s.Players) > 0 {
			p := &s.Players[s.rand()%uint64(len(s.Players))]
			p.HP = max(0, p.HP-int64(40+s.rand()%40))
		}
	}
}

type cmdArgs struct {
	Player string `msgpack:"player"`
}

// Handle implements actor.Logic: join, attack, leave, status.
func (s *State) Handle(tick uint64, cmd actor.Command) (any, error) {
	var a cmdArgs
	if err := cmd.Decode(&a); err != nil {
		return nil, err
	}
	switch cmd.Type {
	case "status":
		return s.summary(), nil
	case "join", "attack", "leave":
		if a.Player == "" || len(a.Player) > 32 {
			return nil, &actor.Rejected{Code: "bad_request", Message: cmd.Type + ": player must be 1..32 characters"}
		}
		// A player acts only for itself; a trusted sender for the player it names, or any.
		if !cmd.Sender.ActsFor(a.Player) {
			return nil, &actor.Rejected{Code: "forbidden", Message: fmt.Sprintf("%s: %q may act only for itself, not for %q", cmd.Type, cmd.Sender.Player, a.Player)}
		}
	default:
		return nil, &actor.Rejected{Code: "bad_request", Message: fmt.Sprintf("unknown command type %q (join, attack, leave, status)", cmd.Type)}
	}
	i, found := s.player(a.Player)
	switch cmd.Type {
	case "join":
		if found {
			return map[string]any{"joined": a.Player, "players": len(s.Players)}, nil
		}
		if len(s.Players) >= MaxPlayers {
			return nil, actor.Reject("dungeon is full (%d players)", MaxPlayers)
		}
		s.Players = append(s.Players, Player{})
		copy(s.Players[i+1:], s.Players[i:])
		s.Players[i] = Player{Name: a.Player, HP: PlayerHP}
		return map[string]any{"joined": a.Player, "players": len(s.Players)}, nil
	case "leave":
		if !found {
			return nil, actor.Reject("%s is not in the dungeon", a.Player)
		}
		s.Players = append(s.Players[:i], s.Players[i+1:]...)
		return map[string]any{"left": a.Player}, nil
	}
	// attack
	if !found {
		return nil, actor.Reject("%s has not joined", a.Player)
	}
	p := &s.Players[i]
	if p.HP == 0 {
		return nil, actor.Reject("%s is down", a.Player)
	}
	if s.Phase == Dead {
		return nil, actor.Reject("the boss is dead; next run at tick %d", s.DiedAt+RespawnTicks)
	}
	dmg := int64(50 + s.rand()%50)
	if s.Phase == Enrage {
		dmg /= 2 // the enraged boss shrugs off half
	}
	dmg = min(dmg, s.HP)
	s.HP -= dmg
	p.Damage += dmg
	s.TotalDmg += dmg
	switch {
	case s.HP == 0:
		s.die(tick)
	case s.HP*5 < s.MaxHP:
		s.Phase = Enrage
	case s.HP*2 < s.MaxHP:
		s.Phase = Phase2
	}
	return map[string]any{"damage": dmg, "hp": s.HP, "phase": s.Phase}, nil
}

func (s *State) die(tick uint64) {
	s.Phase, s.DiedAt = Dead, tick
	s.Kills++
	if s.LootGiven == s.Run {
		return
	}
	s.LootGiven = s.Run
	for _, p := range s.Players {
		l := Loot{Run: s.Run, Player: p.Name, Item: lootTable[s.rand()%uint64(len(lootTable))]}
		s.Loot = append(s.Loot, l)
		s.Emit("loot", l.effect()) // exactly once to the loot service (DESIGN 8)
	}
	if n := len(s.Loot) - maxLoot; n > 0 {
		s.Loot = append([]Loot(nil), s.Loot[n:]...)
	}
}

func (s *State) summary() map[string]any {
	return map[string]any{"run": s.Run, "hp": s.HP, "max_hp": s.MaxHP, "phase": s.Phase,
		"players": len(s.Players), "kills": s.Kills, "loot": len(s.Loot)}
}
