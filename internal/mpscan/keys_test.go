package mpscan

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// refRepeated finds, with msgpack's own decoder, the first key repeated in a map of the value at
// d (depth first, a key before its value), keys read as the decoder reads them into a
// map[string]any (DecodeString: str, bin, nil); other keys are walked as values.
func refRepeated(d *msgpack.Decoder) ([]byte, bool, error) {
	c, err := d.PeekCode()
	if err != nil {
		return nil, false, err
	}
	switch {
	case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
		n, err := d.DecodeMapLen()
		if err != nil {
			return nil, false, err
		}
		seen := map[string]bool{}
		for range n {
			kc, err := d.PeekCode()
			if err != nil {
				return nil, false, err
			}
			if msgpcode.IsString(kc) || msgpcode.IsBin(kc) || kc == msgpcode.Nil {
				k, err := d.DecodeString()
				if err != nil {
					return nil, false, err
				}
				if seen[k] {
					return []byte(k), true, nil
				}
				seen[k] = true
			} else if k, ok, err := refRepeated(d); ok || err != nil {
				return k, ok, err
			}
			if k, ok, err := refRepeated(d); ok || err != nil {
				return k, ok, err
			}
		}
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		n, err := d.DecodeArrayLen()
		if err != nil {
			return nil, false, err
		}
		for range n {
			if k, ok, err := refRepeated(d); ok || err != nil {
				return k, ok, err
			}
		}
	default:
		return nil, false, d.Skip()
	}
	return nil, false, nil
}

// checkKeysAgrees fails unless CheckKeys refuses b exactly when Check does or msgpack's decoder
// would see a key twice, naming the first such key.
func checkKeysAgrees(t *testing.T, b []byte) (repeated bool) {
	t.Helper()
	err := CheckKeys(b)
	var rk *RepeatedKeyError
	if Check(b) != nil {
		if err == nil {
			t.Fatalf("CheckKeys(% x) accepted what Check refuses", b)
		}
		return errors.As(err, &rk)
	}
	want, found, rerr := refRepeated(msgpack.NewDecoder(bytes.NewReader(b)))
	if rerr != nil {
		t.Fatalf("reference walk of % x, well-formed: %v", b, rerr)
	}
	switch {
	case !found && err != nil:
		t.Fatalf("CheckKeys(% x) = %v; no key repeats", b, err)
	case found && !errors.As(err, &rk):
		t.Fatalf("CheckKeys(% x) = %v; want the repeated key %q", b, err, want)
	case found && !bytes.Equal(rk.Key, want):
		t.Fatalf("CheckKeys(% x) named %q; the first repeat is %q", b, rk.Key, want)
	}
	return found
}

// genValue appends a random msgpack value whose maps often repeat a key, in every encoding of a
// key msgpack's decoder reads as a string, and in others.
func genValue(r *rand.Rand, b []byte, depth int) []byte {
	k := r.IntN(10)
	if depth > 4 {
		k = r.IntN(5)
	}
	switch k {
	case 0:
		return append(b, 0xc0)
	case 1:
		return append(b, byte(r.IntN(0x80)))
	case 2:
		return append(b, 0xcd, 1, 2)
	case 3, 4:
		return genKey(r, b, 4)
	case 5, 6:
		n := r.IntN(4)
		if r.IntN(2) == 0 {
			b = append(b, byte(0x90|n))
		} else {
			b = binary.BigEndian.AppendUint16(append(b, 0xdc), uint16(n))
		}
		for range n {
			b = genValue(r, b, depth+1)
		}
		return b
	default:
		n := r.IntN(6)
		if r.IntN(6) == 0 {
			n = 15 + r.IntN(30) // past the pairwise comparison
		}
		switch {
		case n < 16 && r.IntN(2) == 0:
			b = append(b, byte(0x80|n))
		case r.IntN(2) == 0:
			b = binary.BigEndian.AppendUint16(append(b, 0xde), uint16(n))
		default:
			b = binary.BigEndian.AppendUint32(append(b, 0xdf), uint32(n))
		}
		pool := 6
		if n > 8 {
			pool = 3 * n // mostly distinct
		}
		for range n {
			if r.IntN(20) == 0 {
				b = genValue(r, b, depth+1) // a key that is not a string, possibly a map
			} else {
				b = genKey(r, b, pool)
			}
			b = genValue(r, b, depth+1)
		}
		return b
	}
}

// genKey appends one of pool short strings (or "" as nil) as a str or bin of any header.
func genKey(r *rand.Rand, b []byte, pool int) []byte {
	s := []byte{"aAb"[r.IntN(3)]}
	if i := r.IntN(pool); i > 0 {
		s = append(s, byte('0'+i%10), byte('0'+i/10%10), byte('0'+i/100))
	}
	if r.IntN(8) == 0 {
		s = s[:0]
		if r.IntN(2) == 0 {
			return append(b, 0xc0)
		}
	}
	switch r.IntN(5) {
	case 0:
		b = append(b, 0xd9, byte(len(s)))
	case 1:
		b = binary.BigEndian.AppendUint16(append(b, 0xda), uint16(len(s)))
	case 2:
		b = append(b, 0xc4, byte(len(s)))
	case 3:
		b = binary.BigEndian.AppendUint32(append(b, 0xc6), uint32(len(s)))
	default:
		b = append(b, byte(0xa0|len(s)))
	}
	return append(b, s...)
}

func TestCheckKeysAgreesWithTheDecoder(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	repeats, clean := 0, 0
	for range 50000 {
		b := genValue(r, nil, 0)
		if checkKeysAgrees(t, b) {
			repeats++
		} else if CheckKeys(b) == nil {
			clean++
		}
		c := bytes.Clone(b) // and a byte flipped
		c[r.IntN(len(c))] ^= byte(1 << r.IntN(8))
		checkKeysAgrees(t, c)
	}
	if repeats < 1000 || clean < 1000 {
		t.Fatalf("%d bodies with a repeated key, %d without: the generator lost its balance", repeats, clean)
	}
	t.Logf("%d with a repeated key, %d without", repeats, clean)
}

// Hand-made: each encoding of a key repeats the others; case differs; depth and size limits hold.
func TestCheckKeysEdges(t *testing.T) {
	nested := func(d int) []byte { // a map of a map of … d deep, innermost {a: 1, a: 2}
		b := []byte{0x82, 0xa1, 'a', 1, 0xa1, 'a', 2}
		for range d {
			b = append([]byte{0x81, 0xa1, 'k'}, b...)
		}
		return b
	}
	const ok, malformed = "ok", "malformed"
	for _, c := range []struct {
		name string
		b    []byte
		want string // ok, malformed, or the key repeated (quoted)
	}{
		{"str and str8", []byte{0x82, 0xa1, 'a', 1, 0xd9, 1, 'a', 2}, `"a"`},
		{"str and bin16", []byte{0x82, 0xa1, 'a', 1, 0xc5, 0, 1, 'a', 2}, `"a"`},
		{"nil and empty str32", []byte{0x82, 0xc0, 1, 0xdb, 0, 0, 0, 0, 2}, `""`},
		{"case differs", []byte{0x82, 0xa1, 'a', 1, 0xa1, 'A', 2}, ok},
		{"int keys repeat", []byte{0x82, 0x01, 1, 0x01, 2}, ok}, // the decoder refuses them
		{"one pair", []byte{0x81, 0xa1, 'a', 0x82, 0xa1, 'b', 1, 0xa1, 'b', 2}, `"b"`},
		{"repeat in the 32nd map down", nested(31), `"a"`},
		{"33 maps deep", nested(32), malformed}, // as Check
		{"map16 claiming more than there is", []byte{0xde, 0xff, 0xff, 0xa1, 'a', 1, 0xa1, 'a', 2}, malformed},
	} {
		err := CheckKeys(c.b)
		var rk *RepeatedKeyError
		got := ok
		switch {
		case errors.As(err, &rk):
			got = strconv.Quote(string(rk.Key))
		case err != nil:
			got = malformed
		}
		if got != c.want {
			t.Errorf("%s: CheckKeys = %v, want %s", c.name, err, c.want)
		}
		checkKeysAgrees(t, c.b)
	}
}

// CheckKeys on a map without repeats allocates nothing (a small one) and costs little beside Check.
func TestCheckKeysAllocatesNothingForSmallMaps(t *testing.T) {
	b, _ := msgpack.Marshal(map[string]any{"type": "attack", "dmg": 12, "target": "boss", "list": []any{map[string]any{"a": 1, "b": 2}}})
	if n := testing.AllocsPerRun(100, func() {
		if err := CheckKeys(b); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("CheckKeys allocated %v times", n)
	}
}

func FuzzCheckKeys(f *testing.F) {
	r := rand.New(rand.NewPCG(7, 8))
	for range 20 {
		f.Add(genValue(r, nil, 0))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkKeysAgrees(t, b) })
}

func BenchmarkCheck(b *testing.B) {
	body, _ := msgpack.Marshal(map[string]any{"type": "attack", "dmg": 12, "target": "boss"})
	b.Run("Check", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = Check(body)
		}
	})
	b.Run("CheckKeys", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = CheckKeys(body)
		}
	})
}
