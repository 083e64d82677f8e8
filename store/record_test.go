package store_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tickfence/tickfence/store"
)

func TestRecordRoundTrip(t *testing.T) {
	r := store.Record{Token: 42, Tick: 7, Kind: "dungeon", State: []byte{1, 2, 3}}
	for i := 0; i < store.RequestWindow+10; i++ {
		r.RememberRequest(store.Request{ID: string(rune('a' + i%26)), Fingerprint: uint64(i), Result: []byte{0x80}}, 1000)
	}
	if len(r.Reqs) != store.RequestWindow {
		t.Fatalf("window holds %d requests, want %d", len(r.Reqs), store.RequestWindow)
	}
	b, err := store.EncodeRecord(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := store.DecodeRecord(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.V != 4 || got.Token != 42 || got.Tick != 7 || got.Kind != "dungeon" ||
		!bytes.Equal(got.State, r.State) || len(got.Reqs) != store.RequestWindow || got.Reqs[0].Fingerprint != 10 {
		t.Fatalf("round trip: got %+v", got)
	}
	// The keys are the contract of DESIGN.md section 3.
	var m map[string]any
	if err := msgpack.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"v", "token", "tick", "kind", "state", "reqs"} {
		if _, ok := m[k]; !ok {
			t.Errorf("encoded record lacks key %q", k)
		}
	}
}

func TestDecodeRecordRejects(t *testing.T) {
	good, _ := store.EncodeRecord(store.Record{Kind: "k"})
	future, _ := msgpack.Marshal(map[string]any{"v": 99, "kind": "k"})
	noKind, _ := msgpack.Marshal(map[string]any{"v": 1})
	cases := map[string][]byte{
		"empty":          {},
		"garbage":        []byte("hello"),
		"trailing bytes": append(append([]byte{}, good...), 0x00),
		"future schema":  future,
		"no kind":        noKind,
		"huge map claim": {0xdf, 0xff, 0xff, 0xff, 0xff},
		"huge bin claim": {0x81, 0xa5, 's', 't', 'a', 't', 'e', 0xc6, 0xff, 0xff, 0xff, 0xff},
		"too large":      make([]byte, store.MaxRecordBytes+1),
	}
	for name, b := range cases {
		if _, err := store.DecodeRecord(b); !errors.Is(err, store.ErrBadRecord) && !errors.Is(err, store.ErrTooLarge) {
			t.Errorf("%s: err = %v, want ErrBadRecord or ErrTooLarge", name, err)
		}
	}
}

func TestEncodeRecordTooLarge(t *testing.T) {
	_, err := store.EncodeRecord(store.Record{Kind: "k", State: make([]byte, store.MaxRecordBytes)})
	if !errors.Is(err, store.ErrTooLarge) {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
}

func TestValidIDAndShardOf(t *testing.T) {
	for _, id := range []string{"a", "demo-0", "A_b-9", string(bytes.Repeat([]byte("x"), 64))} {
		if err := store.ValidID(id); err != nil {
			t.Errorf("ValidID(%q) = %v", id, err)
		}
	}
	for _, id := range []string{"", "a.b", "*", ">", "a b", "é", string(bytes.Repeat([]byte("x"), 65))} {
		if err := store.ValidID(id); !errors.Is(err, store.ErrInvalidID) {
			t.Errorf("ValidID(%q) = %v, want ErrInvalidID", id, err)
		}
	}
	// FNV-1a-32 of "demo-0" is 0x0d5ff1a3 (a fixed point gateways in other languages can check).
	if got := store.ShardOf("demo-0", 256); got != 0x0d5ff1a3%256 {
		t.Fatalf("ShardOf(demo-0) = %#x", got)
	}
}

func FuzzDecodeRecord(f *testing.F) {
	good, _ := store.EncodeRecord(store.Record{Token: 1, Tick: 2, Kind: "dungeon", State: []byte{0x80},
		Reqs: []store.Request{{ID: "r", Fingerprint: 3, Result: []byte{0x81, 0xa2, 'o', 'k', 0xc3}}}})
	f.Add(good)
	f.Add([]byte{0xdf, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := store.DecodeRecord(b)
		if err != nil {
			if !errors.Is(err, store.ErrBadRecord) && !errors.Is(err, store.ErrTooLarge) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		// What decodes must re-encode and decode to the same record.
		b2, err := store.EncodeRecord(r)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		r2, err := store.DecodeRecord(b2)
		if err != nil || r2.Token != r.Token || r2.Tick != r.Tick || r2.Kind != r.Kind || !bytes.Equal(r2.State, r.State) || len(r2.Reqs) != len(r.Reqs) {
			t.Fatalf("re-decode: %+v, %v; want %+v", r2, err, r)
		}
	})
}

// ApproxSize is what a batch is bounded by: it must not undercount what is encoded.
func TestApproxSizeCoversTheEncoding(t *testing.T) {
	big := func(n int) []byte { return bytes.Repeat([]byte{'x'}, n) }
	recs := map[string]store.Record{
		"empty":   {Kind: "k"},
		"state":   {Kind: "dungeon", Tick: 1 << 40, Token: 1 << 30, State: big(3000)},
		"outbox":  {Kind: "k", State: big(10), Fx: []store.Effect{{Key: "a:1:16777217", Kind: "loot", Payload: big(60000)}, {Key: "a:1:16777218", Kind: "loot", Payload: big(100)}}},
		"reqs":    {Kind: "k", Reqs: []store.Request{{ID: "r1", Fingerprint: 1 << 60, Result: big(500)}, {ID: "r2", Result: big(7)}}},
		"clients": {Kind: "k", Clients: []store.ClientSession{{ID: "c1", Done: []store.SeqResult{{Seq: 1 << 50, Fingerprint: 1 << 62, Result: big(300)}}}}},
		"many":    {Kind: "k", Tick: 1 << 60, Token: 1 << 60, FxSeq: 1 << 60, Ended: true, EndedAt: 1 << 60},
	}
	many := recs["many"]
	for i := range 100 {
		many.Fx = append(many.Fx, store.Effect{Key: fmt.Sprintf("instance-%d:%d:%d", i, 1<<40, 1<<60), Kind: "loot", Payload: big(3)})
		many.Reqs = append(many.Reqs, store.Request{ID: fmt.Sprintf("request-%d", i), Fingerprint: 1 << 63, Result: big(2), At: 1 << 60})
		many.Clients = append(many.Clients, store.ClientSession{ID: fmt.Sprint("c", i), Ack: 1 << 60, Seen: 1 << 60,
			Done: []store.SeqResult{{Seq: 1 << 60, Fingerprint: 1 << 63, Result: big(1)}}})
	}
	recs["many"] = many
	for name, r := range recs {
		b, err := store.EncodeRecord(r)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if a := r.ApproxSize(); a < len(b) || a > 2*len(b)+256 {
			t.Errorf("%s: ApproxSize %d, encoded %d bytes: want at least the encoding, at most about twice", name, a, len(b))
		}
	}
}
