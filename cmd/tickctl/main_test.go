package main

import (
	"reflect"
	"testing"
	"time"
)

func TestFlagsBeforeOrAfterArguments(t *testing.T) {
	for _, args := range [][]string{
		{"--json", "--timeout", "3s", "instance", "send", "d1", "{}", "--request-id", "r1"},
		{"instance", "--request-id=r1", "send", "d1", "--json", "{}", "--timeout", "3s"},
	} {
		g, pos, err := parse(args)
		if err != nil {
			t.Fatal(err)
		}
		if !g.json || g.requestID != "r1" || g.timeout != 3*time.Second || !reflect.DeepEqual(pos, []string{"instance", "send", "d1", "{}"}) {
			t.Fatalf("parse(%q) = %+v %q", args, g, pos)
		}
	}
	if _, _, err := parse([]string{"shards", "--nope"}); err == nil {
		t.Fatal("unknown flag accepted")
	}
}
