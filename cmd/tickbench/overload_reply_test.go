package main

import (
	"math"
	"testing"

	"github.com/tickfence/tickfence/internal/proc"
	"github.com/tickfence/tickfence/shard/wire"
)

// attackDamage reads what decoding the whole answer reads, for every integer width, key order
// and extra field; anything else is refused, not misread.
func TestAttackDamageAgreesWithDecodeReply(t *testing.T) {
	for _, dmg := range []int64{0, 1, 127, 128, 255, 256, 65535, 65536, math.MaxUint32, math.MaxUint32 + 1, math.MaxInt64, -1, -32, -33, -129, math.MinInt64} {
		for _, res := range []any{
			map[string]any{"damage": dmg, "hp": int64(5), "phase": "two"},
			map[string]any{"a": []any{1, "x", map[string]any{"damage": 7}}, "damage": dmg},
		} {
			body, err := wire.Canonical(wire.Reply{OK: true, Result: res})
			if err != nil {
				t.Fatal(err)
			}
			r, err := wire.DecodeReply(body, false)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := proc.Int64(r.Result.(map[string]any)["damage"])
			if got, ok := attackDamage(body); !ok || got != want || got != dmg {
				t.Errorf("damage %d: attackDamage = %d, %v; DecodeReply %d (body %x)", dmg, got, ok, want, body)
			}
		}
	}
	for _, v := range []any{
		wire.Reply{OK: true, Result: map[string]any{"hp": 3}},
		wire.Reply{OK: true, Result: "no map"},
		wire.Reply{OK: true, Result: map[string]any{"damage": "ten"}},
		wire.Reply{OK: true, Result: map[string]any{"damage": 1.5}},
		wire.Reply{OK: false, Error: &wire.Error{Code: wire.CodeBusy, Message: "busy"}},
	} {
		body, err := wire.Canonical(v)
		if err != nil {
			t.Fatal(err)
		}
		if d, ok := attackDamage(body); ok {
			t.Errorf("%+v: read damage %d", v, d)
		}
	}
	body, _ := wire.Canonical(wire.Reply{OK: true, Result: map[string]any{"damage": 300}})
	for i := range body {
		if d, ok := attackDamage(body[:i]); ok {
			t.Errorf("truncated to %d bytes: read damage %d", i, d)
		}
	}
}
