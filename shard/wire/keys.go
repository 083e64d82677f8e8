package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"unicode/utf8"

	"github.com/tickfence/tickfence/internal/mpscan"
)

// A command map that repeats a key, at its top or in a map nested at any depth, is refused in
// both encodings (issue 33): both decoders keep the last of the repeats, so {type: status, type:
// end} was an end, and a gateway that reads the first "type" would pass what the node takes as
// another command. Msgpack bodies are checked by mpscan.CheckKeys in the scan that checks them
// well-formed (the canonical fast path accepts only keys in ascending order, so never a repeat);
// JSON bodies by jsonRepeatedKey once encoding/json has read them.

// maxKeyInMessage bounds how much of a repeated key an error quotes.
const maxKeyInMessage = 64

// repeatedKey is the refusal of a command that repeats key.
func repeatedKey(key []byte) *Error {
	more := ""
	if len(key) > maxKeyInMessage {
		key, more = key[:maxKeyInMessage], "…"
	}
	return Errorf(CodeBadRequest, "command repeats the key %q%s in one map", key, more)
}

// checkMsgpack checks a msgpack command well-formed and without repeated keys.
func checkMsgpack(data []byte) *Error {
	err := mpscan.CheckKeys(data)
	if err == nil {
		return nil
	}
	if rk := (*mpscan.RepeatedKeyError)(nil); errors.As(err, &rk) {
		return repeatedKey(rk.Key)
	}
	return Errorf(CodeBadRequest, "%v", err)
}

// jsonRepeatedKey returns a key repeated in an object of data, a JSON value encoding/json
// decoded without error (data may go on after it), keys compared as encoding/json decodes them
// (escapes resolved, invalid UTF-8 as U+FFFD): the first repeat found, depth first.
func jsonRepeatedKey(data []byte) ([]byte, bool) {
	s := jsonScan{b: data}
	return s.value(0)
}

// jsonScan walks JSON known to be well-formed; it reads past the end of b as the end of a
// container, so that it ends, without panicking, on anything.
type jsonScan struct {
	b []byte
	i int
}

// next returns the next byte that is not white space and moves past it; 0 at the end.
func (s *jsonScan) next() byte {
	for s.i < len(s.b) {
		c := s.b[s.i]
		s.i++
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return c
		}
	}
	return 0
}

// value scans a value and returns a key repeated in it. depth guards recursion: encoding/json
// refuses JSON nested deeper than 10 000, so well-formed input never reaches the limit.
func (s *jsonScan) value(depth int) ([]byte, bool) {
	if depth > 10000 {
		return nil, false
	}
	switch s.next() {
	case '{':
		return s.object(depth)
	case '[':
		if s.peek() == ']' {
			s.i++
			return nil, false
		}
		for {
			if k, ok := s.value(depth + 1); ok {
				return k, true
			}
			if s.next() != ',' { // ']', or the end
				return nil, false
			}
		}
	case '"':
		s.str()
	default: // a number, true, false or null: up to what ends it
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case ',', ']', '}', ' ', '\t', '\n', '\r':
				return nil, false
			}
			s.i++
		}
	}
	return nil, false
}

// peek returns the next byte that is not white space, without moving past it.
func (s *jsonScan) peek() byte {
	c := s.next()
	if c != 0 {
		s.i--
	}
	return c
}

// object scans an object after its '{'.
func (s *jsonScan) object(depth int) ([]byte, bool) {
	var small [8][]byte // the keys so far, while few (a small frame: JSON may nest thousands deep)
	var set map[string]struct{}
	seen := 0
	for {
		switch s.next() {
		case '"':
		case '}':
			return nil, false // {}
		default:
			return nil, false // the end
		}
		k := s.key()
		if set == nil && seen < len(small) {
			for _, p := range small[:seen] {
				if string(p) == string(k) {
					return k, true
				}
			}
			small[seen] = k
			seen++
		} else {
			if set == nil {
				set = make(map[string]struct{}, 2*len(small))
				for _, p := range small {
					set[string(p)] = struct{}{}
				}
			}
			if _, ok := set[string(k)]; ok {
				return k, true
			}
			set[string(k)] = struct{}{}
		}
		if s.next() != ':' {
			return nil, false
		}
		if k, ok := s.value(depth + 1); ok {
			return k, true
		}
		if s.next() != ',' { // '}', or the end
			return nil, false
		}
	}
}

// str moves past a string after its opening quote and returns its raw bytes and whether they
// hold an escape or a byte outside ASCII.
func (s *jsonScan) str() (raw []byte, plain bool) {
	start, plain := s.i, true
	for s.i < len(s.b) {
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return s.b[start : s.i-1], plain
		case c == '\\':
			s.i += 2 // the escaped byte is never a quote that ends the string
			plain = false
			continue
		case c >= utf8.RuneSelf:
			plain = false
		}
		s.i++
	}
	return s.b[start:min(s.i, len(s.b))], plain
}

// key reads a key after its opening quote, as encoding/json decodes it.
func (s *jsonScan) key() []byte {
	open := s.i - 1
	raw, plain := s.str()
	if plain {
		return raw
	}
	if s.i <= len(s.b) && bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
		return raw // not ASCII, but as it decodes
	}
	var k string
	if s.i > len(s.b) || json.Unmarshal(s.b[open:s.i], &k) != nil {
		return raw // not well-formed after all: encoding/json refused it already
	}
	return []byte(k)
}
