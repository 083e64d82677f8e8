package wire_test

import (
	"fmt"
	"testing"

	"github.com/tickfence/tickfence/shard/wire"
)

// A game's result that is zero or empty (0 points, false, "", an empty list or map) reaches the
// client as that value, in msgpack and in JSON; only no result at all (nil) is left out (issue
// 34: msgpack's omitempty dropped them all, so a client could not tell 0 from no answer).
func TestEmptyResultsAreKept(t *testing.T) {
	type named struct{ N int } // through the general encoder
	for _, v := range []any{0, int64(0), uint8(0), 0.0, "", false, []byte{}, []any{}, map[string]any{}, named{}} {
		b := wire.EncodeReply(wire.Reply{OK: true, Result: v})
		r, err := wire.DecodeReply(b, false)
		if err != nil {
			t.Fatal(err)
		}
		if r.Result == nil {
			t.Errorf("result %#v: decoded as nil", v)
		}
		j := wire.ForClient(b, true)
		rj, err := wire.DecodeReply(j, true)
		if err != nil {
			t.Fatal(err)
		}
		if rj.Result == nil {
			t.Errorf("result %#v: JSON %s has none", v, j)
		}
	}
	b := wire.EncodeReply(wire.Reply{OK: true})
	if r, err := wire.DecodeReply(b, false); err != nil || r.Result != nil || fmt.Sprint(wire.ForClient(b, true)) != fmt.Sprint([]byte(`{"ok":true}`)) {
		t.Fatalf("no result: %+v %v %s", r, err, wire.ForClient(b, true))
	}
}
