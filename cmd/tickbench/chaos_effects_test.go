package main

import (
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tickfence/tickfence/actor/dungeon"
	"github.com/tickfence/tickfence/store"
)

func lootPayload(t *testing.T, run int, player, item string) []byte {
	t.Helper()
	b, err := msgpack.Marshal(dungeon.Loot{Run: run, Player: player, Item: item})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The effects accounting: every kind of discrepancy is counted where it belongs.
func TestEffectsTally(t *testing.T) {
	ids := []string{"bench-0", "bench-1", "bench-2"}
	want := map[string]fxExpect{
		"bench-0": {n: 3, items: map[int]string{3: "frost helm"}},
		"bench-1": {n: 1, items: map[int]string{}},
		"bench-2": {n: 0},
	}
	st := func(id string, run int, item string) *storedFx {
		return &storedFx{n: 1, kind: "loot", instance: id, payload: lootPayload(t, run, "p", item)}
	}
	stored := map[string]*storedFx{
		"bench-0:1:1": st("bench-0", 1, "a"),
		"bench-0:1:2": st("bench-0", 2, "b"),
		"bench-0:1:3": st("bench-0", 3, "gilded boots"), // not the item the state granted
		"bench-0:1:4": st("bench-0", 4, "c"),            // beyond fx_seq: unexpected
		"bench-2:2:1": st("bench-2", 1, "d"),            // another epoch, and bench-2 never killed
		// bench-1:1:1 missing
	}
	stored["bench-0:1:1"].n = 2 // stored twice
	d := func(id string, n, run int, item string) fxDelivery {
		return fxDelivery{n: n, kind: "loot", instance: id, payload: lootPayload(t, run, "p", item)}
	}
	delivered := map[string]fxDelivery{
		"bench-0:1:1": d("bench-0", 3, 1, "a"),
		"bench-0:1:3": d("bench-0", 1, 3, "frost helm"),
		"bench-1:1:1": d("bench-1", 1, 2, "e"), // not in the stream (missing there), and the payload of run 2
		"bench-9:1:1": d("bench-9", 1, 1, "f"), // no such instance
		// bench-0:1:2 never delivered
	}
	e := effectsResult{Deliveries: 6}
	e.tally(1, ids, want, stored, delivered)
	check := func(name string, got, want int) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %d, want %d (examples %q)", name, got, want, e.Examples)
		}
	}
	check("expected", e.Expected, 4)
	check("stream keys", e.StreamKeys, 5)
	check("stream duplicates", e.StreamDuplicates, 1)
	check("delivered keys", e.DeliveredKeys, 4)
	check("redeliveries", e.Redeliveries, 2)
	check("keys redelivered", e.Redelivered, 1)
	check("unexpected", e.Unexpected, 3) // bench-0:1:4, bench-2:2:1, bench-9:1:1
	check("missing", e.Missing, 1)       // bench-1:1:1
	check("undelivered", e.Undelivered, 1)
	check("payload mismatches", e.PayloadMismatch, 2) // stored bench-0:1:3, delivered bench-1:1:1
	if f := e.failures(); len(f) == 0 {
		t.Error("no failure reported")
	}

	// All as it should be: a pass.
	stored = map[string]*storedFx{"bench-0:1:1": st("bench-0", 1, "a"), "bench-0:1:2": st("bench-0", 2, "b"),
		"bench-0:1:3": st("bench-0", 3, "frost helm"), "bench-1:1:1": st("bench-1", 1, "e")}
	delivered = map[string]fxDelivery{"bench-0:1:1": d("bench-0", 2, 1, "a"), "bench-0:1:2": d("bench-0", 1, 2, "b"),
		"bench-0:1:3": d("bench-0", 1, 3, "frost helm"), "bench-1:1:1": d("bench-1", 1, 1, "e")}
	e = effectsResult{Deliveries: 5, Applied: 4}
	e.tally(1, ids, want, stored, delivered)
	if f := e.failures(); len(f) != 0 || e.Redeliveries != 1 {
		t.Errorf("failures %q, redeliveries %d; want none, 1", f, e.Redeliveries)
	}
}

// What a state explains, and what makes it inconsistent.
func TestExpectedKeys(t *testing.T) {
	p := []dungeon.Player{{Name: "p", HP: 1000}}
	// Run 4 alive: runs 1..3 killed and granted, 150 damage in all, 20 into run 4.
	ok := fxState{Run: 4, HP: 30, MaxHP: 50, Players: p, Kills: 3, LootGiven: 3, TotalDmg: 170}
	base := store.FxSeqBase(7) // the instance was created at revision 7
	if n, b, bad := expectedKeys("x", store.Record{FxSeq: base + 3}, ok); n != 3 || b != base || len(bad) != 0 {
		t.Fatalf("alive: %d from %d, %q; want 3 from %d, none", n, b, bad, base)
	}
	// Run 4 dead: its loot granted too.
	dead := fxState{Run: 4, HP: 0, MaxHP: 50, Players: p, Kills: 4, LootGiven: 4, TotalDmg: 200}
	if n, _, bad := expectedKeys("x", store.Record{FxSeq: base + 4}, dead); n != 4 || len(bad) != 0 {
		t.Fatalf("dead: %d, %q; want 4, none", n, bad)
	}
	for name, c := range map[string]struct {
		st  fxState
		seq uint64
	}{
		"fx_seq beyond the grants": {ok, base + 4},
		"no base":                  {ok, 3},
		"damage":                   {fxState{Run: 4, HP: 30, MaxHP: 50, Players: p, Kills: 3, LootGiven: 3, TotalDmg: 171}, base + 3},
		"kills":                    {fxState{Run: 4, HP: 30, MaxHP: 50, Players: p, Kills: 4, LootGiven: 3, TotalDmg: 170}, base + 3},
		"players":                  {fxState{Run: 4, HP: 30, MaxHP: 50, Kills: 3, LootGiven: 3, TotalDmg: 170}, base + 3},
	} {
		if _, _, bad := expectedKeys("x", store.Record{FxSeq: c.seq}, c.st); len(bad) == 0 {
			t.Errorf("%s: not reported", name)
		}
	}
	if id, ep, seq, ok := store.ParseEffectKey("bench-7:12:345"); !ok || id != "bench-7" || ep != 12 || seq != 345 {
		t.Errorf("ParseEffectKey: %q %d %d %v", id, ep, seq, ok)
	}
	if _, _, _, ok := store.ParseEffectKey("bench-7:345"); ok {
		t.Error("ParseEffectKey accepted a key without an epoch")
	}
}
