package natscmd

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/natskv"
)

// Every way out of Exec forgets its tokens.
func TestExecLeavesNoTokenBehind(t *testing.T) {
	leavesNoTokenBehind(t, func(c *Client, ctx context.Context, id string, body []byte) {
		_, _, _ = c.Exec(ctx, id, "", body, false)
	})
}

// And of Go, which also calls done once for every command.
func TestGoLeavesNoTokenBehind(t *testing.T) {
	leavesNoTokenBehind(t, func(c *Client, ctx context.Context, id string, body []byte) {
		var calls sync.WaitGroup
		calls.Add(1)
		var n atomic.Int32
		c.Go(ctx, id, "", body, false, func([]byte, wire.Status, error) {
			if n.Add(1) == 1 {
				calls.Done()
			} else {
				t.Errorf("done called %d times for one command to %s", n.Load(), id)
			}
		})
		calls.Wait()
	})
}

func leavesNoTokenBehind(t *testing.T, send func(c *Client, ctx context.Context, id string, body []byte)) {
	srv, err := natsserver.Start(natsserver.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	conn := func() *nats.Conn {
		nc, err := natskv.Connect("", srv.ConnectOption())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	cnc, onc := conn(), conn()
	const shards = 8
	busy := wire.EncodeReply(wire.Reply{Error: wire.Errorf(wire.CodeBusy, "b")})
	n := 0
	var mu sync.Mutex
	for _, id := range []string{"silent", "busy", "late", "mixed"} {
		_, err := onc.Subscribe(wire.Subject(store.ShardOf(id, shards), id), func(m *nats.Msg) {
			mu.Lock()
			n++
			k := n
			mu.Unlock()
			switch id {
			case "busy":
				_ = m.Respond(busy)
			case "late":
				time.AfterFunc(30*time.Millisecond, func() { _ = m.Respond(busy) })
			case "mixed":
				if k%3 == 0 {
					_ = m.Respond(busy)
				}
			}
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	_ = onc.Flush()
	c := NewClient(cnc, shards)
	c.Attempt = 20 * time.Millisecond
	c.GiveUp = 150 * time.Millisecond
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			id := []string{"silent", "busy", "late", "mixed", "nobody"}[i%5]
			ctx := context.Background()
			if i%7 == 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, time.Duration(i%50)*time.Millisecond)
				defer cancel()
			}
			body := attackBody
			if i%11 == 0 {
				body = make([]byte, cnc.MaxPayload()+1)
			}
			send(c, ctx, id, body)
		})
	}
	wg.Wait()
	time.Sleep(100 * time.Millisecond)
	left := 0
	for i := range c.replies.tabs {
		tb := &c.replies.tabs[i]
		tb.mu.Lock()
		left += len(tb.waiting)
		tb.mu.Unlock()
	}
	inst := 0
	for i := range c.stripes {
		st := &c.stripes[i]
		st.mu.Lock()
		inst += len(st.inst)
		st.mu.Unlock()
	}
	c.replies.out.Lock()
	q := len(c.replies.queued)
	c.replies.out.Unlock()
	t.Logf("%d tokens, %d windows, %d queued left", left, inst, q)
	if left != 0 || inst != 0 || q != 0 {
		t.Fatal("state left behind")
	}
}

var attackBody = func() []byte { b, _ := wire.Canonical(map[string]any{"type": "attack"}); return b }()
