package shard_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tickfence/tickfence/shard"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/memstore"
)

// slowRefusingStore encodes every async write's record twice, off the tick path and some time
// apart (so the tick worker goes on remembering into the live record meanwhile), reports any
// difference, and refuses a share of the writes outright (the instance reverts to its
// acknowledged record, capped).
type slowRefusingStore struct {
	store.Store
	mu      sync.Mutex
	rng     *rand.Rand
	refuse  int // percent
	changed atomic.Int64
	writes  atomic.Int64
	refused atomic.Int64
}

func (s *slowRefusingStore) roll() (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Duration(s.rng.IntN(50)) * time.Millisecond, s.rng.IntN(100) < s.refuse
}

func (s *slowRefusingStore) WriteAsync(g store.Grant, id string, rec store.Record, done func(uint64, error)) {
	go func() {
		b1, err1 := store.EncodeRecord(rec)
		d, refuse := s.roll()
		time.Sleep(d)
		b2, err2 := store.EncodeRecord(rec)
		if err1 != nil || err2 != nil || !bytes.Equal(b1, b2) {
			s.changed.Add(1)
		}
		s.writes.Add(1)
		if refuse {
			s.refused.Add(1)
			done(0, fmt.Errorf("test: %w", store.ErrRefused))
			return
		}
		done(s.Store.Write(context.Background(), g, id, rec))
	}()
}

func (n *node) submitSeq(id, client string, seq, ack uint64, body []byte) <-chan wire.Reply {
	req, err := wire.DecodeCommand(wire.Subject(store.ShardOf(id, testShards), id),
		wire.Headers{Client: client, Seq: strconv.FormatUint(seq, 10), Ack: strconv.FormatUint(ack, 10)}, body, testShards)
	if err != nil {
		n.t.Fatalf("bad test command: %v", err)
	}
	ch := make(chan wire.Reply, 1)
	n.host.Submit(shard.Command{Request: req, Received: time.Now(), Reply: func(b []byte) {
		r, err := wire.DecodeReply(b, false)
		if err != nil {
			panic(err)
		}
		ch <- r
	}})
	return ch
}

// (From a review of appending session answers in place.) Many clients, each with several numbered commands in flight arriving out of order, acks that
// drop answers, retransmissions of answered commands, refused writes (reverts), and every write's
// record encoded twice off the tick path: every command is applied exactly once, every
// retransmission gets its first answer, and no record handed to the store changes.
func TestSessionAnswersInPlaceUnderRevertsAndConcurrentEncoding(t *testing.T) {
	st := &slowRefusingStore{Store: memstore.New(), rng: rand.New(rand.NewPCG(7, 9)), refuse: 20}
	n := newNode(t, st, "A", nodeOpt{})
	id := idIn(1, 0)
	n.grant(1)
	mustOK(t, n.sendSeq(id, "boot", 1, 0, map[string]any{"type": "create", "kind": "counter"}), "create")

	const clients, perClient = 6, 300
	add := mustBody(t, map[string]any{"type": "add", "by": 1})
	var wg sync.WaitGroup
	var bad atomic.Int64
	var dups atomic.Int64
	for ci := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(ci), 42))
			client := "gw" + strconv.Itoa(ci)
			first := map[uint64]string{} // seq -> first ok answer
			next, ack := uint64(1), uint64(0)
			for next <= perClient {
				k := uint64(1 + rng.IntN(12))
				if next+k-1 > perClient {
					k = perClient - next + 1
				}
				if next+k-1-ack >= store.MaxClientInFlight {
					k = store.MaxClientInFlight - 1 - (next - 1 - ack)
				}
				seqs := make([]uint64, 0, k)
				for s := next; s < next+k; s++ {
					seqs = append(seqs, s)
				}
				rng.Shuffle(len(seqs), func(i, j int) { seqs[i], seqs[j] = seqs[j], seqs[i] })
				// Retransmit some answered, unacknowledged seqs too.
				var re []uint64
				for s := ack + 1; s < next; s++ {
					if rng.IntN(6) == 0 {
						re = append(re, s)
					}
				}
				pending := map[uint64]bool{}
				for _, s := range seqs {
					pending[s] = true
				}
				for len(pending) > 0 || len(re) > 0 {
					type sent struct {
						seq uint64
						ch  <-chan wire.Reply
					}
					var out []sent
					for _, s := range seqs {
						if pending[s] {
							out = append(out, sent{s, n.submitSeq(id, client, s, ack, add)})
						}
					}
					for _, s := range re {
						out = append(out, sent{s, n.submitSeq(id, client, s, ack, add)})
					}
					re = nil
					for _, o := range out {
						var r wire.Reply
						select {
						case r = <-o.ch:
						case <-time.After(20 * time.Second):
							bad.Add(1)
							t.Errorf("%s/%d: no answer", client, o.seq)
							return
						}
						got := fmt.Sprint(r.Result)
						switch {
						case r.OK && pending[o.seq]:
							delete(pending, o.seq)
							first[o.seq] = got
						case r.OK:
							dups.Add(1)
							if f, ok := first[o.seq]; !ok || f != got {
								bad.Add(1)
								t.Errorf("%s/%d: retransmission answered %s, first answer %q", client, o.seq, got, f)
							}
						case r.Error != nil && (r.Error.Code == wire.CodeRetry || r.Error.Code == wire.CodeBusy || r.Error.Code == wire.CodeUnknownOutcome):
							// resend (pending ones go again; a retransmission need not)
						default:
							bad.Add(1)
							t.Errorf("%s/%d: unexpected answer %+v %v", client, o.seq, r.Error, r.Result)
						}
					}
				}
				next += k
				// Acknowledge a random prefix of what is answered (sometimes all of it).
				if rng.IntN(3) == 0 {
					ack = next - 1
				} else {
					ack += uint64(rng.IntN(int(next - ack)))
				}
			}
		}()
	}
	wg.Wait()
	if bad.Load() > 0 {
		t.FailNow()
	}
	var r wire.Reply
	for {
		r = n.send(id, "final-get", map[string]any{"type": "get"})
		if r.OK {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	got := fmt.Sprint(r.Result)
	if want := fmt.Sprintf("map[n:%d]", clients*perClient); got != want {
		t.Errorf("counter = %s, want n=%d (exactly once)", got, clients*perClient)
	}
	t.Logf("writes %d, refused %d, retransmissions answered %d", st.writes.Load(), st.refused.Load(), dups.Load())
	if c := st.changed.Load(); c > 0 {
		t.Errorf("%d records changed while the store encoded them", c)
	}
}
