package dungeon_test

import (
	"bytes"
	"testing"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/actor/dungeon"
	"github.com/tickfence/tickfence/shard/wire"
)

func cmd(t *testing.T, m map[string]any) actor.Command {
	t.Helper()
	b, err := wire.Canonical(m)
	if err != nil {
		t.Fatal(err)
	}
	return actor.Command{Type: m["type"].(string), Body: b}
}

func newDungeon(t *testing.T, id string, hp int) *dungeon.State {
	t.Helper()
	l, err := dungeon.Kind{}.New(id, cmd(t, map[string]any{"type": "create", "kind": "dungeon", "boss_hp": hp}))
	if err != nil {
		t.Fatal(err)
	}
	return l.(*dungeon.State)
}

// play runs a fixed script and returns the encoded state.
func play(t *testing.T, id string) []byte {
	s := newDungeon(t, id, 3000)
	for _, p := range []string{"ann", "bob", "cy"} {
		if _, err := s.Handle(1, cmd(t, map[string]any{"type": "join", "player": p})); err != nil {
			t.Fatal(err)
		}
	}
	for tick := uint64(2); tick < 400; tick++ {
		_, _ = s.Handle(tick, cmd(t, map[string]any{"type": "attack", "player": []string{"ann", "bob", "cy"}[tick%3]}))
		s.Tick(tick)
	}
	b, err := s.MarshalState()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDeterministic(t *testing.T) {
	if a, b := play(t, "d1"), play(t, "d1"); !bytes.Equal(a, b) {
		t.Fatal("same inputs, different states")
	}
	if a, b := play(t, "d1"), play(t, "d2"); bytes.Equal(a, b) {
		t.Fatal("different instances rolled the same dice")
	}
}

func TestPhasesLootOnceAndRespawn(t *testing.T) {
	s := newDungeon(t, "boss", 1000)
	if _, err := s.Handle(1, cmd(t, map[string]any{"type": "attack", "player": "ann"})); err == nil {
		t.Fatal("attack before join accepted")
	}
	for _, p := range []string{"ann", "bob"} {
		if _, err := s.Handle(1, cmd(t, map[string]any{"type": "join", "player": p})); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	tick := uint64(2)
	for ; s.Phase != dungeon.Dead; tick++ {
		if _, err := s.Handle(tick, cmd(t, map[string]any{"type": "attack", "player": "ann"})); err != nil {
			t.Fatalf("tick %d: %v", tick, err)
		}
		seen[s.Phase] = true
		switch {
		case s.Phase == dungeon.Phase2 && !(s.HP*2 < s.MaxHP):
			t.Fatalf("phase 2 at %d/%d HP", s.HP, s.MaxHP)
		case s.Phase == dungeon.Enrage && !(s.HP*5 < s.MaxHP):
			t.Fatalf("enrage at %d/%d HP", s.HP, s.MaxHP)
		}
		s.Tick(tick)
	}
	if !seen[dungeon.Phase2] || !seen[dungeon.Enrage] {
		t.Fatalf("phases seen %v, want 2 and enrage", seen)
	}
	if len(s.Loot) != 2 || s.Kills != 1 {
		t.Fatalf("after the kill: %d loot, %d kills; want one item per player and 1 kill", len(s.Loot), s.Kills)
	}
	if _, err := s.Handle(tick, cmd(t, map[string]any{"type": "attack", "player": "bob"})); err == nil {
		t.Fatal("attack on a dead boss accepted")
	}
	if len(s.Loot) != 2 {
		t.Fatalf("loot granted again: %d items", len(s.Loot))
	}
	died := s.DiedAt
	for ; tick <= died+dungeon.RespawnTicks; tick++ {
		s.Tick(tick)
	}
	if s.Phase != dungeon.Phase1 || s.HP != s.MaxHP || s.Run != 2 {
		t.Fatalf("after respawn: phase %s, hp %d, run %d", s.Phase, s.HP, s.Run)
	}
	// Restore gives back the same state.
	b, _ := s.MarshalState()
	r, err := dungeon.Kind{}.Restore("boss", b)
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := r.(*dungeon.State).MarshalState()
	if !bytes.Equal(b, b2) {
		t.Fatal("Restore changed the state")
	}
	if _, err := (dungeon.Kind{}).Restore("boss", []byte{0xc1}); err == nil {
		t.Fatal("garbage state restored")
	}
}
