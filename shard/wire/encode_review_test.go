package wire

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"
)

// Review finding: a Reply nested at depth fastMaxDepth: appendFast ignores the failure of encoding its OK field
// (depth+1 > fastMaxDepth) and, with an empty result, still reports success: the "ok" key is
// written without a value.
func TestCanonicalReplyAtTheDepthLimit(t *testing.T) {
	for _, r := range []Reply{{OK: true}, {OK: false}, {Error: Errorf(CodeBusy, "b")}} {
		var v any = r
		for range fastMaxDepth {
			v = []any{v}
		}
		want, werr := canonicalGeneral(v)
		got, gerr := Canonical(v)
		if werr != nil || gerr != nil || !bytes.Equal(got, want) {
			t.Errorf("Reply %+v at depth %d: Canonical = % x (%v)\nmsgpack gives      % x (%v)", r, fastMaxDepth, got[len(got)-12:], gerr, want[len(want)-12:], werr)
		}
	}
}

// Differential: random values built of every type appendFast knows, Replies and *Errors at any
// depth, typed nils, floats of every kind.
func reviewValue(r *rand.Rand, depth int) any {
	floats := []float64{0, math.Copysign(0, -1), 0.5, math.NaN(), math.Inf(1), math.Inf(-1), 1e19, -1e19,
		math.MinInt64, math.MaxInt64, 1 << 63, 3.4028234663852886e38, 16777217, 1e-45}
	k := r.IntN(24)
	if depth > 4 && k >= 20 {
		k = r.IntN(20)
	}
	switch k {
	case 0:
		return nil
	case 1:
		return r.IntN(2) == 0
	case 2:
		return int8(r.Uint32())
	case 3:
		return int16(r.Uint32())
	case 4:
		return int32(r.Uint32())
	case 5:
		return int64(r.Uint64()) >> r.IntN(64)
	case 6:
		return uint8(r.Uint32())
	case 7:
		return uint16(r.Uint32())
	case 8:
		return uint32(r.Uint32()) >> r.IntN(32)
	case 9:
		return r.Uint64() >> r.IntN(64)
	case 10:
		return int(int64(r.Uint64()) >> r.IntN(64))
	case 11:
		return uint(r.Uint64() >> r.IntN(64))
	case 12:
		return floats[r.IntN(len(floats))]
	case 13:
		return float32(floats[r.IntN(len(floats))])
	case 14:
		return r.Float64() * math.Pow(10, float64(r.IntN(40)-20))
	case 15:
		return []byte(nil)
	case 16:
		return make([]byte, r.IntN(3))
	case 17:
		s := []string{"", "é", "a\x00", "\xff", "ab", "a"}
		return s[r.IntN(len(s))]
	case 18:
		if r.IntN(2) == 0 {
			return (*Error)(nil)
		}
		return &Error{Code: "c", Message: ""}
	case 19:
		if r.IntN(2) == 0 {
			return []any(nil)
		}
		return map[string]any(nil)
	case 20, 21:
		a := make([]any, r.IntN(4))
		for i := range a {
			a[i] = reviewValue(r, depth+1)
		}
		return a
	case 22:
		m := map[string]any{}
		keys := []string{"", "a", "ab", "b", "é", "e", "\xff", "A", "a\x00", "result", "ok"}
		for range r.IntN(5) {
			m[keys[r.IntN(len(keys))]] = reviewValue(r, depth+1)
		}
		return m
	default:
		rp := Reply{OK: r.IntN(2) == 0, Result: reviewValue(r, depth+1)}
		if r.IntN(3) == 0 {
			rp.Error = &Error{Code: "x", Message: "y"}
		}
		return rp
	}
}

func TestCanonicalDifferentialReview(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 13))
	for range 200000 {
		v := reviewValue(r, 0)
		want, werr := canonicalGeneral(v)
		got, gerr := Canonical(v)
		if (werr != nil) != (gerr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("Canonical(%#v) = % x, %v; msgpack gives % x, %v", v, got, gerr, want, werr)
		}
	}
}

// Review finding: msgpack reaches a float32 in []any or a Reply through float64, which sets a
// signalling NaN's quiet bit; the fast path wrote its bits unchanged, so a command holding one
// got another body and fingerprint than before the fast path.
func TestCanonicalFloat32SignallingNaN(t *testing.T) {
	snan := math.Float32frombits(0x7f800001)
	for _, v := range []any{
		snan,
		map[string]any{"x": snan},
		[]any{snan},
		Reply{OK: true, Result: snan},
		map[string]any{"type": "attack", "at": []any{math.Float32frombits(0xff803030)}},
	} {
		want, werr := canonicalGeneral(v)
		got, gerr := Canonical(v)
		if werr != nil || gerr != nil || !bytes.Equal(got, want) {
			t.Errorf("Canonical(%#v) = % x; msgpack gives % x", v, got, want)
		}
	}
}

// The same through the command path: a msgpack command holding a float32 signalling NaN in an
// array is not canonical (floats), so decodeBody decodes it and encodes it with Canonical; its
// body (and fingerprint) is no longer what msgpack's encoder gave before 8c07739 (and gives now).
func TestCommandWithASignallingNaNKeepsMsgpacksFingerprint(t *testing.T) {
	data := []byte{0x82, 0xa2, 'a', 't', 0x91, 0xca, 0x7f, 0x80, 0x00, 0x01, 0xa4, 't', 'y', 'p', 'e', 0xa1, 'a'}
	req, err := decodeBody(Subject(0, "i-1"), "", data, 1)
	if err != nil {
		t.Fatal(err)
	}
	m, err := decodeMap(data, false)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := canonicalGeneral(m)
	if !bytes.Equal(req.Body, want) {
		t.Errorf("body % x (fingerprint %x); msgpack's encoder gives % x (fingerprint %x)", req.Body, req.Fingerprint, want, Fingerprint(want))
	}
}
