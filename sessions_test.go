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
	if c.Type != "add" {
		return nil, actor.Reject("unknown %q", c.Type)
	}
	t.N++
	return map[string]any{"n": t.N}, nil
}
func (t *tally) MarshalState() ([]byte, error) { return msgpack.Marshal(t) }
