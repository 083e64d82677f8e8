package wire

import (
	"bytes"
	"math"

	"github.com/tickfence/tickfence/internal/mpscan"
)

// The fast paths of the command path. A command the Go client sends is canonical already (it
// encodes with Canonical), so decoding it into maps only to encode it again, byte for byte the
// same, costs most of what the node spends reading a command (pprof at 5 000 demo dungeons: 4.8 %
// of the process, against 0.4 % for this scan). Each fast path accepts only what it is sure of
// and hands everything else to the general path, which also words every error.

// canonicalCommand reports whether b is one msgpack map that Canonical encodes back byte for byte
// — string keys in ascending order without repeats, the shortest header of every string, array
// and map, the shortest encoding of every integer, and no floats, binaries or extensions — with a
// non-empty string under "type", which it returns.
func canonicalCommand(b []byte) (typ string, ok bool) {
	n, ok := canonicalMap(b, 0, func(k, v []byte) bool {
		if string(k) != "type" {
			return true
		}
		t, tn, ok := str(v)
		typ = string(t)
		return ok && tn == len(v)
	})
	return typ, ok && typ != "" && n == len(b)
}

// canonicalValue returns the length of the canonical value at the start of b (see
// canonicalCommand), or false.
func canonicalValue(b []byte, depth int) (int, bool) {
	if len(b) == 0 {
		return 0, false
	}
	c := b[0]
	container := c >= 0x80 && c <= 0x9f || c >= 0xdc && c <= 0xdf
	if container && depth >= mpscan.MaxDepth {
		return 0, false // mpscan.Check refuses it
	}
	switch {
	case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3: // fixints, nil, booleans
		return 1, true
	case c >= 0xa0 && c <= 0xbf, c == 0xd9, c == 0xda, c == 0xdb:
		_, n, ok := str(b)
		return n, ok
	case c >= 0x90 && c <= 0x9f, c == 0xdc, c == 0xdd:
		n, items, ok := arrayHeader(b)
		for i := 0; ok && i < items; i++ {
			var vn int
			vn, ok = canonicalValue(b[n:], depth+1)
			n += vn
		}
		return n, ok
	case c >= 0x80 && c <= 0x8f, c == 0xde, c == 0xdf:
		return canonicalMap(b, depth, nil)
	}
	// Integers in a wider encoding than their value needs are not canonical.
	v, w, ok := mpscan.IntPayload(b)
	if !ok {
		return 0, false // floats, binaries, extensions, or cut short
	}
	if c <= 0xcf { // unsigned: each width holds values the next narrower one cannot
		return 1 + w, v > [...]uint64{1: math.MaxInt8, 2: math.MaxUint8, 4: math.MaxUint16, 8: math.MaxUint32}[w]
	}
	// Signed: canonical only for negative values below the next narrower range.
	return 1 + w, mpscan.Signed(v, w) < [...]int64{1: -32, 2: math.MinInt8, 4: math.MinInt16, 8: math.MinInt32}[w]
}

// canonicalMap returns the length of the canonical map at the start of b, nested depth deep:
// string keys in ascending order without repeats, canonical values. each, if set, sees every key
// and value and may decline the map.
func canonicalMap(b []byte, depth int, each func(k, v []byte) bool) (int, bool) {
	n, items, ok := mapHeader(b)
	var prev []byte
	for i := 0; ok && i < items; i++ {
		var k []byte
		var kn, vn int
		if k, kn, ok = str(b[n:]); !ok || (i > 0 && bytes.Compare(prev, k) >= 0) {
			return 0, false
		}
		prev = k
		n += kn
		if vn, ok = canonicalValue(b[n:], depth+1); ok && each != nil {
			ok = each(k, b[n:n+vn])
		}
		n += vn
	}
	return n, ok
}

// str returns the string at the start of b and its whole length, if its header is the shortest.
func str(b []byte) ([]byte, int, bool) {
	v, n, ok := mpscan.Str(b)
	switch n - len(v) {
	case 2:
		ok = ok && len(v) >= 32
	case 3:
		ok = ok && len(v) > math.MaxUint8
	case 5:
		ok = ok && len(v) > math.MaxUint16
	}
	return v, n, ok
}

// mapHeader and arrayHeader read a container's header if it is the shortest for its count.
func mapHeader(b []byte) (head, items int, ok bool) { return header(b, 0x80, 0xde, 0xdf) }

func arrayHeader(b []byte) (head, items int, ok bool) { return header(b, 0x90, 0xdc, 0xdd) }

func header(b []byte, fix, c16, c32 byte) (head, items int, ok bool) {
	head, items, ok = mpscan.Header(b, fix, c16, c32)
	switch head {
	case 3:
		ok = ok && items >= 16
	case 5:
		ok = ok && items > math.MaxUint16
	}
	return head, items, ok
}

// status reads a msgpack reply's status as DecodeStatus does: a map with string keys, "ok" a
// boolean, "error" nil or a map with the strings "code" and "message", each at most once, as is
// "result"; other keys are skipped (checked well-formed). False for anything else.
func status(b []byte) (Status, bool) {
	var st Status
	n, items, ok := mpscan.MapHeader(b)
	if !ok {
		return Status{}, false
	}
	seenOK, seenErr, seenResult := false, false, false
	for i := 0; i < items; i++ {
		k, kn, ok := mpscan.Str(b[n:])
		if !ok {
			return Status{}, false
		}
		n += kn
		switch string(k) {
		case "ok":
			if seenOK || n >= len(b) || (b[n] != 0xc2 && b[n] != 0xc3) {
				return Status{}, false
			}
			seenOK, st.OK = true, b[n] == 0xc3
			n++
		case "error":
			if seenErr {
				return Status{}, false
			}
			seenErr = true
			en, e, ok := errorValue(b[n:])
			if !ok {
				return Status{}, false
			}
			st.Error = e
			n += en
		default:
			if string(k) == "result" {
				if seenResult {
					return Status{}, false // the general path refuses it (topKeysOnce)
				}
				seenResult = true
			}
			vn, err := mpscan.Len(b[n:], 1) // under the top map
			if err != nil {
				return Status{}, false
			}
			n += vn
		}
	}
	return st, n == len(b)
}

// errorValue reads a reply's error: nil, or a map of strings (code, message; others skipped).
func errorValue(b []byte) (int, *Error, bool) {
	if len(b) > 0 && b[0] == 0xc0 {
		return 1, nil, true
	}
	n, items, ok := mpscan.MapHeader(b)
	if !ok {
		return 0, nil, false
	}
	e := &Error{}
	seenCode, seenMsg := false, false
	for i := 0; i < items; i++ {
		k, kn, ok := mpscan.Str(b[n:])
		if !ok {
			return 0, nil, false
		}
		n += kn
		var dst *string
		switch string(k) {
		case "code":
			if seenCode {
				return 0, nil, false
			}
			seenCode, dst = true, &e.Code
		case "message":
			if seenMsg {
				return 0, nil, false
			}
			seenMsg, dst = true, &e.Message
		default:
			vn, err := mpscan.Len(b[n:], 2) // under the error map, under the top map
			if err != nil {
				return 0, nil, false
			}
			n += vn
			continue
		}
		v, vn, ok := mpscan.Str(b[n:])
		if !ok {
			return 0, nil, false
		}
		*dst = string(v)
		n += vn
	}
	return n, e, true
}
