package shard_test

import (
	"encoding/json"
	"testing"

	"github.com/tickfence/tickfence/shard"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
)

// TestTooLargeAnswersOnlyTheOffender (issue 34.1): a write that would make the record too large
// holds, besides the command that grew it, a retransmission of a command the stored record
// already holds and an innocent command. Only the offender is answered too_large (undone, do not
// retry); the retransmission gets its first answer, and the innocent command is applied and
// answered ok. Before, every answer of the write was too_large: the retransmission's client would
// re-issue a command that was stored (applying it twice), and the innocent one was lost. The same
// through atomic batches.
func TestTooLargeAnswersOnlyTheOffender(t *testing.T) {
	for _, ws := range []shard.WriteStrategy{shard.WriteSingle, shard.WriteBatches} {
		t.Run(string(ws), func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, b backend) {
				st := b.open(t)
				n := newNode(t, st, "A", nodeOpt{checkpointEvery: 1 << 30, writeStrategy: ws})
				n.grant(6)
				id := idIn(6, 0)
				mustOK(t, n.send(id, "c", map[string]any{"type": "create", "kind": "counter"}), "create")
				first := n.send(id, "a1", map[string]any{"type": "add", "by": 1})
				mustOK(t, first, "a1")

				// A write in flight, held; what arrives meanwhile waits in the next write.
				frozen := n.freeze.arm(id)
				x := n.submit(id, "x", mustBody(t, map[string]any{"type": "add", "by": 100}))
				<-frozen
				dup := n.submit(id, "a1", mustBody(t, map[string]any{"type": "add", "by": 1}))
				inn := n.submit(id, "inn", mustBody(t, map[string]any{"type": "add", "by": 10}))
				big := n.submit(id, "big", mustBody(t, map[string]any{"type": "grow", "n": store.MaxBlobBytes}))
				n.ticked(4)
				n.freeze.release()

				mustOK(t, reply(t, x), "x (the held write)")
				r := reply(t, dup)
				mustOK(t, r, "a1 retransmitted beside an oversized command")
				if got, want := jsonOf(r.Result), jsonOf(first.Result); got != want {
					t.Errorf("a1 retransmitted: result %s, want its first %s", got, want)
				}
				mustOK(t, reply(t, inn), "an innocent add beside an oversized command")
				wantCode(t, reply(t, big), wire.CodeTooLarge, "the oversized command")
				if _, cs := load(t, st, id); cs.N != 111 || len(cs.Blob) != 0 {
					t.Fatalf("stored n = %d, blob %d bytes; want 111 (1 + 100 + 10) and no blob", cs.N, len(cs.Blob))
				}
				// Busy is a fair answer here (admission control after a 16 MiB state was made and
				// undone, as in TestTooLargeFirstWriteAfterPlaceholderReverts): retried, as a client does.
				mustOK(t, n.sendRetryingBusy(id, "a2", map[string]any{"type": "add", "by": 1}), "add after too_large")
			})
		})
	}
}

func reply(t *testing.T, ch <-chan []byte) wire.Reply {
	t.Helper()
	r, err := wire.DecodeReply(<-ch, false)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
