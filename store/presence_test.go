package store_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tickfence/tickfence/store"
)

// TestPresenceRoundTripAndVersion: the players present survive encoding; a record holding some
// is written as version 5, one holding none as version 4 (what builds before presence read), and
// a version-4 reader's bound would refuse the first rather than forget who is in.
func TestPresenceRoundTripAndVersion(t *testing.T) {
	r := store.Record{Kind: "lobby", Tick: 9}
	b, err := store.EncodeRecord(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := store.DecodeRecord(b)
	if err != nil || got.V != 4 || got.Players != nil {
		t.Fatalf("a record without players: v %d, players %v, %v; want version 4, none", got.V, got.Players, err)
	}
	for _, p := range []string{"cid", "ada", "bob"} {
		if !r.AddPlayer(p, 3) {
			t.Fatalf("add %s", p)
		}
	}
	if r.AddPlayer("bob", 4) {
		t.Fatal("bob added twice")
	}
	r.SeePlayers(map[string]struct{}{"bob": {}, "zed": {}}, 8)
	if b, err = store.EncodeRecord(r); err != nil {
		t.Fatal(err)
	}
	if got, err = store.DecodeRecord(b); err != nil {
		t.Fatal(err)
	}
	want := []store.Presence{{Player: "ada", Since: 3, Seen: 3}, {Player: "bob", Since: 3, Seen: 8}, {Player: "cid", Since: 3, Seen: 3}}
	if got.V != store.PresenceVersion || !slices.Equal(got.Players, want) {
		t.Fatalf("decoded v %d, players %+v; want version %d, %+v", got.V, got.Players, store.PresenceVersion, want)
	}
	if store.SchemaVersion < store.PresenceVersion {
		t.Fatalf("SchemaVersion %d reads no presence (version %d)", store.SchemaVersion, store.PresenceVersion)
	}
}

// TestPresenceNeverChangesACopy: a record handed to a write shares its arrays with the one the
// instance goes on changing; no change to presence may show in the copy.
func TestPresenceNeverChangesACopy(t *testing.T) {
	var r store.Record
	r.AddPlayer("ada", 1)
	r.AddPlayer("bob", 1)
	r.AddPlayer("cid", 1)
	copied := r // what a write holds
	before := slices.Clone(copied.Players)
	r.SeePlayers(map[string]struct{}{"ada": {}}, 5)
	r.RemovePlayer("bob")
	r.AddPlayer("abe", 6)
	r.AddPlayer("dan", 6)
	if !slices.Equal(copied.Players, before) {
		t.Fatalf("the copy's players changed: %+v, want %+v", copied.Players, before)
	}
	if p, ok := r.Present("ada"); !ok || p.Seen != 5 {
		t.Fatalf("ada: %+v %v", p, ok)
	}
	if _, ok := r.Present("bob"); ok {
		t.Fatal("bob still present")
	}
}

// TestPresenceIsBounded: MaxPlayers are in at most.
func TestPresenceIsBounded(t *testing.T) {
	var r store.Record
	for i := range store.MaxPlayers {
		if !r.AddPlayer(fmt.Sprintf("p%04d", i), 1) {
			t.Fatalf("player %d refused", i)
		}
	}
	if r.AddPlayer("late", 2) {
		t.Fatalf("player %d admitted", store.MaxPlayers+1)
	}
	r.Kind = "lobby"
	if _, err := store.EncodeRecord(r); err != nil {
		t.Fatalf("a record with %d players: %v", store.MaxPlayers, err)
	}
}

// TestDecodeRefusesBadPresence: players out of order, repeated, unnamed or seen before they
// joined are a malformed record.
func TestDecodeRefusesBadPresence(t *testing.T) {
	cases := map[string][]map[string]any{
		"unordered":           {{"p": "bob", "since": 1, "seen": 1}, {"p": "ada", "since": 1, "seen": 1}},
		"repeated":            {{"p": "ada", "since": 1, "seen": 1}, {"p": "ada", "since": 2, "seen": 2}},
		"unnamed":             {{"p": "", "since": 1, "seen": 1}},
		"seen before joining": {{"p": "ada", "since": 5, "seen": 4}},
	}
	for name, players := range cases {
		b, err := msgpack.Marshal(map[string]any{"v": store.PresenceVersion, "kind": "k", "players": players})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.DecodeRecord(b); !errors.Is(err, store.ErrBadRecord) {
			t.Errorf("%s: %v, want ErrBadRecord", name, err)
		}
	}
}
