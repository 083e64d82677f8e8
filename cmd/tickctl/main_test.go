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
