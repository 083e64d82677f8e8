package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/tickfence/tickfence/store"
)

// refJSONRepeated finds, with encoding/json's own tokenizer, the first key repeated in an object
// of the value at dec (depth first, a key before its value), keys as encoding/json decodes them.
func refJSONRepeated(dec *json.Decoder) (string, bool, error) {
	t, err := dec.Token()
	if err != nil {
		return "", false, err
	}
	switch t {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return "", false, err
			}
			k := kt.(string)
			if seen[k] {
				return k, true, nil
			}
			seen[k] = true
			if k, ok, err := refJSONRepeated(dec); ok || err != nil {
				return k, ok, err
			}
		}
		_, err = dec.Token()
	case json.Delim('['):
		for dec.More() {
			if k, ok, err := refJSONRepeated(dec); ok || err != nil {
				return k, ok, err
			}
		}
		_, err = dec.Token()
	}
	return "", false, err
}

// jsonKeysAgree fails unless jsonRepeatedKey finds what the tokenizer finds in data (if
// encoding/json decodes it), and DecodeRequest refuses data for it, naming the key.
func jsonKeysAgree(t *testing.T, data []byte) (repeated bool) {
	t.Helper()
	var v any
	dec := json.NewDecoder(bytes.NewReader(data))
	if dec.Decode(&v) != nil {
		return false
	}
	want, found, err := refJSONRepeated(json.NewDecoder(bytes.NewReader(data)))
	if err != nil {
		t.Fatalf("tokenizer on %q, which decodes: %v", data, err)
	}
	got, ok := jsonRepeatedKey(data)
	if ok != found || (found && string(got) != want) {
		t.Fatalf("jsonRepeatedKey(%q) = %q, %v; encoding/json sees %q, %v", data, got, ok, want, found)
	}
	if _, isMap := v.(map[string]any); !isMap || dec.More() || len(data) > store.MaxCommandBytes {
		return found
	}
	_, err = DecodeRequest(Subject(0, "d-1"), "r", ContentJSON, data, 1)
	var werr *Error
	if found && (!errors.As(err, &werr) || werr.Code != CodeBadRequest || !strings.Contains(werr.Message, "repeats the key")) {
		t.Fatalf("DecodeRequest(%q) = %v; want bad_request for the repeated key %q", data, err, want)
	}
	if !found && werr != nil && strings.Contains(werr.Message, "repeats") {
		t.Fatalf("DecodeRequest(%q) = %v; no key repeats", data, err)
	}
	return found
}

// genJSON appends a random JSON value whose objects often repeat a key, spelled in different
// escapes, with invalid UTF-8 and white space about.
func genJSON(r *rand.Rand, b []byte, depth int) []byte {
	ws := func(b []byte) []byte {
		if r.IntN(4) == 0 {
			return append(b, " \t\n\r"[r.IntN(4)])
		}
		return b
	}
	b = ws(b)
	k := r.IntN(10)
	if depth > 4 {
		k = r.IntN(5)
	}
	switch k {
	case 0:
		b = append(b, []string{"null", "true", "false", "-1.5e3", "0", "12"}[r.IntN(6)]...)
	case 1, 2, 3, 4:
		b = genJSONKey(r, b, 4)
	case 5, 6:
		b = append(b, '[')
		for i := range r.IntN(4) {
			if i > 0 {
				b = append(ws(b), ',')
			}
			b = genJSON(r, b, depth+1)
		}
		b = append(ws(b), ']')
	default:
		n := r.IntN(6)
		pool := 5
		if depth < 2 && r.IntN(6) == 0 {
			n, pool = 7+r.IntN(30), 60 // past the pairwise comparison, mostly distinct
		}
		b = append(b, '{')
		for i := range n {
			if i > 0 {
				b = append(ws(b), ',')
			}
			b = genJSONKey(r, ws(b), pool)
			b = append(ws(b), ':')
			b = genJSON(r, b, depth+1)
		}
		b = append(ws(b), '}')
	}
	return ws(b)
}

// genJSONKey appends one of pool keys, or a spelling of one that decodes alike.
func genJSONKey(r *rand.Rand, b []byte, pool int) []byte {
	spellings := [][]string{
		{`"a"`, `"\u0061"`}, {`"A"`}, {`"é"`, `"\u00e9"`, `"\u00E9"`}, {`"\/"`, `"/"`},
		{"\"\xff\"", "\"\xfe\"", `"\ufffd"`, `"\ud800"`}, {`"a\"b"`}, {`"a\\b"`}, {`""`},
	}
	if i := r.IntN(pool + 3); i >= len(spellings) {
		return append(b, `"k`+strconv.Itoa(i)+`"`...)
	} else {
		s := spellings[i]
		return append(b, s[r.IntN(len(s))]...)
	}
}

func TestJSONRepeatedKeyAgreesWithEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	repeats, clean := 0, 0
	for range 30000 {
		b := genJSON(r, nil, 0)
		if jsonKeysAgree(t, b) {
			repeats++
		} else {
			clean++
		}
	}
	if repeats < 1000 || clean < 1000 {
		t.Fatalf("%d bodies with a repeated key, %d without: the generator lost its balance", repeats, clean)
	}
	t.Logf("%d with a repeated key, %d without", repeats, clean)
}

// On what is not well-formed, or cut short, the scan ends without a panic.
func TestJSONRepeatedKeyEndsOnAnything(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for range 20000 {
		b := genJSON(r, nil, 0)
		_, _ = jsonRepeatedKey(b[:r.IntN(len(b)+1)])
		c := bytes.Clone(b)
		c[r.IntN(len(c))] = `{}[]",:\ a`[r.IntN(10)]
		_, _ = jsonRepeatedKey(c)
	}
}

func FuzzJSONRepeatedKey(f *testing.F) {
	r := rand.New(rand.NewPCG(13, 14))
	for range 20 {
		f.Add(genJSON(r, nil, 0))
	}
	f.Fuzz(func(t *testing.T, data []byte) { jsonKeysAgree(t, data) })
}

// The JSON scan on BenchmarkDecodeCommand's JSON body: its share of decoding that body.
func BenchmarkJSONRepeatedKey(b *testing.B) {
	body := []byte(`{"type":"attack","dmg":12,"target":"boss"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := jsonRepeatedKey(body); ok {
			b.Fatal("repeat")
		}
	}
}
