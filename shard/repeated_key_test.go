package shard_test

import (
	"bytes"
	"context"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tickfence/tickfence/shard"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
)

// Issue 33, item 4, over a real server: a command that repeats a key — {type: status, type: end}
// was an end (the last key won), so a gateway that filters on the first "type" was bypassed — is
// refused with bad_request in both encodings and both forms of the command, at the top of the map
// or nested in it, and the instance's stored record does not change: not ended, not added to.
func TestRepeatedKeyOverNATSChangesNothing(t *testing.T) {
	b := backends(t)[1]
	st := b.open(t)
	n := newNode(t, st, "A", nodeOpt{checkpointEvery: 1 << 30, commands: func(reg prometheus.Registerer) shard.Commands {
		return natscmd.NewServer(b.nc(t), testShards, reg)
	}})
	id := idIn(0, 0)
	n.grant(0)
	raw := b.nc(t)
	client := natscmd.NewClient(raw, testShards)
	ctx := context.Background()
	if r, err := client.SendMap(ctx, id, "c", map[string]any{"type": "create", "kind": "counter"}); err != nil || !r.OK {
		t.Fatalf("create: %+v, %v", r, err)
	}
	if r, err := client.SendMap(ctx, id, "a", map[string]any{"type": "add", "by": 5}); err != nil || !r.OK {
		t.Fatalf("add: %+v, %v", r, err)
	}
	stored := func() (store.Record, uint64) {
		rec, rev, err := st.Load(ctx, 1, 0, id)
		if err != nil {
			t.Fatal(err)
		}
		return rec, rev
	}
	var before store.Record
	var beforeRev uint64
	waitFor(t, "the add is stored and writes settle", func() bool {
		rec, rev := stored()
		time.Sleep(60 * time.Millisecond)
		_, again := stored()
		before, beforeRev = rec, rev
		return rev == again && hasRequest(rec, "a")
	})

	// fixmap headers, keys in the order given: not canonical, so the general path reads them.
	str := func(s string) []byte { return append([]byte{0xa0 | byte(len(s))}, s...) }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	cases := []struct {
		name, key string
		json      bool
		body      []byte
	}{
		{"msgpack {type: status, type: end}", "type", false, cat([]byte{0x82}, str("type"), str("status"), str("type"), str("end"))},
		{"msgpack {type: end, type: get}", "type", false, cat([]byte{0x82}, str("type"), str("end"), str("type"), str("get"))},
		{"msgpack by twice", "by", false, cat([]byte{0x83}, str("type"), str("add"), str("by"), []byte{0x01}, str("by"), []byte{0x7f})},
		{"msgpack nested", "b", false, cat([]byte{0x82}, str("type"), str("end"), str("a"), []byte{0x82}, str("b"), []byte{1}, str("b"), []byte{2})},
		{`JSON {"type":"status","type":"end"}`, "type", true, []byte(`{"type":"status","type":"end"}`)},
		{"JSON by twice", "by", true, []byte(`{"type":"add","by":1,"by":100}`)},
		{"JSON nested", "b", true, []byte(`{"type":"end","a":{"b":1,"b":2}}`)},
		{"JSON escaped", "type", true, []byte(`{"type":"get","\u0074ype":"end"}`)},
	}
	seq := 0
	for _, c := range cases {
		for _, session := range []bool{false, true} {
			seq++
			m := nats.NewMsg(wire.Subject(0, id))
			m.Data = c.body
			if session {
				m.Header.Set(wire.HeaderClient, "attacker")
				m.Header.Set(wire.HeaderSeq, strconv.Itoa(seq))
			} else {
				m.Header.Set(wire.HeaderRequestID, "dup-"+strconv.Itoa(seq))
			}
			if c.json {
				m.Header.Set(wire.HeaderContent, wire.ContentJSON)
			}
			resp, err := raw.RequestMsg(m, 5*time.Second)
			if err != nil {
				t.Fatalf("%s (session %v): %v", c.name, session, err)
			}
			r, err := wire.DecodeReply(resp.Data, c.json)
			if err != nil {
				t.Fatalf("%s (session %v): reply %q: %v", c.name, session, resp.Data, err)
			}
			if r.OK || r.Error.Code != wire.CodeBadRequest || !strings.Contains(r.Error.Message, `"`+c.key+`"`) {
				t.Errorf("%s (session %v): reply %+v (error %+v), want bad_request naming %q", c.name, session, r, r.Error, c.key)
			}
		}
	}
	n.ticked(5) // anything accepted would have been applied and written by now
	after, afterRev := stored()
	if afterRev != beforeRev || !reflect.DeepEqual(after, before) {
		t.Fatalf("stored record changed: revision %d → %d, %+v → %+v", beforeRev, afterRev, before, after)
	}
	if after.Ended {
		t.Fatal("the instance was ended")
	}

	// Keys differing only in case are not repeats: {type: add, by: 1, Type: end} is an add.
	m := nats.NewMsg(wire.Subject(0, id))
	m.Data = []byte(`{"type":"add","by":1,"Type":"end"}`)
	m.Header.Set(wire.HeaderRequestID, "case")
	m.Header.Set(wire.HeaderContent, wire.ContentJSON)
	resp, err := raw.RequestMsg(m, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if string(resp.Data) != `{"ok":true,"result":{"n":6}}` {
		t.Fatalf("add with a Type key: %s, want n 6", resp.Data)
	}
	if rec, cs := load(t, st, id); rec.Ended || cs.N != 6 {
		t.Fatalf("after the add: ended %v, n %d; want a live instance with n 6", rec.Ended, cs.N)
	}
}
