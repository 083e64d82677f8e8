package tickfence_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/tickfence/tickfence"
	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/natskv"
)

// TestManyClientsOneInstance (issue 34.4): 10 000 distinct clients (one natscmd.Client each, as
// a gateway restarted 10 000 times or a raid with a client per player) send one command each to
// one instance, 64 at a time. Every one is answered ok: a client acknowledges its last answer by
// itself (an acknowledgement alone) once it has nothing in flight, so its session holds nothing
// and gives its place to the next client. Before, each session kept its one answer until its
// client's next command, and the 65th client was refused busy until a session expired (5 min).
// The record keeps at most store.MaxClientSessions sessions, and every attack applied once.
func TestManyClientsOneInstance(t *testing.T) {
	n := 10_000
	if testing.Short() {
		n = 1_000
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	node, err := tickfence.Start(ctx, tickfence.Options{Kinds: []actor.Kind{tallyKind{}}, NodeID: "n1", DataDir: t.TempDir(), Shards: 4, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	nc, err := nats.Connect(node.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	admin := natscmd.NewClient(nc, 4)
	if r, err := admin.SendMap(ctx, "raid", "create", map[string]any{"type": "create", "kind": "tally"}); err != nil || !r.OK {
		t.Fatalf("create: %+v %v", r, err)
	}
	var busyAfterRetries, failed atomic.Int64
	var wg sync.WaitGroup
	work := make(chan int)
	for range 64 {
		wg.Go(func() {
			for i := range work {
				c := natscmd.NewClient(nc, 4) // a client of its own: a new client ID
				c.GiveUp = time.Minute
				r, err := c.SendMap(ctx, "raid", "", map[string]any{"type": "add", "from": fmt.Sprintf("c%d", i)})
				switch {
				case err != nil:
					failed.Add(1)
					if failed.Load() <= 3 {
						t.Errorf("client %d: %v", i, err)
					}
				case !r.OK && r.Error.Code == "busy":
					busyAfterRetries.Add(1)
				case !r.OK:
					failed.Add(1)
					if failed.Load() <= 3 {
						t.Errorf("client %d: %+v", i, r.Error)
					}
				}
			}
		})
	}
	start := time.Now()
	for i := range n {
		work <- i
		if i > 0 && i%2000 == 0 {
			t.Logf("%d clients answered in %v", i, time.Since(start).Round(time.Millisecond))
		}
	}
	close(work)
	wg.Wait()
	t.Logf("%d clients, one command each, in %v", n, time.Since(start).Round(time.Millisecond))
	if failed.Load() > 0 || busyAfterRetries.Load() > 0 {
		t.Fatalf("%d clients failed, %d still busy", failed.Load(), busyAfterRetries.Load())
	}
	// The record: at most MaxClientSessions sessions; every add applied once.
	snc, err := natskv.Connect(node.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer snc.Close()
	st, err := natskv.Open(snc, natskv.Options{OpenOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cl, err := st.Cluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rec, _, err := st.Load(ctx, cl.Epoch, store.ShardOf("raid", 4), "raid")
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Clients) > store.MaxClientSessions {
		t.Errorf("the record keeps %d client sessions, want at most %d", len(rec.Clients), store.MaxClientSessions)
	}
	var tl tally
	if err := msgpack.Unmarshal(rec.State, &tl); err != nil {
		t.Fatal(err)
	}
	if tl.N != int64(n) {
		t.Errorf("the tally is %d, want %d: adds applied twice or lost", tl.N, n)
	}
	t.Logf("record %d bytes (approx), %d sessions, tally %d", rec.ApproxSize(), len(rec.Clients), tl.N)
}

// tally counts its adds.
type tallyKind struct{}

func (tallyKind) Name() string { return "tally" }
func (tallyKind) New(string, actor.Command) (actor.Logic, error) {
	return &tally{}, nil
}
func (tallyKind) Restore(_ string, b []byte) (actor.Logic, error) {
	t := &tally{}
	return t, msgpack.Unmarshal(b, t)
}

type tally struct {
	N int64 `msgpack:"n"`
}

func (t *tally) Tick(uint64) {}
func (t *tally) Handle(_ uint64, c actor.Command) (any, error) {
	if c.Type == "get" {
		return map[string]any{"n": t.N}, nil
	}
	if c.Type != "add" {
		return nil, actor.Reject("unknown %q", c.Type)
	}
	t.N++
	return map[string]any{"n": t.N}, nil
}
func (t *tally) MarshalState() ([]byte, error) { return msgpack.Marshal(t) }

// TestVanishedClientsLockNoOneOut (issue 34.4, what the nemesis still found): clients that send
// one command and vanish without acknowledging its answer (a gateway that crashed, an
// acknowledgement lost with the instance that held it) hold their sessions' answers.
// store.MaxClientSessions+store.MaxGoneSessions (192) of them come one after another: every one is
// answered ok, after at most about 2 s of busy (store.GoneSilence), because the least recently
// seen such session is let go of for the next client once it was silent that long. Those let go of, retransmitting, are answered answer_forgotten (applied, never
// applied again); those still held get their first answer; the tally is exactly 192. Before, the
// 65th client was refused busy for 5 minutes. The bound: the next silent client within the
// sessions' TTL is refused busy (an acknowledging client is not: TestManyClientsOneInstance).
func TestVanishedClientsLockNoOneOut(t *testing.T) {
	const n = store.MaxClientSessions + store.MaxGoneSessions
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node, err := tickfence.Start(ctx, tickfence.Options{Kinds: []actor.Kind{tallyKind{}}, NodeID: "n1", DataDir: t.TempDir(), Shards: 4, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	nc, err := nats.Connect(node.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	admin := natscmd.NewClient(nc, 4)
	if r, err := admin.SendMap(ctx, "raid", "create", map[string]any{"type": "create", "kind": "tally"}); err != nil || !r.OK {
		t.Fatalf("create: %+v %v", r, err)
	}
	body, err := msgpack.Marshal(map[string]any{"type": "add"})
	if err != nil {
		t.Fatal(err)
	}
	subject := wire.Subject(store.ShardOf("raid", 4), "raid")
	send := func(client int, busyToo bool) wire.Reply {
		m := nats.NewMsg(subject)
		m.Data = body
		m.Header.Set(wire.HeaderClient, fmt.Sprintf("vanishing-%d", client))
		m.Header.Set(wire.HeaderSeq, "1")
		m.Header.Set(wire.HeaderAck, "0")
		for {
			resp, err := nc.RequestMsgWithContext(ctx, m)
			if err != nil {
				t.Errorf("client %d: %v", client, err)
				return wire.Reply{Error: &wire.Error{Code: "transport"}}
			}
			r, err := wire.DecodeReply(resp.Data, false)
			if err != nil {
				t.Error(err)
				return wire.Reply{Error: &wire.Error{Code: "undecodable"}}
			}
			if !r.OK && (r.Error.Code == wire.CodeRetry || r.Error.Code == wire.CodeUnknownOutcome || busyToo && r.Error.Code == wire.CodeBusy) {
				// busy: every session is held and none silent for store.GoneSilence yet
				time.Sleep(10 * time.Millisecond) // an answer that invites the same request again
				continue
			}
			return r
		}
	}
	first := make([]any, n)
	var wg sync.WaitGroup
	for w := range 8 { // 8 at a time
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				r := send(i, true)
				if !r.OK {
					t.Errorf("client %d of %d, the earlier ones silent: %+v, want ok", i, n, r.Error)
					return
				}
				first[i] = r.Result
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if r := send(n, false); r.OK || r.Error.Code != wire.CodeBusy {
		t.Fatalf("client %d, with %d sessions let go of within their TTL: ok=%v %+v, want busy (the bound)", n, store.MaxGoneSessions, r.OK, r.Error)
	}
	again := make([]wire.Reply, n)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				again[i] = send(i, false) // the same command again: it lost the answer, as far as it knows
			}
		})
	}
	wg.Wait()
	forgotten, kept := 0, 0
	for i, r := range again {
		switch {
		case r.OK && fmt.Sprint(r.Result) == fmt.Sprint(first[i]):
			kept++
		case !r.OK && r.Error.Code == wire.CodeAnswerForgotten:
			forgotten++
		default:
			t.Fatalf("client %d's command again: ok=%v result %v error %+v; want its first answer %v or answer_forgotten", i, r.OK, r.Result, r.Error, first[i])
		}
	}
	if kept < store.MaxClientSessions-1 || forgotten == 0 {
		t.Errorf("%d first answers kept, %d forgotten: want at least %d kept (the sessions held) and some forgotten", kept, forgotten, store.MaxClientSessions-1)
	}
	r, err := admin.SendMap(ctx, "raid", "get-1", map[string]any{"type": "get"}) // an opaque ID: no session
	if err != nil || !r.OK {
		t.Fatalf("get: %+v %v", r, err)
	}
	if fmt.Sprint(r.Result) != fmt.Sprint(map[string]any{"n": n}) {
		t.Fatalf("the tally is %v, want %d: adds applied twice or lost", r.Result, n)
	}
	t.Logf("%d silent clients all answered ok; again: %d first answers, %d answer_forgotten; tally %v", n, kept, forgotten, r.Result)
}
