package dungeon_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

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
	return actor.Command{Type: m["type"].(string), Body: b, Sender: actor.Sender{Trusted: true}}
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

// MarshalState writes what msgpack.Marshal writes for the same state (it decodes to the same
// State), never in more bytes: random
// states (integers at every width and sign, strings at every length class, nil and empty slices)
// and states a real fight produces.
func TestMarshalStateIsMsgpack(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ints := []int64{0, 1, 31, 127, 128, 255, 256, 32767, 32768, 65535, 65536, 1<<31 - 1, 1 << 31, 1<<32 - 1, 1 << 32, math.MaxInt64,
		-1, -32, -33, -128, -129, -32768, -32769, -1 << 31, -1<<31 - 1, math.MinInt64}
	anyInt := func() int64 {
		if rng.IntN(4) == 0 {
			return rng.Int64() - rng.Int64()
		}
		return ints[rng.IntN(len(ints))]
	}
	anyUint := func() uint64 {
		if rng.IntN(3) == 0 {
			return rng.Uint64() >> rng.IntN(64)
		}
		return uint64(ints[rng.IntN(len(ints))])
	}
	anyStr := func() string {
		return strings.Repeat("x", []int{0, 1, 31, 32, 255, 256, 70000}[rng.IntN(7)])
	}
	check := func(s *dungeon.State) {
		t.Helper()
		want, err := msgpack.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := s.MarshalState()
		var mine, theirs dungeon.State
		if err := msgpack.Unmarshal(got, &mine); err != nil {
			t.Fatalf("decode: %v", err)
		}
		if err := msgpack.Unmarshal(want, &theirs); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(mine, theirs) {
			t.Fatalf("MarshalState decodes to another state than msgpack.Marshal:\n got %+v\nwant %+v", mine, theirs)
		}
		if len(got) > len(want) {
			t.Fatalf("MarshalState wrote %d bytes, msgpack.Marshal %d", len(got), len(want))
		}
	}
	for range 400 {
		s := &dungeon.State{Run: int(anyInt()), HP: anyInt(), MaxHP: anyInt(), Phase: anyStr(), DiedAt: anyUint(), Kills: int(anyInt()),
			RNG: anyUint(), LastTick: anyUint(), TotalDmg: anyInt(), LootGiven: int(anyInt())}
		switch rng.IntN(3) {
		case 0: // nil slices
		case 1:
			s.Players, s.Loot = []dungeon.Player{}, []dungeon.Loot{}
		default:
			for range rng.IntN(20) {
				s.Players = append(s.Players, dungeon.Player{Name: anyStr(), HP: anyInt(), Damage: anyInt()})
			}
			for range rng.IntN(20) {
				s.Loot = append(s.Loot, dungeon.Loot{Run: int(anyInt()), Player: anyStr(), Item: anyStr()})
			}
		}
		check(s)
	}
	// A real fight, to its loot.
	l, err := dungeon.Kind{}.New("d", cmd(t, map[string]any{"type": "create", "kind": "dungeon"}))
	if err != nil {
		t.Fatal(err)
	}
	s := l.(*dungeon.State)
	for i := range 4 {
		if _, err := s.Handle(0, cmd(t, map[string]any{"type": "join", "player": fmt.Sprintf("p%d", i)})); err != nil {
			t.Fatal(err)
		}
	}
	for tick := uint64(1); tick < 3000; tick++ {
		s.Tick(tick)
		_, _ = s.Handle(tick, cmd(t, map[string]any{"type": "attack", "player": fmt.Sprintf("p%d", tick%4)}))
		check(s)
	}
	if s.Kills == 0 || len(s.Loot) == 0 {
		t.Fatalf("the fight never ended: %+v", s)
	}
}

func BenchmarkMarshalState(b *testing.B) {
	l, _ := dungeon.Kind{}.New("d", actor.Command{Type: "create"})
	s := l.(*dungeon.State)
	for i := range 4 {
		_, _ = s.Handle(0, actor.Command{Type: "join", Body: mustCanonical(map[string]any{"type": "join", "player": fmt.Sprintf("p%d", i)}), Sender: actor.Sender{Trusted: true}})
	}
	b.Run("hand-written", func(b *testing.B) {
		for b.Loop() {
			_, _ = s.MarshalState()
		}
	})
	b.Run("msgpack.Marshal", func(b *testing.B) {
		for b.Loop() {
			_, _ = msgpack.Marshal(s)
		}
	})
}

func mustCanonical(m map[string]any) []byte {
	b, err := wire.Canonical(m)
	if err != nil {
		panic(err)
	}
	return b
}

// TestPlayersActOnlyForThemselves: an untrusted sender joins, attacks and leaves only as the
// player its credential names; a trusted one as anyone, or as the player it names.
func TestPlayersActOnlyForThemselves(t *testing.T) {
	d := newDungeon(t, "d", 100)
	ann := actor.Sender{Name: "ann", Player: "ann"}
	as := func(s actor.Sender, m map[string]any) actor.Command { c := cmd(t, m); c.Sender = s; return c }
	if _, err := d.Handle(1, as(ann, map[string]any{"type": "join", "player": "ann"})); err != nil {
		t.Fatalf("ann joins as ann: %v", err)
	}
	for _, typ := range []string{"join", "attack", "leave"} {
		_, err := d.Handle(2, as(ann, map[string]any{"type": typ, "player": "bob"}))
		var rj *actor.Rejected
		if !errors.As(err, &rj) || rj.Code != "forbidden" {
			t.Errorf("ann %s as bob: %v, want forbidden", typ, err)
		}
	}
	gw := actor.Sender{Name: "gw", Trusted: true, Player: "cat"}
	if _, err := d.Handle(3, as(gw, map[string]any{"type": "join", "player": "dan"})); err == nil {
		t.Error("a trusted gateway acting for cat joined as dan")
	}
	if _, err := d.Handle(3, as(gw, map[string]any{"type": "join", "player": "cat"})); err != nil {
		t.Errorf("a trusted gateway acting for cat joins as cat: %v", err)
	}
	// A player may open a dungeon with a bounded boss; a trusted sender with any.
	k := dungeon.Kind{}
	if err := k.AuthorizeCreate("x", as(ann, map[string]any{"type": "create", "kind": "dungeon", "boss_hp": int64(1e12)})); err == nil {
		t.Error("a player created a dungeon with a 1e12 HP boss")
	}
	if err := k.AuthorizeCreate("x", as(ann, map[string]any{"type": "create", "kind": "dungeon", "boss_hp": 500})); err != nil {
		t.Errorf("a player's 500 HP dungeon: %v", err)
	}
	if err := k.AuthorizeCreate("x", cmd(t, map[string]any{"type": "create", "kind": "dungeon", "boss_hp": int64(1e12)})); err != nil {
		t.Errorf("a trusted sender's 1e12 HP dungeon: %v", err)
	}
}
