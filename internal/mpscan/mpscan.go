// Package mpscan checks that bytes are exactly one well-formed msgpack value before anything
// decodes them. The decoder preallocates containers from their declared lengths, so a few hostile
// bytes claiming a map of four billion entries would otherwise cost gigabytes; here every declared
// length must fit in the bytes that remain.
package mpscan

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// MaxDepth is the deepest nesting of maps and arrays accepted.
const MaxDepth = 32

// ErrMalformed is wrapped by every error of Check.
var ErrMalformed = errors.New("malformed msgpack")

// Check reports whether b holds exactly one well-formed msgpack value.
func Check(b []byte) error { return check(b, false) }

// CheckKeys is Check, and also refuses (with a *RepeatedKeyError) a map anywhere in b that holds
// a key twice, keys compared as msgpack's decoder reads them into a map[string]any: a str, a bin
// and a nil (read as "") alike by their bytes. A map's other keys (numbers, containers) are only
// checked well-formed: the decoder refuses them.
func CheckKeys(b []byte) error { return check(b, true) }

// RepeatedKeyError is CheckKeys's error for a map that holds Key twice.
type RepeatedKeyError struct {
	Key []byte // in the bytes checked
}

func (e *RepeatedKeyError) Error() string { return fmt.Sprintf("repeated map key %q", e.Key) }

func check(b []byte, keys bool) error {
	n, err := value(b, 0, keys)
	if err != nil {
		return err
	}
	if n != len(b) {
		return fmt.Errorf("%w: %d trailing bytes", ErrMalformed, len(b)-n)
	}
	return nil
}

// Len returns the length of the well-formed msgpack value at the start of b (more may follow),
// a value nested depth deep in the one Check would be given (0: at its top), so that its
// containers count against MaxDepth as Check counts them.
func Len(b []byte, depth int) (int, error) { return value(b, depth, false) }

func short(what string) error { return fmt.Errorf("%w: truncated %s", ErrMalformed, what) }

// value returns the length of the value at the start of b; keys: refuse repeated map keys.
func value(b []byte, depth int, keys bool) (int, error) {
	if len(b) == 0 {
		return 0, short("value")
	}
	c := b[0]
	switch {
	case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		return 1, nil
	case c >= 0x80 && c <= 0x8f:
		return mapping(b, 1, int(c&0x0f), depth, keys)
	case c >= 0x90 && c <= 0x9f:
		return container(b, 1, int(c&0x0f), depth, keys)
	case c >= 0xa0 && c <= 0xbf:
		return blob(b, 1, int(c&0x1f))
	}
	switch c {
	case 0xc4, 0xd9: // bin8, str8
		if len(b) < 2 {
			return 0, short("length")
		}
		return blob(b, 2, int(b[1]))
	case 0xc5, 0xda:
		if len(b) < 3 {
			return 0, short("length")
		}
		return blob(b, 3, int(binary.BigEndian.Uint16(b[1:])))
	case 0xc6, 0xdb:
		if len(b) < 5 {
			return 0, short("length")
		}
		return blob(b, 5, int(binary.BigEndian.Uint32(b[1:])))
	case 0xc7: // ext8: len, type, data
		if len(b) < 3 {
			return 0, short("ext")
		}
		return blob(b, 3, int(b[1]))
	case 0xc8:
		if len(b) < 4 {
			return 0, short("ext")
		}
		return blob(b, 4, int(binary.BigEndian.Uint16(b[1:])))
	case 0xc9:
		if len(b) < 6 {
			return 0, short("ext")
		}
		return blob(b, 6, int(binary.BigEndian.Uint32(b[1:])))
	case 0xca:
		return blob(b, 1, 4)
	case 0xcb:
		return blob(b, 1, 8)
	case 0xcc, 0xd0:
		return blob(b, 1, 1)
	case 0xcd, 0xd1:
		return blob(b, 1, 2)
	case 0xce, 0xd2:
		return blob(b, 1, 4)
	case 0xcf, 0xd3:
		return blob(b, 1, 8)
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1,2,4,8,16 plus the type byte
		return blob(b, 2, 1<<(c-0xd4))
	case 0xdc:
		if len(b) < 3 {
			return 0, short("length")
		}
		return container(b, 3, int(binary.BigEndian.Uint16(b[1:])), depth, keys)
	case 0xdd:
		if len(b) < 5 {
			return 0, short("length")
		}
		return container(b, 5, int(binary.BigEndian.Uint32(b[1:])), depth, keys)
	case 0xde:
		if len(b) < 3 {
			return 0, short("length")
		}
		return mapping(b, 3, int(binary.BigEndian.Uint16(b[1:])), depth, keys)
	case 0xdf:
		if len(b) < 5 {
			return 0, short("length")
		}
		return mapping(b, 5, int(binary.BigEndian.Uint32(b[1:])), depth, keys)
	}
	return 0, fmt.Errorf("%w: invalid code 0x%02x", ErrMalformed, c)
}

func blob(b []byte, head, n int) (int, error) {
	if n < 0 || n > len(b)-head {
		return 0, short("data")
	}
	return head + n, nil
}

// container scans items values (a map counts keys and values) after a header of head bytes.
func container(b []byte, head, items, depth int, keys bool) (int, error) {
	if depth >= MaxDepth {
		return 0, fmt.Errorf("%w: nested deeper than %d", ErrMalformed, MaxDepth)
	}
	if items > len(b)-head { // every item takes at least one byte
		return 0, short("container")
	}
	off := head
	for i := 0; i < items; i++ {
		n, err := value(b[off:], depth+1, keys)
		if err != nil {
			return 0, err
		}
		off += n
	}
	return off, nil
}

// smallMap is the most keys a map may have for mapping to compare them pairwise, without a set.
const smallMap = 16

// mapping scans a map of pairs keys and values after a header of head bytes; keys: refuse a
// key given twice.
func mapping(b []byte, head, pairs, depth int, keys bool) (int, error) {
	if !keys || pairs < 2 {
		return container(b, head, 2*pairs, depth, keys)
	}
	if depth >= MaxDepth {
		return 0, fmt.Errorf("%w: nested deeper than %d", ErrMalformed, MaxDepth)
	}
	if 2*pairs > len(b)-head {
		return 0, short("container")
	}
	var small [smallMap][]byte // the keys so far, for a small map
	var set map[string]struct{}
	seen := 0
	off := head
	for i := 0; i < pairs; i++ {
		n, err := value(b[off:], depth+1, true)
		if err != nil {
			return 0, err
		}
		if kh := keyHead(b[off]); kh > 0 {
			k := b[off+kh : off+n]
			if pairs <= smallMap {
				for _, p := range small[:seen] {
					if string(p) == string(k) {
						return 0, &RepeatedKeyError{Key: k}
					}
				}
				small[seen] = k
				seen++
			} else {
				if set == nil {
					set = make(map[string]struct{}, pairs)
				}
				if _, ok := set[string(k)]; ok {
					return 0, &RepeatedKeyError{Key: k}
				}
				set[string(k)] = struct{}{}
			}
		}
		off += n
		if n, err = value(b[off:], depth+1, true); err != nil {
			return 0, err
		}
		off += n
	}
	return off, nil
}

// keyHead is the length of the header of a key msgpack's decoder reads into a string (str, bin,
// or nil: ""), the value well-formed; 0 for any other key.
func keyHead(c byte) int {
	switch {
	case c >= 0xa0 && c <= 0xbf, c == 0xc0:
		return 1
	case c == 0xd9, c == 0xc4:
		return 2
	case c == 0xda, c == 0xc5:
		return 3
	case c == 0xdb, c == 0xc6:
		return 5
	}
	return 0
}
