package main

import (
	"fmt"
	"slices"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tickfence/tickfence/actor"
)

// The rules of the raid, every time in ticks (20 a second): up to four heroes fight a boss whose
// fire breath scorches a 100 KiB terrain; each hero's abilities have cooldowns; the boss has
// three phases; a kill drops loot for every hero in, and the next run starts 100 ticks later.
const (
	W, H         = 320, 320 // the terrain: W × H bytes, 100 KiB, stored as a blob (over 64 KiB)
	MaxHeroes    = 4
	HeroHP       = 300
	BossHP       = 3000 // unless the create says "boss_hp"
	BlowEvery    = 40   // ticks between the boss's blows (20 once enraged)
	BreathEvery  = 60   // ticks between fire breaths, from phase 2 on
	BreathSize   = 48   // a breath scorches a BreathSize × BreathSize square round its target
	BurnEvery    = 10   // a hero on scorched ground loses 5 HP this often
	DownFor      = 100  // ticks a fallen hero stays down
	RespawnAfter = 100  // ticks from a kill to the next run
	FrameEvery   = 5    // ticks between frames
)

// Ability is what a hero can do, and how long it takes to be ready again.
type Ability struct {
	Name     string
	Damage   int    // to the boss
	Heal     int    // to the most hurt hero that is up
	Shield   uint64 // ticks of halved damage for the hero who uses it
	Cooldown uint64 // ticks
}

// Classes: a hero joining takes the first class no other hero has; each has two abilities.
var Classes = []struct {
	Name      string
	Abilities [2]Ability
}{
	{"warrior", [2]Ability{{Name: "strike", Damage: 40, Cooldown: 20}, {Name: "shield", Shield: 100, Cooldown: 200}}},
	{"mage", [2]Ability{{Name: "frostbolt", Damage: 25, Cooldown: 10}, {Name: "fireball", Damage: 160, Cooldown: 100}}},
	{"priest", [2]Ability{{Name: "smite", Damage: 20, Cooldown: 10}, {Name: "heal", Heal: 120, Cooldown: 60}}},
	{"rogue", [2]Ability{{Name: "stab", Damage: 30, Cooldown: 10}, {Name: "backstab", Damage: 200, Cooldown: 160}}},
}

var items = []string{"Ember Blade", "Ashen Cowl", "Cinder Ring", "Phoenix Down", "Charred Tome", "Slag Shield", "Smouldering Boots"}

// Kind is the raid's kind of instance: "raid".
type Kind struct{}

// Name implements actor.Kind.
func (Kind) Name() string { return "raid" }

// New implements actor.Kind: {"type":"create","kind":"raid"}, optionally with "boss_hp".
func (Kind) New(id string, create actor.Command) (actor.Logic, error) {
	var args struct {
		BossHP int `msgpack:"boss_hp"`
	}
	if err := create.Decode(&args); err != nil {
		return nil, err
	}
	if args.BossHP == 0 {
		args.BossHP = BossHP
	}
	if args.BossHP < 0 || args.BossHP > 1_000_000 {
		return nil, &actor.Rejected{Code: "bad_request", Message: "boss_hp must be in 1..1000000"}
	}
	return &Raid{Boss: Boss{MaxHP: args.BossHP, HP: args.BossHP, Run: 1}, Terrain: make([]byte, W*H)}, nil
}

// KindOptions implements actor.KindOptioner: a raid that had no command and no watcher for a
// minute is unloaded (passivated) until its next command or watcher wakes it.
func (Kind) KindOptions() actor.KindOptions { return actor.KindOptions{Passivate: time.Minute} }

// Restore implements actor.Kind: the state MarshalState wrote, on whichever node loads it.
func (Kind) Restore(id string, state []byte) (actor.Logic, error) {
	r := &Raid{}
	if err := msgpack.Unmarshal(state, r); err != nil {
		return nil, fmt.Errorf("raid %s: %w", id, err)
	}
	if len(r.Terrain) != W*H {
		return nil, fmt.Errorf("raid %s: terrain of %d bytes, want %d", id, len(r.Terrain), W*H)
	}
	return r, nil
}

// Raid is one raid's whole state: what its record stores. No maps (msgpack would write their
// keys in a random order: the same state in other bytes, a new blob each write) and no wall
// clock: every timer is the tick at which something happens.
type Raid struct {
	Heroes  []Hero `msgpack:"heroes"` // sorted by name
	Boss    Boss   `msgpack:"boss"`
	Terrain []byte `msgpack:"terrain"` // W × H; not 0: scorched

	actor.Frames  // Publish, PublishTo: shown to watchers after the tick, never stored
	actor.Effects // Emit: stored with the state, then delivered exactly once
}

// Hero is a player in the raid.
type Hero struct {
	Name        string    `msgpack:"name"`
	Class       int       `msgpack:"class"` // in Classes
	HP          int       `msgpack:"hp"`
	X           int       `msgpack:"x"`
	Y           int       `msgpack:"y"`
	Ready       [2]uint64 `msgpack:"ready"`        // the tick each ability is ready again
	ShieldUntil uint64    `msgpack:"shield_until"` // damage is halved before this tick
	DownUntil   uint64    `msgpack:"down_until"`   // fallen until this tick (0: up)
	Dealt       int       `msgpack:"dealt"`        // damage dealt this run
}

// Boss is the boss and its timers.
type Boss struct {
	MaxHP      int    `msgpack:"max_hp"`
	HP         int    `msgpack:"hp"` // 0: dead until RespawnAt
	Run        int    `msgpack:"run"`
	Blows      int    `msgpack:"blows"` // blows struck this run: the next one's target
	NextBlow   uint64 `msgpack:"next_blow"`
	NextBreath uint64 `msgpack:"next_breath"`
	RespawnAt  uint64 `msgpack:"respawn_at"`
	Scorched   int    `msgpack:"scorched"` // scorched tiles of the terrain
}

// Phase is 1 above 60 % HP, 2 (fire breath) above 25 %, then 3 (enraged: blows twice as often).
func (b Boss) Phase() int {
	switch {
	case b.HP*100 > b.MaxHP*60:
		return 1
	case b.HP*100 > b.MaxHP*25:
		return 2
	}
	return 3
}

func (r *Raid) hero(name string) *Hero {
	i, ok := slices.BinarySearchFunc(r.Heroes, name, func(h Hero, n string) int { return cmp(h.Name, n) })
	if !ok {
		return nil
	}
	return &r.Heroes[i]
}

func cmp(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Join implements actor.PlayerJoiner: a player's first command (or {"type":"join"}) makes it a
// hero, with the first class free. An error keeps it out, and its command is refused.
func (r *Raid) Join(tick uint64, who actor.Sender) error {
	if len(r.Heroes) >= MaxHeroes {
		return actor.Reject("the raid is full (%d heroes)", MaxHeroes)
	}
	class := 0
	for slices.ContainsFunc(r.Heroes, func(h Hero) bool { return h.Class == class }) {
		class++
	}
	i, _ := slices.BinarySearchFunc(r.Heroes, who.Player, func(h Hero, n string) int { return cmp(h.Name, n) })
	r.Heroes = slices.Insert(r.Heroes, i, Hero{Name: who.Player, Class: class, HP: HeroHP, X: W/2 - 60 + 40*class, Y: H/2 + 60})
	r.event(fmt.Sprintf("%s joins as the %s", who.Player, Classes[class].Name))
	return nil
}

// Leave implements actor.PlayerLeaver: {"type":"leave"}, a client gone quiet for
// PresenceTimeout ticks, or the end of the raid.
func (r *Raid) Leave(tick uint64, player string, why actor.LeaveReason) {
	r.Heroes = slices.DeleteFunc(r.Heroes, func(h Hero) bool { return h.Name == player })
	r.event(fmt.Sprintf("%s leaves (%s)", player, why))
}

// PresenceTimeout implements actor.PresenceTimeout: 10 s without a command or a heartbeat (a
// watching client sends one every 5 s) and a hero is disconnected.
func (r *Raid) PresenceTimeout() uint64 { return 200 }

// Tick implements actor.Logic. Without heroes nothing happens, so nothing in the state changes:
// an idle raid's writes upload no new blob.
func (r *Raid) Tick(tick uint64) {
	if len(r.Heroes) == 0 {
		return
	}
	b := &r.Boss
	if b.HP == 0 && tick >= b.RespawnAt {
		*b = Boss{MaxHP: b.MaxHP, HP: b.MaxHP, Run: b.Run + 1, NextBlow: tick + BlowEvery, NextBreath: tick + BreathEvery}
		clear(r.Terrain) // the fire dies down with its boss
		r.event(fmt.Sprintf("run %d: the boss rises again", b.Run))
	}
	for i := range r.Heroes {
		if h := &r.Heroes[i]; h.DownUntil != 0 && tick >= h.DownUntil {
			h.DownUntil, h.HP = 0, HeroHP/2
		}
	}
	if b.HP > 0 && tick >= b.NextBlow {
		r.blow(tick)
	}
	if b.HP > 0 && b.Phase() >= 2 && tick >= b.NextBreath {
		r.breathe(tick)
	}
	if b.HP > 0 && tick%BurnEvery == 0 {
		for i := range r.Heroes {
			if h := &r.Heroes[i]; h.DownUntil == 0 && r.Terrain[h.Y*W+h.X] != 0 {
				r.hurt(tick, h, 5)
			}
		}
	}
	if tick%FrameEvery == 0 {
		r.show(tick)
	}
}

// target is the hero the boss turns to next: the up ones in turn (nil if all are down).
func (r *Raid) target() *Hero {
	var up []int
	for i, h := range r.Heroes {
		if h.DownUntil == 0 {
			up = append(up, i)
		}
	}
	if len(up) == 0 {
		return nil
	}
	return &r.Heroes[up[r.Boss.Blows%len(up)]]
}

func (r *Raid) blow(tick uint64) {
	b := &r.Boss
	every, dmg := uint64(BlowEvery), 30
	if b.Phase() == 3 {
		every, dmg = BlowEvery/2, 45
	}
	b.NextBlow = tick + every
	if h := r.target(); h != nil {
		b.Blows++
		r.hurt(tick, h, dmg)
	}
}

func (r *Raid) hurt(tick uint64, h *Hero, dmg int) {
	if tick < h.ShieldUntil {
		dmg /= 2
	}
	if h.HP = max(h.HP-dmg, 0); h.HP == 0 {
		h.DownUntil = tick + DownFor
		r.event(fmt.Sprintf("%s falls", h.Name))
	}
}

// breathe scorches the terrain round the boss's next target, and shows where.
func (r *Raid) breathe(tick uint64) {
	r.Boss.NextBreath = tick + BreathEvery
	h := r.target()
	if h == nil {
		return
	}
	x0, y0 := min(max(h.X-BreathSize/2, 0), W-BreathSize), min(max(h.Y-BreathSize/2, 0), H-BreathSize)
	for y := y0; y < y0+BreathSize; y++ {
		for x := x0; x < x0+BreathSize; x++ {
			if r.Terrain[y*W+x] == 0 {
				r.Boss.Scorched++
			}
			r.Terrain[y*W+x] = min(r.Terrain[y*W+x]+1, 255)
		}
	}
	r.publish("scorch", Scorch{X: x0, Y: y0, Size: BreathSize})
}

// AbilityCmd uses one of the sender's abilities: {"type":"ability","ability":"strike"}.
type AbilityCmd struct {
	Type    string `msgpack:"type"` // "ability"
	Ability string `msgpack:"ability"`
}

// MoveCmd moves the sender's hero by at most 8 in each axis: {"type":"move","dx":3,"dy":-2}.
type MoveCmd struct {
	Type string `msgpack:"type"` // "move"
	DX   int    `msgpack:"dx"`
	DY   int    `msgpack:"dy"`
}

// Used is the answer to an ability.
type Used struct {
	Ability string `msgpack:"ability"`
	Damage  int    `msgpack:"damage"`
	BossHP  int    `msgpack:"boss_hp"`
	Phase   int    `msgpack:"phase"`
	ReadyAt uint64 `msgpack:"ready_at"`
}

// Loot is the payload of a "loot" effect: one per hero in at a kill.
type Loot struct {
	Run    int    `msgpack:"run"`
	Player string `msgpack:"player"`
	Item   string `msgpack:"item"`
}

// Handle implements actor.Logic: ability, move, status. The sender is a hero already: a
// player's first command joined it (Join), and "join" and "leave" never reach Handle.
func (r *Raid) Handle(tick uint64, cmd actor.Command) (any, error) {
	if cmd.Type == "status" {
		return r.status(), nil
	}
	h := r.hero(cmd.Sender.Player)
	if h == nil {
		return nil, &actor.Rejected{Code: "bad_request", Message: cmd.Type + ": a hero's command: send it as a player"}
	}
	switch cmd.Type {
	case "ability":
		var c AbilityCmd
		if err := cmd.Decode(&c); err != nil {
			return nil, err
		}
		return r.use(tick, h, c.Ability)
	case "move":
		var c MoveCmd
		if err := cmd.Decode(&c); err != nil {
			return nil, err
		}
		if c.DX < -8 || c.DX > 8 || c.DY < -8 || c.DY > 8 {
			return nil, &actor.Rejected{Code: "bad_request", Message: "a move is at most 8 in each axis"}
		}
		if h.DownUntil != 0 {
			return nil, &actor.Rejected{Code: "down", Message: fmt.Sprintf("%s is down until tick %d", h.Name, h.DownUntil)}
		}
		h.X, h.Y = min(max(h.X+c.DX, 0), W-1), min(max(h.Y+c.DY, 0), H-1)
		return map[string]any{"x": h.X, "y": h.Y, "burning": r.Terrain[h.Y*W+h.X] != 0}, nil
	}
	return nil, &actor.Rejected{Code: "bad_request", Message: fmt.Sprintf("unknown command %q (ability, move, status, join, leave)", cmd.Type)}
}

// use applies hero h's ability: refused while it cools down (a code of the game's own), while h
// is down, or while the boss is dead.
func (r *Raid) use(tick uint64, h *Hero, name string) (any, error) {
	class := Classes[h.Class]
	i := slices.IndexFunc(class.Abilities[:], func(a Ability) bool { return a.Name == name })
	if i < 0 {
		return nil, &actor.Rejected{Code: "bad_request", Message: fmt.Sprintf("a %s's abilities are %s and %s", class.Name, class.Abilities[0].Name, class.Abilities[1].Name)}
	}
	a, b := class.Abilities[i], &r.Boss
	switch {
	case h.DownUntil != 0:
		return nil, &actor.Rejected{Code: "down", Message: fmt.Sprintf("%s is down until tick %d", h.Name, h.DownUntil)}
	case b.HP == 0:
		return nil, &actor.Rejected{Code: "no_boss", Message: fmt.Sprintf("the boss is dead; run %d starts at tick %d", b.Run+1, b.RespawnAt)}
	case tick < h.Ready[i]:
		return nil, &actor.Rejected{Code: "cooldown", Message: fmt.Sprintf("%s is ready at tick %d", name, h.Ready[i])}
	}
	dmg := min(a.Damage, b.HP)
	if dmg > 0 && dmg == b.HP {
		// The killing blow: the loot is emitted first, so that a refused effect refuses the
		// command before anything changed (nothing is stored, and the client is told).
		for j, x := range r.Heroes {
			p, _ := msgpack.Marshal(Loot{Run: b.Run, Player: x.Name, Item: items[(b.Run*3+j+b.Blows)%len(items)]})
			if err := r.Emit("loot", p); err != nil {
				return nil, &actor.Rejected{Code: "bad_request", Message: err.Error()}
			}
		}
	}
	h.Ready[i] = tick + a.Cooldown
	b.HP -= dmg
	h.Dealt += dmg
	if a.Shield > 0 {
		h.ShieldUntil = tick + a.Shield
	}
	if a.Heal > 0 {
		if w := r.mostHurt(); w != nil {
			w.HP = min(w.HP+a.Heal, HeroHP)
		}
	}
	if dmg > 0 && b.HP == 0 {
		b.RespawnAt = tick + RespawnAfter
		r.event(fmt.Sprintf("%s's %s fells the boss: run %d won", h.Name, name, b.Run))
	}
	return Used{Ability: name, Damage: dmg, BossHP: b.HP, Phase: b.Phase(), ReadyAt: h.Ready[i]}, nil
}

func (r *Raid) mostHurt() *Hero {
	var w *Hero
	for i := range r.Heroes {
		if h := &r.Heroes[i]; h.DownUntil == 0 && (w == nil || h.HP < w.HP) {
			w = h
		}
	}
	return w
}

// MarshalState implements actor.Logic: the same state always makes the same bytes.
func (r *Raid) MarshalState() ([]byte, error) { return msgpack.Marshal(r) }
