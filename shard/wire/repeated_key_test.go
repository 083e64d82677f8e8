package wire_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
)

// mpMap encodes a msgpack map of the given keys and values, in that order, repeats included (no
// encoder writes those from a Go map). Keys are strings unless given as []byte (bin) or nil.
func mpMap(t *testing.T, kv ...any) []byte {
	t.Helper()
	b := []byte{0xde, byte(len(kv) / 2 >> 8), byte(len(kv) / 2)}
	for _, v := range kv {
		e, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		b = append(b, e...)
	}
	return b
}

type raw []byte // an already encoded msgpack value inside mpMap

func (r raw) MarshalMsgpack() ([]byte, error) { return r, nil }

// Issue 33, item 4: a command map that repeats a key, at its top or in a map nested at any depth,
// is refused (bad_request, naming the key) in both encodings, by both forms of the command;
// nothing of it is decoded as a command. Before, the last of the repeats won: {type: status,
// type: end} was an end, so a gateway filtering on the first "type" was bypassed.
func TestRepeatedKeyIsBadRequest(t *testing.T) {
	subj := wire.Subject(store.ShardOf("d1", 16), "d1")
	many := []any{"type", "x"} // a map too large to compare keys pairwise
	bigJSON := `{"type":"x"`
	for i := range 40 {
		many = append(many, fmt.Sprintf("k%02d", i), i)
		bigJSON += fmt.Sprintf(`,"k%02d":%d`, i, i)
	}
	many = append(many, "k07", 1)
	bigJSON += `,"k07":1}`
	cases := []struct {
		name string
		body []byte
		json bool
		key  string
	}{
		{"msgpack type twice", mpMap(t, "type", "status", "type", "end"), false, "type"},
		{"msgpack type twice, same value", mpMap(t, "type", "end", "type", "end"), false, "type"},
		{"msgpack other key twice", mpMap(t, "type", "add", "by", 1, "by", 1000), false, "by"},
		{"msgpack nested", mpMap(t, "type", "x", "a", raw(mpMap(t, "b", 1, "b", 2))), false, "b"},
		{"msgpack nested in an array", mpMap(t, "type", "x", "a", raw(append([]byte{0x92, 0x01}, mpMap(t, "c", 1, "b", 1, "b", 2)...))), false, "b"},
		{"msgpack nested deep", mpMap(t, "type", "x", "a", raw(mpMap(t, "a", raw(mpMap(t, "a", raw(mpMap(t, "z", 1, "y", 2, "z", 3))))))), false, "z"},
		{"msgpack bin key repeats a str key", mpMap(t, "type", "status", []byte("type"), "end"), false, "type"},
		{"msgpack nil key repeats an empty key", mpMap(t, "type", "x", "", 1, nil, 2), false, ""},
		{"msgpack large map", mpMap(t, many...), false, "k07"},
		{"JSON type twice", []byte(`{"type":"status","type":"end"}`), true, "type"},
		{"JSON other key twice", []byte(`{"type":"add","by":1,"by":1000}`), true, "by"},
		{"JSON nested", []byte(`{"type":"x","a":{"b":1,"b":2}}`), true, "b"},
		{"JSON nested in an array", []byte(`{"type":"x","a":[1,"s",{"c":1,"b":1,"b":2}]}`), true, "b"},
		{"JSON nested deep", []byte(`{"type":"x","a":{"a":{"a":{"z":1,"y":[{}],"z":3}}}}`), true, "z"},
		{"JSON escaped repeat", []byte(`{"type":"status","\u0074ype":"end"}`), true, "type"},
		{"JSON escaped slash", []byte(`{"type":"x","a/b":1,"a\/b":2}`), true, "a/b"},
		{"JSON invalid UTF-8 keys decode alike", []byte("{\"type\":\"x\",\"\xff\":1,\"\xfe\":2}"), true, "\ufffd"},
		{"JSON with spaces", []byte(" {\n \"type\" : \"status\" ,\t\"type\" : \"end\" } \n"), true, "type"},
		{"JSON large map", []byte(bigJSON), true, "k07"},
		{"JSON escapes of one key", []byte(`{"type":"x","a\"b":1,"a\\b":2,"a\u00e9":3,"aé":4}`), true, "aé"},
	}

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ct := ""
			if c.json {
				ct = wire.ContentJSON
			}
			for form, decode := range map[string]func() (wire.Request, error){
				"request ID": func() (wire.Request, error) { return wire.DecodeRequest(subj, "r1", ct, c.body, 16) },
				"session": func() (wire.Request, error) {
					return wire.DecodeCommand(subj, wire.Headers{Client: "gw", Seq: "3", ContentType: ct}, c.body, 16)
				},
			} {
				req, err := decode()
				var werr *wire.Error
				if !errors.As(err, &werr) || werr.Code != wire.CodeBadRequest {
					t.Fatalf("%s: decoded %q as type %q (body % x), error %v; want bad_request", form, c.body, req.Type, req.Body, err)
				}
				if want := fmt.Sprintf("%q", c.key); !strings.Contains(werr.Message, want) {
					t.Errorf("%s: message %q does not name the key %s", form, werr.Message, want)
				}
				if req.Type != "" || req.Body != nil || req.Fingerprint != 0 {
					t.Errorf("%s: refused, yet decoded type %q, body % x", form, req.Type, req.Body)
				}
				if req.JSON != c.json {
					t.Errorf("%s: the refusal would be answered in the wrong encoding (JSON %v)", form, req.JSON)
				}
			}
		})
	}
}

// Keys that differ in case, or repeat only in different maps, or as a value, are not repeats.
func TestKeysThatAreNotRepeats(t *testing.T) {
	subj := wire.Subject(store.ShardOf("d1", 16), "d1")
	cases := []struct {
		name string
		body []byte
		json bool
		typ  string
	}{
		{"msgpack Type and type", mpMap(t, "type", "status", "Type", "end"), false, "status"},
		{"msgpack TYPE first", mpMap(t, "TYPE", "end", "type", "status"), false, "status"},
		{"msgpack nested case", mpMap(t, "type", "x", "a", raw(mpMap(t, "b", 1, "B", 2))), false, "x"},
		{"msgpack siblings", mpMap(t, "type", "x", "a", raw(mpMap(t, "b", 1)), "c", raw(mpMap(t, "b", 2))), false, "x"},
		{"msgpack key as a value", mpMap(t, "type", "type", "a", "type"), false, "type"},
		{"msgpack prefix", mpMap(t, "type", "x", "typ", 1, "types", 2), false, "x"},
		{"JSON Type and type", []byte(`{"type":"status","Type":"end"}`), true, "status"},
		{"JSON nested case", []byte(`{"type":"x","a":{"b":1,"B":2}}`), true, "x"},
		{"JSON siblings", []byte(`{"type":"x","a":{"b":1},"c":[{"b":2},{"b":3}]}`), true, "x"},
		{"JSON key as a value", []byte(`{"type":"type","a":"type","b":["type","type"]}`), true, "type"},
		{"JSON escapes of different keys", []byte(`{"type":"x","a\"b":1,"a\\b":2,"a\u00e9":3,"ae":4}`), true, "x"},
		{"JSON prefix", []byte(`{"type":"x","typ":1,"types":2}`), true, "x"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ct := ""
			if c.json {
				ct = wire.ContentJSON
			}
			req, err := wire.DecodeRequest(subj, "r1", ct, c.body, 16)
			if err != nil || req.Type != c.typ {
				t.Fatalf("decoded %q as %+v, %v; want type %q", c.body, req, err, c.typ)
			}
		})
	}
}
