package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tickfence/tickfence/internal/mpscan"
)

// The values a reply's result (or a frame's payload) decodes to in Go. msgpack keeps the width it
// was encoded with — a canonical 5 comes back as an int8 and a 200 as a uint8 — so the same
// number would have a different Go type depending on its size, and JSON would give float64 for
// all of them. Normalize makes every number one of three types, whatever its encoding:
//
//	integers  int64 (uint64 only above math.MaxInt64)
//	floats    float64 (an integral float in JSON is an integer there: 3 and 3.0 are not told apart)
//	the rest  nil, bool, string, []byte, time.Time, []any, map[string]any (map[any]any when a
//	          key is not a string)

// DecodeValue decodes msgpack into Go's own types, normalized (see Normalize). It refuses input
// nested deeper than the wire allows.
func DecodeValue(b []byte) (any, error) {
	if err := mpscan.Check(b); err != nil {
		return nil, err
	}
	return decodeValue(b)
}

// decodeValue is DecodeValue of input mpscan.Check accepted.
func decodeValue(b []byte) (any, error) {
	v, err := newDecoder(b).DecodeInterfaceLoose()
	if err != nil {
		return nil, err
	}
	return Normalize(v), nil
}

// newDecoder reads b with every interface decoded loosely (integers as int64 or uint64 by their
// code, floats as float64) and maps whatever their keys.
func newDecoder(b []byte) *msgpack.Decoder {
	d := msgpack.NewDecoder(bytes.NewReader(b))
	d.UseLooseInterfaceDecoding(true)
	d.SetMapDecoder(decodeAnyMap)
	return d
}

// Unmarshal decodes msgpack into out — a struct, a map, a slice, or an *any — with every number
// that lands in an interface (an any, a map[string]any's values, a struct's any field) an int64
// (uint64 above math.MaxInt64) or a float64, as DecodeValue gives them; typed fields take numbers
// as msgpack does, whatever their width on the wire.
func Unmarshal(b []byte, out any) error {
	v, err := DecodeValue(b)
	if err != nil {
		return err
	}
	return Assign(v, out)
}

// Assign stores v, a value as DecodeValue returns it, in out as Unmarshal does: an *any takes it
// as it is; anything else is decoded from v encoded again, every integer at full width (the
// code of an int64, or of a uint64 above math.MaxInt64) so that a loose decoder gives it back as
// the same type, and a float that a float32 holds exactly as a float32, so that a float32 field
// can take it (msgpack refuses a float64 there).
func Assign(v any, out any) error {
	switch p := out.(type) {
	case nil:
		return nil
	case *any:
		*p = v
		return nil
	}
	b, err := msgpack.Marshal(forEncoding(v))
	if err != nil {
		return err
	}
	return newDecoder(b).Decode(out)
}

// forEncoding is a copy of a normalized value with the floats a float32 holds exactly narrowed
// to float32 (see Assign).
func forEncoding(v any) any {
	switch x := v.(type) {
	case float64:
		if f := float32(x); float64(f) == x || math.IsNaN(x) {
			return f
		}
	case []any:
		c := make([]any, len(x))
		for i, e := range x {
			c[i] = forEncoding(e)
		}
		return c
	case map[string]any:
		c := make(map[string]any, len(x))
		for k, e := range x {
			c[k] = forEncoding(e)
		}
		return c
	case map[any]any:
		c := make(map[any]any, len(x))
		for k, e := range x {
			c[forEncoding(k)] = forEncoding(e)
		}
		return c
	}
	return v
}

// decodeAnyMap decodes a map whatever its keys: map[string]any if they are all strings (msgpack's
// own decoder refuses any other key), else map[any]any.
func decodeAnyMap(d *msgpack.Decoder) (any, error) {
	n, err := d.DecodeMapLen()
	if err != nil || n < 0 {
		return nil, err
	}
	keys, vals := make([]any, n), make([]any, n)
	strs := true
	for i := range n {
		if keys[i], err = d.DecodeInterfaceLoose(); err != nil {
			return nil, err
		}
		if vals[i], err = d.DecodeInterfaceLoose(); err != nil {
			return nil, err
		}
		if _, ok := keys[i].(string); !ok {
			strs = false
			if keys[i] != nil && !reflect.TypeOf(keys[i]).Comparable() {
				return nil, fmt.Errorf("msgpack: a map key of type %T", keys[i])
			}
		}
	}
	if strs {
		m := make(map[string]any, n)
		for i, k := range keys {
			m[k.(string)] = vals[i]
		}
		return m, nil
	}
	m := make(map[any]any, n)
	for i, k := range keys {
		m[Normalize(k)] = vals[i]
	}
	return m, nil
}

// Normalize returns v with every number as int64 (uint64 above math.MaxInt64) or float64,
// through slices and maps (changed in place, but for a map[any]any, whose keys may change); other
// values unchanged.
func Normalize(v any) any {
	switch x := v.(type) {
	case int:
		return int64(x)
	case int8:
		return int64(x)
	case int16:
		return int64(x)
	case int32:
		return int64(x)
	case uint:
		return unsigned(uint64(x))
	case uint8:
		return int64(x)
	case uint16:
		return int64(x)
	case uint32:
		return int64(x)
	case uint64:
		return unsigned(x)
	case float32:
		return float64(x)
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		if u, err := strconv.ParseUint(string(x), 10, 64); err == nil {
			return u // above math.MaxInt64, or Int64 would have taken it
		}
		f, _ := x.Float64()
		return f
	case []any:
		for i, e := range x {
			x[i] = Normalize(e)
		}
	case map[string]any:
		for k, e := range x {
			x[k] = Normalize(e)
		}
	case map[any]any:
		m := make(map[any]any, len(x))
		for k, e := range x {
			m[Normalize(k)] = Normalize(e)
		}
		return m
	}
	return v
}

func unsigned(u uint64) any {
	if u > math.MaxInt64 {
		return u
	}
	return int64(u)
}

// decodeJSONValue decodes JSON into Go's own types, normalized: an integer literal is an int64
// (or uint64), not a float64.
func decodeJSONValue(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("data after the value")
	}
	return Normalize(v), nil
}
