package dungeon_test

import (
	"testing"

	"github.com/tickfence/tickfence/actor/dungeon"
	"github.com/tickfence/tickfence/actortest"
)

type playerCmd struct {
	Type   string `msgpack:"type"`
	Player string `msgpack:"player"`
}

type hit struct {
	Damage int64  `msgpack:"damage"`
	HP     int64  `msgpack:"hp"`
	Phase  string `msgpack:"phase"`
}

// A whole run through the harness, as players send it: the phases, loot granted once per run as
// effects, frames for the watchers, the respawn; moved to another node every 7 ticks, and played
// again from scratch to the same states.
func TestRaidWithHarness(t *testing.T) {
	h := actortest.New(t, dungeon.Kind{FrameEvery: 5}, actortest.ID("raid-1"),
		actortest.Create(map[string]any{"boss_hp": 3000}), actortest.RoundTripEvery(7))
	players := []string{"ann", "bob", "cy"}
	for i, p := range players {
		h.SendAs(actortest.Player(p), playerCmd{Type: "join", Player: p}).WantResult(map[string]any{"joined": p, "players": i + 1})
	}
	h.SendAs(actortest.Player("bob"), playerCmd{Type: "attack", Player: "ann"}).WantCode("forbidden")
	h.SendAs(actortest.TrustedFor("bob"), playerCmd{Type: "attack", Player: "ann"}).WantCode("forbidden")
	h.Send(playerCmd{Type: "attack", Player: "dan"}).WantCode("rejected")
	h.Send(map[string]any{"type": "attack"}).WantCode("bad_request")

	phases := map[string]uint64{} // phase → the tick it was first seen
	var kill uint64
	for kill == 0 {
		if h.LastTick() > 500 {
			t.Fatal("the boss never died")
		}
		p := players[h.LastTick()%3]
		var r hit
		h.SendAs(actortest.Player(p), playerCmd{Type: "attack", Player: p}).Decode(&r)
		if r.Damage < 25 || r.Damage > 99 {
			t.Fatalf("tick %d: damage %d", h.LastTick()+1, r.Damage)
		}
		if _, seen := phases[r.Phase]; !seen {
			phases[r.Phase] = h.LastTick() + 1
		}
		if r.Phase == dungeon.Dead {
			kill = h.LastTick() + 1
		}
		h.Tick(1)
	}
	if !(phases[dungeon.Phase1] < phases[dungeon.Phase2] && phases[dungeon.Phase2] < phases[dungeon.Enrage] && phases[dungeon.Enrage] < kill) {
		t.Fatalf("phases seen at %v, the kill at %d", phases, kill)
	}

	// Loot: one effect per player, at the kill, made by the attack that killed.
	loot := h.TakeEffects()
	if len(loot) != len(players) {
		t.Fatalf("%d effects at the kill, want one per player: %v", len(loot), loot)
	}
	for i, e := range loot {
		var l dungeon.Loot
		e.Decode(&l)
		if e.Kind != "loot" || e.Tick != kill || e.Command != "attack" || l.Player != players[i] || l.Run != 1 || l.Item == "" {
			t.Fatalf("effect %d: %s at tick %d from %q: %+v", i, e.Kind, e.Tick, e.Command, l)
		}
	}
	h.SendAs(actortest.Player("ann"), playerCmd{Type: "attack", Player: "ann"}).WantCode("rejected")

	// Frames every 5 ticks, the boss's HP in them.
	frames := h.TakeFrames("")
	if len(frames) != int(h.LastTick()/5) {
		t.Fatalf("%d frames in %d ticks", len(frames), h.LastTick())
	}
	for _, f := range frames {
		var fr struct {
			Tick    uint64           `msgpack:"tick"`
			HP      int64            `msgpack:"hp"`
			Players []map[string]any `msgpack:"players"`
		}
		f.Decode(&fr)
		if fr.Tick != f.Tick || f.Tick%5 != 0 || len(fr.Players) != 3 || (f.Tick >= kill) != (fr.HP == 0) {
			t.Fatalf("frame of tick %d: %+v", f.Tick, fr)
		}
	}

	// The next run starts RespawnTicks after the kill, with the boss and the players whole.
	h.TickUntil(dungeon.RespawnTicks+1, func() bool { return h.LastTick() >= kill+dungeon.RespawnTicks })
	var st dungeon.State
	h.State(&st)
	if st.Run != 2 || st.HP != 3000 || st.Phase != dungeon.Phase1 || st.Kills != 1 || len(st.Loot) != 3 {
		t.Fatalf("after the respawn: run %d hp %d phase %s kills %d loot %d", st.Run, st.HP, st.Phase, st.Kills, len(st.Loot))
	}
	for _, p := range st.Players {
		if p.HP != dungeon.PlayerHP {
			t.Fatalf("player %+v not healed", p)
		}
	}
	h.SendAs(actortest.Player("cy"), playerCmd{Type: "attack", Player: "cy"}).WantOK()
	h.Tick(3)
	if e := h.TakeEffects(); len(e) != 0 {
		t.Fatalf("effects without a kill: %v", e)
	}
	h.CheckDeterminism()
}

// Players may open a dungeon with a bounded boss (its actor.CreateAuthorizer); trusted senders
// may ask for more.
func TestPlayersCreateWithHarness(t *testing.T) {
	big := actortest.Create(map[string]any{"boss_hp": dungeon.PlayerMaxBossHP + 1})
	if _, res := actortest.TryNew(t, dungeon.Kind{}, big, actortest.CreatedBy(actortest.Player("ann"))); res.Code() != "forbidden" {
		t.Fatalf("a player's big boss: %v", res)
	}
	actortest.New(t, dungeon.Kind{}, big) // trusted
	h := actortest.New(t, dungeon.Kind{}, actortest.CreatedBy(actortest.Player("ann")), actortest.Create(map[string]any{"boss_hp": 500}))
	h.Send(map[string]any{"type": "status"}).WantResult(map[string]any{"hp": 500, "max_hp": 500, "phase": dungeon.Phase1, "players": 0})
	if _, res := actortest.TryNew(t, dungeon.Kind{}, actortest.Create(map[string]any{"boss_hp": -5})); res.Code() != "bad_request" {
		t.Fatalf("a negative boss: %v", res)
	}
}
