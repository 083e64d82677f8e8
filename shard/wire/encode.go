package wire

import (
	"bytes"
	"encoding/binary"
	"math"
	"slices"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tickfence/tickfence/internal/mpenc"
)

// The encoding fast path. Every answer a node gives, and every command the Go client sends, is
// encoded with Canonical; through msgpack's reflection and sorted-map encoder that cost 5.9 % of
// the process at 5 000 demo dungeons (pprof), more than the tick of the game itself. Most values
// are built from Go's own types (a map[string]any of integers and strings), which appendFast
// encodes directly, byte for byte as msgpack's encoder with sorted keys and compact numbers does.
// Anything else — named types (they may carry their own encoder), structs, other maps and slices
// — makes it decline, and the whole value goes the general way.

// fastMaxDepth bounds appendFast's recursion; deeper values go the general way.
const fastMaxDepth = 64

// Canonical encodes a value as msgpack with sorted map keys and compact integers and floats.
func Canonical(v any) ([]byte, error) {
	if b, ok := appendFast(make([]byte, 0, 64), v, 0); ok {
		return b, nil
	}
	return canonicalGeneral(v)
}

// canonicalGeneral is Canonical through msgpack's encoder, for every value.
func canonicalGeneral(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetSortMapKeys(true)
	enc.UseCompactInts(true)
	enc.UseCompactFloats(true)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// appendFast appends v's canonical encoding to b, or reports false (b is then garbage) for a
// value it does not know.
func appendFast(b []byte, v any, depth int) ([]byte, bool) {
	if depth > fastMaxDepth {
		return b, false
	}
	switch x := v.(type) {
	case nil:
		return append(b, 0xc0), true
	case bool:
		if x {
			return append(b, 0xc3), true
		}
		return append(b, 0xc2), true
	case string:
		return mpenc.Str(b, x), true
	case []byte:
		return mpenc.Bin(b, x), true
	case int:
		return mpenc.Int(b, int64(x)), true
	case int8:
		return mpenc.Int(b, int64(x)), true
	case int16:
		return mpenc.Int(b, int64(x)), true
	case int32:
		return mpenc.Int(b, int64(x)), true
	case int64:
		return mpenc.Int(b, x), true
	case uint:
		return mpenc.Uint(b, uint64(x)), true
	case uint8:
		return mpenc.Uint(b, uint64(x)), true
	case uint16:
		return mpenc.Uint(b, uint64(x)), true
	case uint32:
		return mpenc.Uint(b, uint64(x)), true
	case uint64:
		return mpenc.Uint(b, x), true
	case float32:
		if x != x {
			// msgpack reaches a float32 inside []any or a Reply through float64, which sets a
			// signalling NaN's quiet bit, and in a map it does not: leave NaNs to it.
			return b, false
		}
		if float32(int64(x)) == x { // msgpack's compact floats: an integral float is an integer
			return mpenc.Int(b, int64(x)), true
		}
		return binary.BigEndian.AppendUint32(append(b, 0xca), math.Float32bits(x)), true
	case float64:
		if float64(int64(x)) == x {
			return mpenc.Int(b, int64(x)), true
		}
		return binary.BigEndian.AppendUint64(append(b, 0xcb), math.Float64bits(x)), true
	case []any:
		if x == nil {
			return append(b, 0xc0), true
		}
		b = mpenc.ArrayLen(b, len(x))
		for _, e := range x {
			var ok bool
			if b, ok = appendFast(b, e, depth+1); !ok {
				return b, false
			}
		}
		return b, true
	case map[string]any:
		if x == nil {
			return append(b, 0xc0), true
		}
		var small [16]string
		keys := small[:0]
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = mpenc.MapLen(b, len(x))
		for _, k := range keys {
			b = mpenc.Str(b, k)
			var ok bool
			if b, ok = appendFast(b, x[k], depth+1); !ok {
				return b, false
			}
		}
		return b, true
	case Reply: // Reply.EncodeMsgpack's bytes: its fields in order, a nil result or error left out
		emptyResult := x.Result == nil
		n := 1
		if !emptyResult {
			n++
		}
		if x.Error != nil {
			n++
		}
		b = mpenc.Str(append(b, 0x80|byte(n)), "ok")
		if x.OK {
			b = append(b, 0xc3)
		} else {
			b = append(b, 0xc2)
		}
		if !emptyResult {
			var ok bool
			if b, ok = appendFast(mpenc.Str(b, "result"), x.Result, depth+1); !ok {
				return b, false
			}
		}
		if x.Error != nil {
			b = appendError(mpenc.Str(b, "error"), x.Error)
		}
		return b, true
	case *Error:
		if x == nil {
			return append(b, 0xc0), true
		}
		return appendError(b, x), true
	}
	return b, false
}

func appendError(b []byte, e *Error) []byte {
	b = mpenc.Str(append(b, 0x82), "code")
	b = mpenc.Str(b, e.Code)
	b = mpenc.Str(b, "message")
	return mpenc.Str(b, e.Message)
}
