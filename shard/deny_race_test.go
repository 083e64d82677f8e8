package shard_test

import (
	"fmt"
	"testing"

	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store/memstore"
)

// A get racing the create of its instance: unknown_instance or ok, never not_owner; and once the
// create is answered, a get finds it. The same for a get racing an end then a re-create.
func TestGetRacingCreateIsUnknownOrOK(t *testing.T) {
	mem := memstore.New()
	n := newNode(t, mem, "n1", nodeOpt{})
	const s = 1
	n.grant(s)
	codes := map[string]int{}
	for k := 0; k < 50; k++ {
		id := idIn(s, 1000+k)
		gch := n.submit(id, fmt.Sprintf("g%d", k), mustBody(t, map[string]any{"type": "get"}))
		cch := n.submit(id, fmt.Sprintf("c%d", k), mustBody(t, map[string]any{"type": "create", "kind": "counter"}))
		gr, _ := wire.DecodeReply(<-gch, false)
		cr, _ := wire.DecodeReply(<-cch, false)
		code := "ok"
		if !gr.OK {
			code = gr.Error.Code
		}
		codes[code]++
		if !cr.OK {
			t.Fatalf("create %s: %v", id, cr.Error)
		}
		if code == wire.CodeNotOwner {
			t.Errorf("get of %s racing its create: not_owner (%s)", id, gr.Error)
		}
		mustOK(t, n.send(id, fmt.Sprintf("h%d", k), map[string]any{"type": "get"}), "get after create")
		// end it, then a get and a re-create race against the tombstone
		mustOK(t, n.send(id, fmt.Sprintf("e%d", k), map[string]any{"type": "end"}), "end")
		gch = n.submit(id, fmt.Sprintf("g2-%d", k), mustBody(t, map[string]any{"type": "get"}))
		cch = n.submit(id, fmt.Sprintf("c2-%d", k), mustBody(t, map[string]any{"type": "create", "kind": "counter"}))
		gr, _ = wire.DecodeReply(<-gch, false)
		cr, _ = wire.DecodeReply(<-cch, false)
		if !cr.OK {
			t.Fatalf("re-create %s: %v", id, cr.Error)
		}
		if !gr.OK && gr.Error.Code != wire.CodeUnknownInstance {
			t.Errorf("get of %s racing its re-create: %s", id, gr.Error)
		}
		mustOK(t, n.send(id, fmt.Sprintf("h2-%d", k), map[string]any{"type": "get"}), "get after re-create")
	}
	t.Logf("first gets: %v", codes)
}
