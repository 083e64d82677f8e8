package shard_test

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/internal/fnvcollide"
	"github.com/tickfence/tickfence/shard"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/memstore"
)

// sendSeqAs sends a numbered command as sender (an untrusted player unless sender.Trusted), as
// the transport would: its client ID filed under the sender's key.
func (n *node) sendSeqAs(sender *actor.Sender, id, client string, seq, ack uint64, cmd map[string]any) wire.Reply {
	n.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if r := n.sendSeqAsOnce(sender, id, client, seq, ack, cmd); !overloaded(r) || time.Now().After(deadline) {
			return r
		}
	}
}

func (n *node) sendSeqAsOnce(sender *actor.Sender, id, client string, seq, ack uint64, cmd map[string]any) wire.Reply {
	n.t.Helper()
	req, err := wire.DecodeCommand(wire.Subject(store.ShardOf(id, testShards), id),
		wire.Headers{Client: client, Seq: strconv.FormatUint(seq, 10), Ack: strconv.FormatUint(ack, 10)}, mustBody(n.t, cmd), testShards)
	if err != nil {
		n.t.Fatalf("bad test command: %v", err)
	}
	ch := make(chan []byte, 1)
	c := shard.Command{Request: req, Received: time.Now(), Reply: func(b []byte) { ch <- b }}
	if sender != nil {
		c.SetSender(*sender)
	}
	n.host.Submit(c)
	select {
	case b := <-ch:
		r, err := wire.DecodeReply(b, false)
		if err != nil {
			n.t.Fatal(err)
		}
		return r
	case <-time.After(10 * time.Second):
		n.t.Fatalf("no answer to %s/%d", client, seq)
	}
	return wire.Reply{}
}

// Review 34, end to end (see store's TestR34HashCollisionForgetsAnotherClientsCommands): a player
// picks a client ID whose ClientHash is a trusted client's, gets its own session let go of with
// ack 2^62-1 (five client IDs of its own, one command each), and the trusted client's next
// command is answered answer_forgotten ("applied, never applied again") while the counter never
// moves. A gateway trusting answer_forgotten (README: "applied") is lied to; the command is lost.
func TestR34PlayerMakesTrustedClientsCommandsForgotten(t *testing.T) {
	n, id := withInstance(t, memstore.New(), "counter", nodeOpt{})
	victim := "go-5f0c2a9e81d3b476"
	mallory := actor.Sender{Name: "mallory", Player: "mallory"}
	prefix := shard.SenderKey(mallory) + " "
	// Fixed: ClientHash is 8 bytes of SHA-256; the attack's FNV-1a preimage collides no more.
	suffix, ok := fnvcollide.Preimage(prefix, fnv64a(victim))
	if !ok || len(suffix) > wire.MaxRequestID {
		t.Fatal("no preimage")
	}
	t.Logf("player mallory's client ID %q has the FNV-1a hash of %q", suffix, victim)

	mustOK(t, n.sendSeqAs(nil, id, victim, 1, 0, map[string]any{"type": "add", "by": 1}), "victim's add 1")
	const big = uint64(1) << 62
	mustOK(t, n.sendSeqAs(&mallory, id, suffix, big, big-1, map[string]any{"type": "add", "by": 0}), "mallory's colliding client")
	for i := range store.MaxSenderSessions {
		n.sendSeqAs(&mallory, id, "own-"+strconv.Itoa(i), 1, 0, map[string]any{"type": "add", "by": 0}) // ok, or rate_limited (its sessions not silent yet)
	}
	r := n.sendSeqAs(nil, id, victim, 2, 1, map[string]any{"type": "add", "by": 1})
	got := n.send(id, "get-1", map[string]any{"type": "get"})
	if !r.OK {
		t.Errorf("the trusted client's add 2 (never sent before): %+v; the counter is %v (want 2: it was never applied)", r.Error, got.Result)
	}
}

// Review 34: a new client's command that makes the record too large is the one whose session let
// another go; the write is refused and the instance reverted, so the let-go is undone too: the
// other client's retransmission gets its first answer (not answer_forgotten), and nothing is
// applied twice.
func TestR34TooLargeAfterLetGoIsUndone(t *testing.T) {
	n, id := withInstance(t, memstore.New(), "counter", nodeOpt{})
	first := make([]wire.Reply, store.MaxClientSessions)
	for i := range store.MaxClientSessions {
		first[i] = n.sendSeqAs(nil, id, "old-"+strconv.Itoa(i), 1, 0, map[string]any{"type": "add", "by": 1})
		mustOK(t, first[i], "old client")
	}
	r := n.sendSeqAs(nil, id, "big", 1, 0, map[string]any{"type": "grow", "n": store.MaxBlobBytes})
	for deadline := time.Now().Add(10 * time.Second); !r.OK && r.Error.Code == wire.CodeBusy && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond) // until the old sessions are silent long enough to be let go of (store.GoneSilence)
		r = n.sendSeqAs(nil, id, "big", 1, 0, map[string]any{"type": "grow", "n": store.MaxBlobBytes})
	}
	wantCode(t, r, wire.CodeTooLarge, "a new client's grow past the record's limit")
	again := n.sendSeqAs(nil, id, "old-0", 1, 0, map[string]any{"type": "add", "by": 1})
	// The refused write's let-go was undone with it; but the refusal is then remembered as big's
	// answer (TestTooLargeIsRememberedAsTheFirstAnswer), in a session of its own that lets old-0
	// go for real: its first answer or answer_forgotten, never applied again.
	if (!again.OK || !resultsEqual(again.Result, first[0].Result)) && (again.OK || again.Error.Code != wire.CodeAnswerForgotten) {
		t.Errorf("old-0's add again after the too_large: ok=%v %v %+v, want its first answer %v or answer_forgotten", again.OK, again.Result, again.Error, first[0].Result)
	}
	if got := n.send(id, "get-1", map[string]any{"type": "get"}); !resultsEqual(got.Result, map[string]any{"n": int64(store.MaxClientSessions)}) {
		t.Errorf("counter %v, want %d", got.Result, store.MaxClientSessions)
	}
}

func resultsEqual(a, b any) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

func fnv64a(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// Review 34: sessions let go of under refused writes (20 %, reverts) and every write's record
// encoded twice off the tick path: 150 clients (more than MaxClientSessions), each 1–3 pipelined
// adds and never an acknowledgement, then each retransmits everything. Every retransmission gets
// its first answer or answer_forgotten; the counter is the number of adds; no record handed to
// the store changes.
func TestR34LetGoUnderRevertsAndConcurrentEncoding(t *testing.T) {
	st := &slowRefusingStore{Store: memstore.New(), rng: rand.New(rand.NewPCG(34, 4)), refuse: 20}
	n := newNode(t, st, "A", nodeOpt{})
	id := idIn(1, 0)
	n.grant(1)
	mustOK(t, n.sendSeq(id, "boot", 1, 0, map[string]any{"type": "create", "kind": "counter"}), "create")
	add := mustBody(t, map[string]any{"type": "add", "by": 1})
	const clients = 150
	until := func(client string, seq uint64) wire.Reply {
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			r := <-n.submitSeq(id, client, seq, 0, add)
			if r.OK || r.Error.Code != wire.CodeRetry && r.Error.Code != wire.CodeBusy && r.Error.Code != wire.CodeUnknownOutcome {
				return r
			}
		}
		t.Errorf("%s/%d: no final answer", client, seq)
		return wire.Reply{}
	}
	first := make([]map[uint64]string, clients)
	total := 0
	var mu sync.Mutex
	var wg sync.WaitGroup
	for ci := range clients {
		k := 1 + ci%3
		total += k
		first[ci] = map[uint64]string{}
		wg.Go(func() {
			var inner sync.WaitGroup
			for s := range uint64(k) {
				inner.Go(func() {
					r := until("c"+strconv.Itoa(ci), s+1)
					mu.Lock()
					defer mu.Unlock()
					if !r.OK {
						t.Errorf("c%d/%d: %+v", ci, s+1, r.Error)
						return
					}
					first[ci][s+1] = fmt.Sprint(r.Result)
				})
			}
			inner.Wait()
		})
		if ci%8 == 7 {
			wg.Wait()
		}
	}
	wg.Wait()
	forgotten := 0
	for ci := range clients {
		for s, f := range first[ci] {
			r := until("c"+strconv.Itoa(ci), s)
			switch {
			case r.OK && fmt.Sprint(r.Result) == f:
			case !r.OK && r.Error != nil && r.Error.Code == wire.CodeAnswerForgotten:
				forgotten++
			default:
				t.Errorf("c%d/%d again: ok=%v %v %+v, first %s", ci, s, r.OK, r.Result, r.Error, f)
			}
		}
	}
	var r wire.Reply
	for r = n.send(id, "final-get", map[string]any{"type": "get"}); !r.OK; r = n.send(id, "final-get", map[string]any{"type": "get"}) {
		time.Sleep(10 * time.Millisecond)
	}
	if got, want := fmt.Sprint(r.Result), fmt.Sprintf("map[n:%d]", total); got != want {
		t.Errorf("counter %s, want n=%d", got, total)
	}
	t.Logf("writes %d, refused %d, %d answer_forgotten", st.writes.Load(), st.refused.Load(), forgotten)
	if c := st.changed.Load(); c > 0 {
		t.Errorf("%d records changed while the store encoded them", c)
	}
}
