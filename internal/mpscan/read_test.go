package mpscan

import (
	"math"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// Int reads every integer encoding msgpack writes, and refuses what is not an int64.
func TestIntReadsEveryWidth(t *testing.T) {
	for _, v := range []any{int64(0), int64(127), int64(-1), int64(-32), int64(-33), int64(200), int64(-200),
		int64(70000), int64(-70000), int64(math.MaxInt64), int64(math.MinInt64), uint8(255), uint16(65535), uint32(math.MaxUint32), uint64(math.MaxInt64)} {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var want int64
		if err := msgpack.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		if got, ok := Int(b); !ok || got != want {
			t.Errorf("Int(%x) = %d, %v; want %d", b, got, ok, want)
		}
		if _, ok := Int(b[:len(b)-1]); ok && len(b) > 1 {
			t.Errorf("Int(%x) read a value cut short", b[:len(b)-1])
		}
	}
	for _, v := range []any{uint64(math.MaxUint64), 1.5, "7", nil, true} {
		b, _ := msgpack.Marshal(v)
		if got, ok := Int(b); ok {
			t.Errorf("Int(%x) of %v = %d, want refused", b, v, got)
		}
	}
}

// Field finds a key of a map at any position, the last of a repeated key, and nothing in what
// is not a map with string keys.
func TestField(t *testing.T) {
	// {"a": 1, "b": {"c": 2}, "a": 3}
	b := []byte{0x83, 0xa1, 'a', 0x01, 0xa1, 'b', 0x81, 0xa1, 'c', 0x02, 0xa1, 'a', 0x03}
	if v, ok := Field(b, "a", 0); !ok || v[0] != 0x03 {
		t.Errorf("Field a = %x, %v; want the last, 03", v, ok)
	}
	v, ok := Field(b, "b", 0)
	if !ok {
		t.Fatal("no b")
	}
	if c, ok := Field(v, "c", 1); !ok || c[0] != 0x02 {
		t.Errorf("Field b.c = %x, %v", c, ok)
	}
	if _, ok := Field(b, "z", 0); ok {
		t.Error("found a key that is not there")
	}
	for _, bad := range [][]byte{{0x92, 0x01, 0x02}, {0x81, 0x01, 0x02}, {0x82, 0xa1, 'a', 0x01}, nil} {
		if v, ok := Field(bad, "a", 0); ok {
			t.Errorf("Field(%x) = %x", bad, v)
		}
	}
}
