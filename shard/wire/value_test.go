package wire_test

import (
	"fmt"
	"math"
	"reflect"
	"testing"

	"github.com/tickfence/tickfence/shard/wire"
)

// TestDecodeReplyNormalizesNumbers (issue 35.4): a result's integers come back as int64 whatever
// width msgpack encoded them with (a canonical 5 is a fixint, 200 a uint8, 70000 a uint32), and
// as the same Go values from the JSON form of the same reply; floats as float64. Before, the
// result held msgpack's own types (int8, uint8, uint32…) and JSON's float64.
func TestDecodeReplyNormalizesNumbers(t *testing.T) {
	result := map[string]any{
		"small": 5, "byte": 200, "wide": 70000, "neg": -3, "neg_wide": -70000, "max": int64(math.MaxInt64),
		"huge": uint64(math.MaxInt64) + 1, "f32": float32(1.5), "f64": 2.25, "name": "ada", "yes": true,
		"list":   []any{int8(1), uint16(300), "x"},
		"nested": map[string]any{"hp": uint8(100)},
	}
	want := map[string]any{
		"small": int64(5), "byte": int64(200), "wide": int64(70000), "neg": int64(-3), "neg_wide": int64(-70000),
		"max": int64(math.MaxInt64), "huge": uint64(math.MaxInt64) + 1, "f32": 1.5, "f64": 2.25, "name": "ada", "yes": true,
		"list":   []any{int64(1), int64(300), "x"},
		"nested": map[string]any{"hp": int64(100)},
	}
	b := wire.EncodeReply(wire.Reply{OK: true, Result: result})
	for _, asJSON := range []bool{false, true} {
		raw := wire.ForClient(b, asJSON)
		r, err := wire.DecodeReply(raw, asJSON)
		if err != nil || !r.OK {
			t.Fatalf("json %v: DecodeReply: %+v, %v", asJSON, r, err)
		}
		if !reflect.DeepEqual(r.Result, any(want)) {
			t.Errorf("json %v: result\n got %s\nwant %s", asJSON, typed(r.Result), typed(want))
		}
	}
}

// TestDecodeValueNonStringKeys: a map with integer keys (msgpack allows them; msgpack's own
// decoder refuses them into any) decodes to a map[any]any with normalized keys.
func TestDecodeValueNonStringKeys(t *testing.T) {
	b, err := wire.Canonical(map[int]string{1: "a", 300: "b"})
	if err != nil {
		t.Fatal(err)
	}
	v, err := wire.DecodeValue(b)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[any]any{int64(1): "a", int64(300): "b"}; !reflect.DeepEqual(v, any(want)) {
		t.Fatalf("got %s, want %s", typed(v), typed(want))
	}
	r, err := wire.DecodeReply(wire.EncodeReply(wire.Reply{OK: true, Result: map[int]string{7: "x"}}), false)
	if err != nil || !reflect.DeepEqual(r.Result, any(map[any]any{int64(7): "x"})) {
		t.Fatalf("DecodeReply: %s, %v; want map[7:x] with an int64 key", typed(r.Result), err)
	}
}

// typed prints a value with the Go type of every number in it.
func typed(v any) string {
	switch x := v.(type) {
	case map[string]any:
		s := "{"
		for k, e := range x {
			s += fmt.Sprintf("%s:%s ", k, typed(e))
		}
		return s + "}"
	case []any:
		s := "["
		for _, e := range x {
			s += typed(e) + " "
		}
		return s + "]"
	}
	return fmt.Sprintf("%T(%v)", v, v)
}

// TestUnmarshalNormalizesInterfaces: Unmarshal fills typed fields as msgpack does (a float32
// field from a compact float included) and gives every interface inside out — an any field, a
// map[string]any, a []any — the normalized numbers of DecodeValue.
func TestUnmarshalNormalizesInterfaces(t *testing.T) {
	b, err := wire.Canonical(map[string]any{"f": 1.5, "g": 0.1, "n": 200, "any": 200, "m": map[string]any{"hp": 5, "ratio": float32(0.5)},
		"l": []any{1, -1, 3.25}, "keys": map[int]string{1: "a"}})
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		F    float32        `msgpack:"f"`
		G    float64        `msgpack:"g"`
		N    uint8          `msgpack:"n"`
		Any  any            `msgpack:"any"`
		M    map[string]any `msgpack:"m"`
		L    []any          `msgpack:"l"`
		Keys any            `msgpack:"keys"`
	}
	if err := wire.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if out.F != 1.5 || out.G != 0.1 || out.N != 200 || out.Any != any(int64(200)) ||
		!reflect.DeepEqual(out.M, map[string]any{"hp": int64(5), "ratio": 0.5}) ||
		!reflect.DeepEqual(out.L, []any{int64(1), int64(-1), 3.25}) ||
		!reflect.DeepEqual(out.Keys, any(map[any]any{int64(1): "a"})) {
		t.Fatalf("got %#v", out)
	}
	var v any
	if err := wire.Unmarshal(b, &v); err != nil || v.(map[string]any)["n"] != any(int64(200)) {
		t.Fatalf("into an any: %#v, %v", v, err)
	}
}
