package wire

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// checkEncode fails unless Canonical gives for v exactly what msgpack's encoder gives, and
// reports whether it took the fast path.
func checkEncode(t *testing.T, v any) (fast bool) {
	t.Helper()
	want, werr := canonicalGeneral(v)
	got, gerr := Canonical(v)
	if (werr != nil) != (gerr != nil) || !bytes.Equal(got, want) {
		t.Fatalf("Canonical(%#v) = % x, %v; msgpack's encoder gives % x, %v", v, got, gerr, want, werr)
	}
	_, fast = appendFast(nil, v, 0)
	return fast
}

// Every value of Go's own types encodes on the fast path, byte for byte as msgpack's encoder with
// sorted keys and compact numbers encodes it: integers and lengths at every boundary, floats
// (integral ones become integers), binaries, nested maps and arrays, and replies.
func TestCanonicalFastPathAgreesWithMsgpack(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 20000 {
		v := randValue(r, 0)
		if i%2 == 0 {
			v = Reply{OK: r.IntN(2) == 0, Result: v}
		}
		if !checkEncode(t, v) {
			t.Fatalf("%#v took the general path", v)
		}
	}
	floats := []float64{0, math.Copysign(0, -1), 0.5, -1.5, 1e300, -1e-300, math.Inf(1), math.Inf(-1), math.NaN(),
		math.MaxInt64, math.MinInt64, 1 << 53, 1<<53 + 1, math.MaxFloat32, math.SmallestNonzeroFloat64}
	for _, f := range floats {
		checkEncode(t, f)
		checkEncode(t, float32(f))
		checkEncode(t, []any{f, float32(f)})
	}
	for _, n := range []int{0, 15, 16, 255, 256, 65535, 65536, 70000} {
		checkEncode(t, strings.Repeat("s", n))
		checkEncode(t, bytes.Repeat([]byte{7}, n))
		checkEncode(t, make([]any, n))
		m := make(map[string]any, n%1000)
		for i := range n % 1000 {
			m[strings.Repeat("k", i%40)+string(rune('a'+i%26))+string(rune('a'+i/26%26))] = i
		}
		checkEncode(t, m)
	}
	for _, v := range []any{
		int8(-128), int16(-32768), int32(math.MinInt32), int64(math.MinInt64), uint8(255), uint16(65535),
		uint32(math.MaxUint32), uint(math.MaxUint64), []byte(nil), []any(nil), map[string]any(nil),
		Reply{}, Reply{OK: true}, Reply{Error: Errorf(CodeBusy, "busy")}, Reply{OK: true, Result: map[string]any(nil)},
		Reply{Error: &Error{}}, (*Error)(nil), Errorf(CodeRetry, "x"),
		// omitempty leaves out a result that is empty: zero, false, "", no length
		Reply{OK: true, Result: 0}, Reply{OK: true, Result: uint8(0)}, Reply{OK: true, Result: false},
		Reply{OK: true, Result: ""}, Reply{OK: true, Result: []any{}}, Reply{OK: true, Result: []byte{}},
		Reply{OK: true, Result: math.Copysign(0, -1)}, Reply{OK: true, Result: math.NaN()}, Reply{OK: true, Result: float32(0)},
	} {
		if !checkEncode(t, v) {
			t.Errorf("%#v took the general path", v)
		}
	}
}

type phase string

type withEncoder int

func (withEncoder) MarshalText() ([]byte, error) { return []byte("custom"), nil }

// Values of other types — named ones may carry their own encoder — go the general way, whole.
func TestCanonicalFastPathDeclinesWhatItDoesNotKnow(t *testing.T) {
	deep := any(1)
	for range fastMaxDepth + 2 {
		deep = []any{deep}
	}
	for _, v := range []any{
		phase("p2"), withEncoder(1), time.Second, time.Unix(5, 0), struct{ A int }{1}, []string{"a"},
		map[string]int{"a": 1}, map[int]any{1: 2}, &Reply{OK: true},
		map[string]any{"a": 1, "b": []any{1, phase("x")}}, Reply{OK: true, Result: withEncoder(2)}, deep,
		Reply{OK: true, Result: phase("")}, Reply{OK: true, Result: []string{}},
	} {
		if checkEncode(t, v) {
			t.Errorf("%#v took the fast path", v)
		}
	}
}

func BenchmarkEncodeReply(b *testing.B) {
	r := Reply{OK: true, Result: map[string]any{"damage": 73, "hp": 412345, "phase": "p2"}}
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			EncodeReply(r)
		}
	})
	b.Run("general", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := canonicalGeneral(r); err != nil {
				b.Fatal(err)
			}
		}
	})
}
