package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/tickfence/tickfence/actortest"
)

// A whole run through the harness, as the bots play it: four heroes join (a fifth is refused),
// use their abilities when their HUD says they are ready, the boss goes through its phases and
// scorches the terrain, its death drops one loot per hero, and the next run starts 100 ticks
// later; then a hero leaves and one goes quiet. On the way the raid moves to another node every
// 25 ticks (MarshalState → Restore), and the same inputs played again give the same states.
func TestRaidWithHarness(t *testing.T) {
	h := actortest.New(t, Kind{}, actortest.Create(map[string]any{"boss_hp": 900}), actortest.RoundTripEvery(25))
	ada, bob, cid, dee := actortest.Player("ada"), actortest.Player("bob"), actortest.Player("cid"), actortest.Player("dee")

	h.SendAs(ada, JoinCmd{Type: "join"}).WantResult(map[string]any{"player": "ada", "since": 1})
	var used Used
	h.SendAs(bob, AbilityCmd{Type: "ability", Ability: "frostbolt"}).Decode(&used) // his first command joins him: the mage
	if used != (Used{Ability: "frostbolt", Damage: 25, BossHP: 875, Phase: 1, ReadyAt: 11}) {
		t.Fatalf("bob's frostbolt: %+v", used)
	}
	h.SendAs(bob, AbilityCmd{Type: "ability", Ability: "frostbolt"}).WantCode("cooldown")
	h.SendAs(bob, AbilityCmd{Type: "ability", Ability: "strike"}).WantCode("bad_request") // a warrior's
	h.SendAs(cid, JoinCmd{Type: "join"}).WantOK()
	h.SendAs(dee, JoinCmd{Type: "join"}).WantOK()
	h.SendAs(actortest.Player("eve"), JoinCmd{Type: "join"}).WantCode("rejected")  // the raid is full
	h.Send(AbilityCmd{Type: "ability", Ability: "strike"}).WantCode("bad_request") // a trusted sender is no hero
	h.Send(map[string]any{"type": "status"}).WantResult(map[string]any{"boss_hp": 875, "heroes": []any{
		map[string]any{"name": "ada", "class": "warrior"}, map[string]any{"name": "bob", "class": "mage"},
		map[string]any{"name": "cid", "class": "priest"}, map[string]any{"name": "dee", "class": "rogue"}}})

	// The fight: every hero uses what its own HUD says is ready.
	phases, scorched, huds := map[int]bool{}, 0, map[string]int{}
	var loot []Loot
	for h.LastTick() < 1000 && len(loot) == 0 {
		h.Tick(1)
		for _, f := range h.TakeFrames() {
			switch f.Topic {
			case "":
				var b BossFrame
				f.Decode(&b)
				phases[b.Phase] = true
			case "scorch":
				scorched++
			case "hud":
				var hud HUD
				f.Decode(&hud)
				huds[f.To]++ // a HUD is for one hero only
				for _, a := range hud.Abilities {
					if a.ReadyAt <= hud.Tick && hud.DownUntil == 0 {
						r := h.SendAs(actortest.Player(f.To), AbilityCmd{Type: "ability", Ability: a.Name})
						for _, e := range r.Effects() {
							var l Loot
							e.Decode(&l)
							loot = append(loot, l)
						}
					}
				}
			}
		}
	}
	if len(phases) != 3 || scorched == 0 || len(huds) != 4 {
		t.Fatalf("phases seen %v, breaths %d, HUDs by hero %v", phases, scorched, huds)
	}
	var names []string
	for _, l := range loot {
		names = append(names, l.Player)
		if l.Run != 1 || !slices.Contains(items, l.Item) {
			t.Fatalf("loot %+v", l)
		}
	}
	if strings.Join(names, " ") != "ada bob cid dee" {
		t.Fatalf("loot for %v, want one for each hero", names)
	}
	var st Raid
	h.State(&st)
	if st.Boss.HP != 0 || st.Boss.Scorched == 0 || bytes.Count(st.Terrain, []byte{0}) == W*H {
		t.Fatalf("after the kill: boss %+v", st.Boss)
	}
	h.SendAs(ada, AbilityCmd{Type: "ability", Ability: "strike"}).WantCode("no_boss")
	h.Tick(RespawnAfter + 1) // the kill was applied at the start of the next tick
	h.State(&st)
	if st.Boss.Run != 2 || st.Boss.HP != 900 || st.Boss.Scorched != 0 || bytes.Count(st.Terrain, []byte{0}) != W*H {
		t.Fatalf("the next run: boss %+v", st.Boss)
	}

	// dee leaves; bob goes quiet while ada and cid only watch (their clients' heartbeats).
	h.SendAs(dee, map[string]any{"type": "leave"}).WantResult(map[string]any{"player": "dee", "left": true})
	h.TakeFrames()
	for range 3 {
		h.Heartbeat("ada")
		h.Heartbeat("cid")
		h.Tick(100)
	}
	var events []string
	for _, f := range h.TakeFrames("events") {
		var e string
		f.Decode(&e)
		events = append(events, e)
	}
	if p := h.Present(); len(p) != 2 || p[0].Player != "ada" || p[1].Player != "cid" || !slices.Contains(events, "bob leaves (disconnected)") {
		t.Fatalf("present %+v, events %q", p, events)
	}
	h.CheckDeterminism()
}

// An idle raid — no hero in — changes nothing in its state: its checkpoints upload no new blob
// (a state over 64 KiB is stored as one, uploaded only when its bytes change).
func TestIdleRaidStateDoesNotChange(t *testing.T) {
	h := actortest.New(t, Kind{})
	h.SendAs(actortest.Player("ada"), AbilityCmd{Type: "ability", Ability: "strike"}).WantOK()
	h.Tick(70) // a breath, blows
	h.SendAs(actortest.Player("ada"), map[string]any{"type": "leave"}).WantOK()
	h.Tick(1)
	idle := h.StateBytes()
	if len(idle) <= 64<<10 {
		t.Fatalf("the state is %d bytes: not a large state", len(idle))
	}
	h.Tick(1000)
	if !bytes.Equal(idle, h.StateBytes()) {
		t.Fatal("an idle raid's state changed")
	}
	h.CheckRoundTrip()
}

// The create's boss_hp is checked.
func TestCreateChecksBossHP(t *testing.T) {
	if _, res := actortest.TryNew(t, Kind{}, actortest.Create(map[string]any{"boss_hp": -5})); res.Code() != "bad_request" {
		t.Fatalf("a negative boss_hp: %v", res)
	}
}
