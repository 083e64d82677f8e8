package linear

import (
	"testing"
	"time"
)

func at(ms int) time.Time { return time.Unix(0, int64(ms)*int64(time.Millisecond)) }

func TestCheckTellsLinearizableFromNot(t *testing.T) {
	attack := func(client, call, ret int, dmg, hp int64) Op {
		return Op{Instance: "d", Client: client, Call: at(call), Return: at(ret), OK: true, Damage: dmg, HP: hp}
	}
	cases := []struct {
		name string
		ops  []Op
		ok   bool
	}{
		{"sequential", []Op{attack(0, 0, 1, 60, 940), attack(0, 2, 3, 70, 870)}, true},
		{"concurrent, either order", []Op{attack(0, 0, 5, 60, 870), attack(1, 1, 4, 70, 930)}, true},
		{"lost acknowledged write", []Op{attack(0, 0, 1, 60, 940), attack(0, 2, 3, 70, 930)}, false},
		{"applied twice", []Op{attack(0, 0, 1, 60, 940), attack(0, 2, 3, 70, 810)}, false},
		{"unknown outcome applied", []Op{attack(0, 0, 1, 60, 940), {Instance: "d", Client: 1, Call: at(2)}, attack(0, 3, 4, 70, 815)}, true},
		{"unknown outcome not applied", []Op{attack(0, 0, 1, 60, 940), {Instance: "d", Client: 1, Call: at(2)}, attack(0, 3, 4, 70, 870)}, true},
		{"stale read", []Op{attack(0, 0, 1, 60, 940), {Instance: "d", Client: 1, Call: at(2), Return: at(3), OK: true, Status: true, HP: 1000}}, false},
		{"read", []Op{attack(0, 0, 1, 60, 940), {Instance: "d", Client: 1, Call: at(2), Return: at(3), OK: true, Status: true, HP: 940}}, true},
	}
	for _, tc := range cases {
		var h History
		for _, op := range tc.ops {
			h.Add(op)
		}
		res, err := h.Check(map[string]int64{"d": 1000}, 10*time.Second, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if ok := len(res.Failed) == 0 && len(res.Unknown) == 0; ok != tc.ok {
			t.Errorf("%s: linearizable = %v, want %v", tc.name, ok, tc.ok)
		}
		if !tc.ok && res.Visualization == "" {
			t.Errorf("%s: no visualisation written", tc.name)
		}
	}
}
