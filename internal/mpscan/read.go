package mpscan

import (
	"encoding/binary"
	"math"
)

// The readers below take a part of a msgpack value without decoding the rest: shard/wire's fast
// paths and tickbench's reading of answers share them. Each returns false where b does not start
// with what it reads (or is cut short); none checks what follows.

// Str reads a string in any of its encodings: its bytes and its whole length.
func Str(b []byte) ([]byte, int, bool) {
	if len(b) == 0 {
		return nil, 0, false
	}
	var head, n int
	switch c := b[0]; {
	case c >= 0xa0 && c <= 0xbf:
		head, n = 1, int(c&0x1f)
	case c == 0xd9 && len(b) >= 2:
		head, n = 2, int(b[1])
	case c == 0xda && len(b) >= 3:
		head, n = 3, int(binary.BigEndian.Uint16(b[1:]))
	case c == 0xdb && len(b) >= 5:
		head, n = 5, int(binary.BigEndian.Uint32(b[1:]))
	default:
		return nil, 0, false
	}
	if n > len(b)-head {
		return nil, 0, false
	}
	return b[head : head+n], head + n, true
}

// MapHeader reads a map's header in any encoding: its length and the number of keys.
func MapHeader(b []byte) (head, items int, ok bool) { return Header(b, 0x80, 0xde, 0xdf) }

// Header reads a map's or an array's header given its fixed code's base and its 16- and 32-bit
// codes (maps: 0x80, 0xde, 0xdf; arrays: 0x90, 0xdc, 0xdd).
func Header(b []byte, fix, c16, c32 byte) (head, items int, ok bool) {
	if len(b) == 0 {
		return 0, 0, false
	}
	switch c := b[0]; {
	case c >= fix && c <= fix+0x0f:
		return 1, int(c & 0x0f), true
	case c == c16 && len(b) >= 3:
		return 3, int(binary.BigEndian.Uint16(b[1:])), true
	case c == c32 && len(b) >= 5:
		return 5, int(binary.BigEndian.Uint32(b[1:])), true
	}
	return 0, 0, false
}

// Int reads an integer in any of its encodings that fits an int64.
func Int(b []byte) (int64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	switch c := b[0]; {
	case c <= 0x7f:
		return int64(c), true
	case c >= 0xe0:
		return int64(int8(c)), true
	}
	u, w, ok := IntPayload(b)
	if !ok {
		return 0, false
	}
	if b[0] <= 0xcf { // unsigned
		return int64(u), u <= math.MaxInt64
	}
	return Signed(u, w), true
}

// Signed is the payload of a signed integer w bytes wide (IntPayload's) as an int64: the sign
// of its width extended.
func Signed(u uint64, w int) int64 {
	sh := 64 - 8*uint(w)
	return int64(u<<sh) >> sh
}

// IntPayload reads the payload of an integer with one (codes 0xcc–0xd3: unsigned and signed, 1,
// 2, 4 or 8 bytes) as the bits it holds, and its width; false for any other code or if cut short.
func IntPayload(b []byte) (u uint64, w int, ok bool) {
	if len(b) == 0 {
		return 0, 0, false
	}
	switch b[0] {
	case 0xcc, 0xd0:
		w = 1
	case 0xcd, 0xd1:
		w = 2
	case 0xce, 0xd2:
		w = 4
	case 0xcf, 0xd3:
		w = 8
	default:
		return 0, 0, false
	}
	if len(b) < 1+w {
		return 0, 0, false
	}
	switch w {
	case 1:
		u = uint64(b[1])
	case 2:
		u = uint64(binary.BigEndian.Uint16(b[1:]))
	case 4:
		u = uint64(binary.BigEndian.Uint32(b[1:]))
	default:
		u = binary.BigEndian.Uint64(b[1:])
	}
	return u, w, true
}

// Field returns the value of key in the map at the start of b (its bytes, and what follows
// them), the map nested depth deep (as Len counts it); of a key given twice, the last, as
// msgpack's decoder keeps. False if b holds no such map or the key is not a string key of it.
func Field(b []byte, key string, depth int) ([]byte, bool) {
	n, items, ok := MapHeader(b)
	if !ok {
		return nil, false
	}
	var v []byte
	for range items {
		k, kn, ok := Str(b[n:])
		if !ok {
			return nil, false
		}
		n += kn
		if string(k) == key {
			v = b[n:]
		}
		vn, err := Len(b[n:], depth+1)
		if err != nil {
			return nil, false
		}
		n += vn
	}
	return v, v != nil
}
