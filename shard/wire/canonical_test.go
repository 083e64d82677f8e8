package wire

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// general decodes a command body the general way: decode, check the type, encode canonically.
func general(data []byte) (typ string, body []byte, ok bool) {
	m, err := decodeMap(data, false)
	if err != nil {
		return "", nil, false
	}
	t, _ := m["type"].(string)
	if t == "" {
		return "", nil, false
	}
	b, err := Canonical(m)
	if err != nil {
		return "", nil, false
	}
	return t, b, true
}

// checkCommand fails if the fast path accepts data and the general path disagrees: not
// accepting it, another type, or another canonical form than data itself.
func checkCommand(t *testing.T, data []byte) (accepted bool) {
	t.Helper()
	typ, ok := canonicalCommand(data)
	if !ok {
		return false
	}
	gt, gb, gok := general(data)
	switch {
	case !gok:
		t.Fatalf("fast path accepted % x (type %q), the general path refuses it", data, typ)
	case gt != typ:
		t.Fatalf("fast path read type %q, the general path %q, from % x", typ, gt, data)
	case !bytes.Equal(gb, data):
		t.Fatalf("fast path took % x as canonical; Canonical gives % x", data, gb)
	}
	return true
}

// randValue makes a value of the kinds commands hold, with lengths and integers around every
// boundary of the encoding.
func randValue(r *rand.Rand, depth int) any {
	ints := []int64{0, 1, 31, 32, 127, 128, 255, 256, 65535, 65536, math.MaxUint32, math.MaxUint32 + 1, math.MaxInt64,
		-1, -32, -33, -128, -129, -32768, -32769, math.MinInt32, math.MinInt32 - 1, math.MinInt64}
	lens := []int{0, 1, 5, 31, 32, 255, 256, 65535, 65536}
	k := r.IntN(10)
	if depth > 3 && k >= 7 {
		k = r.IntN(7)
	}
	switch k {
	case 0:
		return nil
	case 1:
		return r.IntN(2) == 0
	case 2:
		return ints[r.IntN(len(ints))] + int64(r.IntN(3)) - 1
	case 3:
		return uint64(math.MaxUint64) - uint64(r.IntN(2))
	case 4:
		if r.IntN(4) == 0 {
			return strings.Repeat("x", lens[r.IntN(len(lens))])
		}
		return randKey(r)
	case 5:
		if r.IntN(2) == 0 {
			return 1.5 // floats take the general path
		}
		return []byte{1, 2} // so do binaries
	case 6:
		return float64(r.IntN(100)) // an integral float encodes as an integer
	case 7, 8:
		a := make([]any, r.IntN(4))
		if r.IntN(8) == 0 {
			a = make([]any, 16+r.IntN(3))
		}
		for i := range a {
			a[i] = randValue(r, depth+1)
		}
		return a
	default:
		return randMap(r, depth+1)
	}
}

func randKey(r *rand.Rand) string {
	keys := []string{"a", "b", "ab", "B", "type", "target", "dmg", "", "é", "zz"}
	return keys[r.IntN(len(keys))]
}

func randMap(r *rand.Rand, depth int) map[string]any {
	n := r.IntN(5)
	if r.IntN(8) == 0 {
		n = 16 + r.IntN(4) // map16
	}
	m := make(map[string]any, n)
	for range n {
		k := randKey(r)
		if n > 8 {
			k += strings.Repeat("k", r.IntN(40))
		}
		m[k] = randValue(r, depth)
	}
	return m
}

// Every body Canonical encodes from values without floats or binaries takes the fast path, and
// whatever the fast path accepts, the general path decodes to the same type and bytes. Bodies
// encoded other ways (wide integers, long headers, unsorted or repeated keys, floats) are
// accepted only if they are canonical after all.
func TestCanonicalCommandAgreesWithTheGeneralPath(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	fast, canonical := 0, 0
	for range 20000 {
		m := randMap(r, 0)
		if r.IntN(4) > 0 {
			m["type"] = []string{"attack", "join", "t"}[r.IntN(3)]
		}
		b, err := Canonical(m)
		if err != nil {
			t.Fatal(err)
		}
		_, again, ok := general(b)
		if ok && !hasFloatOrBinary(b) {
			canonical++
			if !bytes.Equal(again, b) {
				t.Fatalf("Canonical is not a fixed point: % x then % x", b, again)
			}
			if !checkCommand(t, b) {
				t.Fatalf("fast path declined a canonical body: % x (%v)", b, m)
			}
			fast++
		} else {
			checkCommand(t, b)
		}
		// The same values encoded without sorting, compact integers or compact floats.
		var buf bytes.Buffer
		enc := msgpack.NewEncoder(&buf)
		enc.UseCompactInts(r.IntN(2) == 0)
		if err := enc.Encode(m); err != nil {
			t.Fatal(err)
		}
		checkCommand(t, buf.Bytes())
		// And byte flips of the canonical form.
		for range 3 {
			c := bytes.Clone(b)
			c[r.IntN(len(c))] ^= byte(1 << r.IntN(8))
			checkCommand(t, c)
		}
	}
	t.Logf("%d canonical bodies, %d on the fast path", canonical, fast)
}

// hasFloatOrBinary reports whether the msgpack value holds a float or binary anywhere.
func hasFloatOrBinary(b []byte) bool {
	var v any
	if msgpack.Unmarshal(b, &v) != nil {
		return true
	}
	var walk func(any) bool
	walk = func(v any) bool {
		switch x := v.(type) {
		case float32, float64, []byte:
			return true
		case []any:
			for _, e := range x {
				if walk(e) {
					return true
				}
			}
		case map[string]any:
			for _, e := range x {
				if walk(e) {
					return true
				}
			}
		}
		return false
	}
	return walk(v)
}

// Hand-made cases at each rule's edge: the fast path accepts exactly the canonical ones.
func TestCanonicalCommandEdges(t *testing.T) {
	typ := []byte{0xa4, 't', 'y', 'p', 'e', 0xa1, 'a'}
	withValue := func(key string, v []byte) []byte {
		kv := append([]byte{byte(0xa0 | len(key))}, key...)
		kv = append(kv, v...)
		if key < "type" {
			return append(append([]byte{0x82}, kv...), typ...)
		}
		return append(append([]byte{0x82}, typ...), kv...)
	}
	nest := func(depth int) []byte { // an array nested depth deep under "x"
		v := []byte{0xc0}
		for range depth {
			v = append([]byte{0x91}, v...)
		}
		return withValue("x", v)
	}
	u16 := func(c byte, n uint16) []byte { return binary.BigEndian.AppendUint16([]byte{c}, n) }
	for _, c := range []struct {
		name string
		data []byte
		want bool
	}{
		{"type only", append([]byte{0x81}, typ...), true},
		{"no type", withValue("x", []byte{1})[0:1], false},
		{"empty type", []byte{0x81, 0xa4, 't', 'y', 'p', 'e', 0xa0}, false},
		{"type not a string", []byte{0x81, 0xa4, 't', 'y', 'p', 'e', 0x01}, false},
		{"keys in order", withValue("a", []byte{1}), true},
		{"keys out of order", append(append([]byte{0x82}, typ...), 0xa1, 'a', 1), false},
		{"key repeated", append(append([]byte{0x82}, typ...), typ...), false},
		{"positive fixint", withValue("x", []byte{0x7f}), true},
		{"uint8 for a fixint", withValue("x", []byte{0xcc, 0x7f}), false},
		{"uint8", withValue("x", []byte{0xcc, 0x80}), true},
		{"uint16 for a uint8", withValue("x", u16(0xcd, 255)), false},
		{"uint16", withValue("x", u16(0xcd, 256)), true},
		{"int8 for a negative fixint", withValue("x", []byte{0xd0, 0xe0}), false},
		{"int8", withValue("x", []byte{0xd0, 0xdf}), true},
		{"int8 holding a positive value", withValue("x", []byte{0xd0, 0x05}), false},
		{"int16 for an int8", withValue("x", u16(0xd1, 0xff80)), false},
		{"int16", withValue("x", u16(0xd1, 0xff7f)), true},
		{"float", withValue("x", []byte{0xca, 0x3f, 0xc0, 0, 0}), false},
		{"str8 for a fixstr", withValue("x", []byte{0xd9, 1, 'z'}), false},
		{"map16 for a fixmap", withValue("x", []byte{0xde, 0, 0}), false},
		{"array16 for a fixarray", withValue("x", []byte{0xdc, 0, 0}), false},
		{"empty map", withValue("x", []byte{0x80}), true},
		{"trailing byte", append(append([]byte{0x81}, typ...), 0xc0), false},
		{"truncated", withValue("x", []byte{0xcd, 1}), false},
		{"nested 31 deep", nest(31), true},
		{"nested 32 deep", nest(32), false}, // mpscan.Check refuses containers 32 deep
		{"huge declared array", withValue("x", []byte{0xdd, 0xff, 0xff, 0xff, 0xff, 0xc0}), false},
	} {
		_, got := canonicalCommand(c.data)
		if got != c.want {
			t.Errorf("%s (% x): fast path %v, want %v", c.name, c.data, got, c.want)
		}
		checkCommand(t, c.data)
		if c.want {
			if _, _, ok := general(c.data); !ok {
				t.Errorf("%s: the general path refuses it", c.name)
			}
		}
	}
}

func FuzzCanonicalCommand(f *testing.F) {
	for _, m := range []map[string]any{{"type": "attack"}, {"type": "attack", "dmg": 12}, {"type": "x", "a": []any{1, "b", nil}}} {
		b, _ := Canonical(m)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkCommand(t, data) })
}

// The status fast path reads what msgpack does, or declines.
func checkStatus(t *testing.T, b []byte) (accepted bool) {
	t.Helper()
	st, ok := status(b)
	if !ok {
		return false
	}
	var want Status
	if err := decodeReply(b, false, &want); err != nil {
		t.Fatalf("fast path read % x as %+v, the general path refuses it: %v", b, st, err)
	}
	if !reflect.DeepEqual(st, want) {
		t.Fatalf("fast path read % x as %+v (error %+v), the general path as %+v (error %+v)", b, st, st.Error, want, want.Error)
	}
	return true
}

func TestStatusAgreesWithTheGeneralPath(t *testing.T) {
	replies := [][]byte{
		EncodeReply(Reply{OK: true}),
		EncodeReply(Reply{OK: true, Result: map[string]any{"hp": 12, "phase": "two", "list": []any{1, 2.5, nil}}}),
		EncodeReply(Reply{Error: Errorf(CodeBusy, "instance %s is busy", "d-1")}),
		EncodeReply(Reply{Error: &Error{Code: CodeRetry, Message: strings.Repeat("m", 300)}}),
	}
	for _, b := range replies {
		if !checkStatus(t, b) {
			t.Fatalf("fast path declined a reply EncodeReply made: % x", b)
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 20000 {
		b := bytes.Clone(replies[r.IntN(len(replies))])
		for range 1 + r.IntN(2) {
			b[r.IntN(len(b))] ^= byte(1 << r.IntN(8))
		}
		checkStatus(t, b)
	}
	// Hand-made: keys the fast path declines or skips.
	for _, c := range []struct {
		name string
		b    []byte
		want bool
	}{
		{"ok repeated", []byte{0x82, 0xa2, 'o', 'k', 0xc3, 0xa2, 'o', 'k', 0xc2}, false},
		{"ok not a boolean", []byte{0x81, 0xa2, 'o', 'k', 0x01}, false},
		{"OK in capitals", []byte{0x81, 0xa2, 'O', 'K', 0xc3}, true},
		{"error nil", []byte{0x82, 0xa2, 'o', 'k', 0xc3, 0xa5, 'e', 'r', 'r', 'o', 'r', 0xc0}, true},
		{"error with another key", []byte{0x81, 0xa5, 'e', 'r', 'r', 'o', 'r', 0x82, 0xa4, 'c', 'o', 'd', 'e', 0xa1, 'x', 0xa1, 'z', 0x90}, true},
		{"error code not a string", []byte{0x81, 0xa5, 'e', 'r', 'r', 'o', 'r', 0x81, 0xa4, 'c', 'o', 'd', 'e', 0x01}, false},
		{"result malformed", []byte{0x82, 0xa2, 'o', 'k', 0xc3, 0xa6, 'r', 'e', 's', 'u', 'l', 't', 0xdc, 0xff}, false},
		{"str8 keys", []byte{0x81, 0xd9, 2, 'o', 'k', 0xc3}, true},
	} {
		if got := checkStatus(t, c.b); got != c.want {
			t.Errorf("%s: fast path %v, want %v", c.name, got, c.want)
		}
	}
}

func FuzzStatus(f *testing.F) {
	f.Add(EncodeReply(Reply{OK: true, Result: 5}))
	f.Add(EncodeReply(Reply{Error: Errorf(CodeBusy, "busy")}))
	f.Fuzz(func(t *testing.T, b []byte) { checkStatus(t, b) })
}

func BenchmarkDecodeCommand(b *testing.B) {
	body, _ := Canonical(map[string]any{"type": "attack", "dmg": 12, "target": "boss"})
	subject := Subject(0, "d-1")
	for _, c := range []struct {
		name string
		data []byte
		ct   string
	}{
		{"canonical", body, ""},
		{"general", append([]byte{0xde, 0, 3}, body[1:]...), ""},
		{"json", []byte(`{"type":"attack","dmg":12,"target":"boss"}`), ContentJSON},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := DecodeCommand(subject, Headers{Client: "c1", Seq: "5", ContentType: c.ct}, c.data, 1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkDecodeStatus(b *testing.B) {
	reply := EncodeReply(Reply{OK: true, Result: map[string]any{"hp": 12345, "phase": 2}})
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeStatus(reply, false); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("general", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var st Status
			if err := decodeReply(reply, false, &st); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// Review finding: values the status fast path skips count against mpscan.MaxDepth at the depth
// they sit in the reply (a result under the top map, an extra key under the error map), as
// DecodeReply counts them: a reply nested too deep is malformed for both.
func TestStatusDeclinesRepliesNestedTooDeep(t *testing.T) {
	nested := func(d int) []byte {
		v := []byte{0xc0}
		for range d {
			v = append([]byte{0x91}, v...)
		}
		return v
	}
	okResult := []byte{0x82, 0xa2, 'o', 'k', 0xc3, 0xa6, 'r', 'e', 's', 'u', 'l', 't'}
	errExtra := []byte{0x82, 0xa2, 'o', 'k', 0xc2, 0xa5, 'e', 'r', 'r', 'o', 'r', 0x82, 0xa4, 'c', 'o', 'd', 'e', 0xa1, 'x', 0xa1, 'z'}
	for _, c := range []struct {
		name string
		b    []byte
	}{
		{"result 31 deep", append(bytes.Clone(okResult), nested(31)...)},
		{"result 32 deep", append(bytes.Clone(okResult), nested(32)...)},
		{"error extra 30 deep", append(bytes.Clone(errExtra), nested(30)...)},
		{"error extra 31 deep", append(bytes.Clone(errExtra), nested(31)...)},
	} {
		checkStatus(t, c.b)
		_, errS := DecodeStatus(c.b, false)
		_, errR := DecodeReply(c.b, false)
		if (errS == nil) != (errR == nil) {
			t.Errorf("%s: DecodeStatus error %v, DecodeReply error %v", c.name, errS, errR)
		}
	}
}
