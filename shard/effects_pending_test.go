package shard_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tickfence/tickfence/store/memstore"
)

// TestEffectsPendingGauge: tickfence_effects_pending (the dashboard's effects backlog) counts the
// effects stored in records and not acknowledged by the effects stream: two while the stream is
// down, none once it is back and has taken them.
func TestEffectsPendingGauge(t *testing.T) {
	pub := newSink()
	pub.fail(true)
	n := effectsNode(t, memstore.New(), "n1", pub)
	const s = 2
	n.grant(s)
	id := idIn(s, 3)
	mustOK(t, n.send(id, "c1", map[string]any{"type": "create", "kind": "emitter"}), "create")
	if got := testutil.ToFloat64(n.metrics.EffectsPending); got != 0 {
		t.Fatalf("no effect yet: tickfence_effects_pending = %v", got)
	}
	mustOK(t, n.send(id, "e1", map[string]any{"type": "emit", "what": "gold"}), "emit 1") // answered once stored
	mustOK(t, n.send(id, "e2", map[string]any{"type": "emit", "what": "a sword"}), "emit 2")
	if got := testutil.ToFloat64(n.metrics.EffectsPending); got != 2 {
		t.Fatalf("two effects stored, the stream down: tickfence_effects_pending = %v; want 2", got)
	}
	pub.fail(false)
	waitFor(t, "both effects published", func() bool { return len(pub.keys()) == 2 })
	waitFor(t, "tickfence_effects_pending back to 0", func() bool { return testutil.ToFloat64(n.metrics.EffectsPending) == 0 })
}
