package shard_test

import (
	"testing"

	"github.com/tickfence/tickfence/shard/wire"
)

// A create whose initial write the store refused outright is answered retry ("the command had no
// effect"). Retransmitting it must apply once and answer created (not already_exists).
func TestCreateRefusedInitialWriteRetransmitted(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		st := &refusing{Store: b.open(t)}
		n := newNode(t, st, "n1", nodeOpt{})
		const s = 6
		n.grant(s)
		id := idIn(s, 21)
		st.arm(id)
		r := n.send(id, "c1", map[string]any{"type": "create", "kind": "counter"})
		wantCode(t, r, wire.CodeRetry, "create whose initial write was refused")
		mustOK(t, sendRetrying(n, id, "c1", map[string]any{"type": "create", "kind": "counter"}), "create retransmitted")
		mustOK(t, n.send(id, "a1", map[string]any{"type": "add", "by": 1}), "add")
	})
}

// The same refusal, but the client does not retransmit: the instance is then unknown to its
// owner (a definite unknown_instance), yet its placeholder is in the store, and the next owner
// brings it to life — a create answered retry takes effect later, after unknown_instance was said.
func TestRefusedCreateLeavesNoUnservedPlaceholder(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		st := &refusing{Store: b.open(t)}
		n := newNode(t, st, "n1", nodeOpt{})
		const s = 6
		n.grant(s)
		id := idIn(s, 22)
		st.arm(id)
		wantCode(t, n.send(id, "c1", map[string]any{"type": "create", "kind": "counter"}), wire.CodeRetry, "create")
		g1 := n.send(id, "g1", map[string]any{"type": "get"})
		n2 := newNode(t, st, "n2", nodeOpt{})
		n2.grant(s)
		g2 := n2.send(id, "g2", map[string]any{"type": "get"})
		if !g1.OK && g1.Error.Code == wire.CodeUnknownInstance && g2.OK {
			t.Fatalf("after a refused create: owner n1 answered get %v (definite), then owner n2 answered %v: the instance exists after all", g1.Error, g2.Result)
		}
	})
}
