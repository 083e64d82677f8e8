package main

import (
	"fmt"
	"reflect"
	"testing"
	"time"
)

func TestFlagsBeforeOrAfterArguments(t *testing.T) {
	for _, args := range [][]string{
		{"--json", "--timeout", "3s", "instance", "send", "d1", "{}", "--request-id", "r1"},
		{"instance", "--request-id=r1", "send", "d1", "--json", "{}", "--timeout", "3s"},
		{"--request-id", "r1", "--json", "--timeout=3s", "instance", "send", "--", "d1", "{}"},
	} {
		p, err := parse(args)
		if err != nil {
			t.Fatal(err)
		}
		if !p.g.json || p.g.requestID != "r1" || p.g.timeout != 3*time.Second || !p.timeoutSet || p.v == nil ||
			p.v.path != "instance send" || !reflect.DeepEqual(p.args, []string{"d1", "{}"}) {
			t.Fatalf("parse(%q) = %+v", args, p)
		}
	}
	if _, err := parse([]string{"shards", "--nope"}); err == nil {
		t.Fatal("unknown flag accepted")
	}
}

// A large state's binary values are shown by their size, not as base64 (instance get).
func TestShortBinary(t *testing.T) {
	v := shortBinary(map[string]any{"terrain": make([]byte, 102400), "small": []byte{1, 2},
		"boss": map[string]any{"hp": int64(3), "map": make([]byte, 65)}, "list": []any{make([]byte, 100)}})
	got := fmt.Sprint(v)
	want := "map[boss:map[hp:3 map:(65 bytes)] list:[(100 bytes)] small:[1 2] terrain:(102400 bytes)]"
	if got != want {
		t.Fatalf("got %s\nwant %s", got, want)
	}
}
