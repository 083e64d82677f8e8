package store_test

import (
	"bytes"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tickfence/tickfence/store"
)

// reflective is how records were encoded before the hand-written encoder: msgpack's reflection
// over Record's struct tags, with compact integers. It is the oracle the encoder must match.
func reflective(t *testing.T, r store.Record) []byte {
	t.Helper()
	r.V = 4 // the lowest version that holds what it holds (Record.WriteVersion)
	if len(r.Players) > 0 {
		r.V = store.PresenceVersion
	}
	if len(r.Labels) > 0 || r.Passive {
		r.V = store.LabelsVersion
	}
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(true)
	enc.SetSortMapKeys(true) // labels: the hand-written encoder writes them in key order
	if err := enc.Encode(&r); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// randomRecord draws a record whose every field sits at or near a boundary of its msgpack
// format (fixint/uint8/…/uint64, fixstr/str8/str16, bin8/bin16, fixarray/array16, nil and empty).
func randomRecord(rng *rand.Rand) store.Record {
	uints := []uint64{0, 1, 127, 128, 255, 256, 65535, 65536, math.MaxUint32, math.MaxUint32 + 1, math.MaxUint64}
	ints := []int64{0, 1, 127, 128, 65536, -1, -32, -33, -128, -129, -32768, -32769, math.MinInt32, math.MinInt32 - 1, math.MinInt64, math.MaxInt64}
	lens := []int{0, 1, 31, 32, 255, 256, 300}
	counts := []int{0, 1, 2, 15, 16, 17}
	u := func() uint64 { return uints[rng.IntN(len(uints))] }
	i := func() int64 { return ints[rng.IntN(len(ints))] }
	str := func() string { return strings.Repeat("x", lens[rng.IntN(len(lens))]) }
	bin := func() []byte {
		switch rng.IntN(64) {
		case 0, 1, 2, 3, 4, 5, 6, 7:
			return nil
		case 8, 9, 10, 11, 12, 13, 14, 15:
			return []byte{}
		case 16:
			return bytes.Repeat([]byte{7}, 65535+rng.IntN(3)) // bin16 and bin32 edges
		default:
			return bytes.Repeat([]byte{7}, lens[rng.IntN(len(lens))])
		}
	}
	count := func() int { return counts[rng.IntN(len(counts))] }
	maybeNil := func(n int) bool { return n == 0 && rng.IntN(2) == 0 }
	r := store.Record{Token: u(), Tick: u(), Kind: str(), State: bin(), Create: bin(), Creator: str(),
		Ended: rng.IntN(2) == 0, EndedAt: i(), FxSeq: u()}
	if n := count(); !maybeNil(n) {
		r.Reqs = make([]store.Request, n)
		for k := range r.Reqs {
			r.Reqs[k] = store.Request{ID: str(), Fingerprint: u(), Result: bin(), At: u()}
		}
	}
	if n := count(); !maybeNil(n) {
		r.Clients = make([]store.ClientSession, n)
		for k := range r.Clients {
			c := store.ClientSession{ID: str(), Ack: u(), Seen: u()}
			if m := count(); !maybeNil(m) {
				c.Done = make([]store.SeqResult, m)
				for j := range c.Done {
					c.Done[j] = store.SeqResult{Seq: u(), Fingerprint: u(), Result: bin()}
				}
			}
			r.Clients[k] = c
		}
	}
	if n := count(); !maybeNil(n) {
		r.Gone = make([]store.GoneSession, n)
		for k := range r.Gone {
			g := store.GoneSession{Client: u(), Ack: u(), Seen: u(), Sender: u()}
			if m := count(); !maybeNil(m) {
				g.Done = make([]uint64, m)
				for j := range g.Done {
					g.Done[j] = u()
				}
			}
			r.Gone[k] = g
		}
	}
	if n := count(); !maybeNil(n) {
		r.Fx = make([]store.Effect, n)
		for k := range r.Fx {
			r.Fx[k] = store.Effect{Key: str(), Kind: str(), Payload: bin()}
		}
	}
	if rng.IntN(2) == 0 {
		r.Blob = &store.BlobRef{Name: str(), Digest: str(), Size: int(i())}
	}
	if n := count(); !maybeNil(n) {
		r.Players = make([]store.Presence, n)
		for k := range r.Players {
			r.Players[k] = store.Presence{Player: str(), Since: u(), Seen: u()}
		}
	}
	if n := count(); !maybeNil(n) {
		r.Labels = make(map[string]string, n)
		for k := range n {
			r.Labels[strings.Repeat("k", k+1)+str()] = str()
		}
	}
	r.Passive = rng.IntN(2) == 0
	return r
}

// TestAppendRecordMatchesTheReflectiveEncoder: EncodeRecord writes exactly the bytes msgpack's
// reflective encoder writes, for records at every format boundary; so records written before
// and after it are the same, and DecodeRecord reads them back.
func TestAppendRecordMatchesTheReflectiveEncoder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	big := 0
	for n := range 1000 {
		r := randomRecord(rng)
		want := reflective(t, r)
		got, err := store.EncodeRecord(r)
		if len(want) > store.MaxRecordBytes {
			big++
			if err == nil {
				t.Fatalf("record %d: %d bytes encoded; want ErrTooLarge", n, len(want))
			}
			continue
		}
		if err != nil {
			t.Fatalf("record %d: %v", n, err)
		}
		if !bytes.Equal(got, want) {
			i := 0
			for i < min(len(got), len(want)) && got[i] == want[i] {
				i++
			}
			t.Fatalf("record %d: the encodings differ from byte %d (got %d bytes, want %d): got % x…, want % x…",
				n, i, len(got), len(want), got[i:min(len(got), i+16)], want[i:min(len(want), i+16)])
		}
		if _, err := store.DecodeRecord(got); err != nil && !strings.Contains(err.Error(), "client session") &&
			!strings.Contains(err.Error(), "effect") && !strings.Contains(err.Error(), "no kind") &&
			!strings.Contains(err.Error(), "let go of") && !strings.Contains(err.Error(), "player") {
			t.Fatalf("record %d: does not decode: %v", n, err) // random sessions and effects may break the rules DecodeRecord checks
		}
	}
	if big == 1000 {
		t.Fatal("every random record was over the limit: the generator is wrong")
	}
}

// TestAppendRecordKnowsEveryField: the hand-written encoder writes the fields listed here; a
// field added to Record or to a type it holds fails this test until appendRecord (and this
// list) has it — an omitempty field would otherwise pass the encoding test while never set.
func TestAppendRecordKnowsEveryField(t *testing.T) {
	known := map[reflect.Type][]string{
		reflect.TypeFor[store.Record]():        {"v", "token", "tick", "kind", "state", "reqs", "create", "clients", "gone", "creator", "ended", "ended_at", "fx", "fx_seq", "fx_epoch", "blob", "players", "labels", "passive"},
		reflect.TypeFor[store.Request]():       {"id", "fp", "res", "at"},
		reflect.TypeFor[store.ClientSession](): {"id", "ack", "seen", "done"},
		reflect.TypeFor[store.SeqResult]():     {"seq", "fp", "res"},
		reflect.TypeFor[store.GoneSession]():   {"h", "ack", "done", "seen", "s"},
		reflect.TypeFor[store.Effect]():        {"key", "kind", "payload"},
		reflect.TypeFor[store.BlobRef]():       {"name", "digest", "size"},
		reflect.TypeFor[store.Presence]():      {"p", "since", "seen"},
	}
	for typ, want := range known {
		var got []string
		for f := range typ.Fields() {
			if tag := f.Tag.Get("msgpack"); tag != "-" {
				got = append(got, strings.Split(tag, ",")[0])
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%v encodes fields %v; appendRecord (store/record_encode.go) writes %v: teach it the change", typ, got, want)
		}
	}
}

func BenchmarkEncodeRecordReflective(b *testing.B) {
	r := store.Record{Token: 42, Tick: 123456, Kind: "dungeon", State: make([]byte, 1200),
		Clients: []store.ClientSession{{ID: "go-0123456789abcdef", Ack: 1 << 20, Seen: 123000,
			Done: []store.SeqResult{{Seq: 1<<20 + 1, Fingerprint: 1 << 60, Result: make([]byte, 40)}}}}}
	for b.Loop() {
		r.V = store.SchemaVersion
		var buf bytes.Buffer
		enc := msgpack.NewEncoder(&buf)
		enc.UseCompactInts(true)
		if err := enc.Encode(&r); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeRecordByHand(b *testing.B) {
	r := store.Record{Token: 42, Tick: 123456, Kind: "dungeon", State: make([]byte, 1200),
		Clients: []store.ClientSession{{ID: "go-0123456789abcdef", Ack: 1 << 20, Seen: 123000,
			Done: []store.SeqResult{{Seq: 1<<20 + 1, Fingerprint: 1 << 60, Result: make([]byte, 40)}}}}}
	for b.Loop() {
		if _, err := store.EncodeRecord(r); err != nil {
			b.Fatal(err)
		}
	}
}
