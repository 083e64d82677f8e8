package natscmd_test

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/shard"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/natskv"
)

// TestCommandsQueuedTooLongAreRefused: a node handles commands more slowly than they arrive (here a
// handler taking 4 ms, 250/s, against ~1 000/s sent), so they queue in its subscription before the
// node sees them. Their wait there counts in the Received handed to the shard (admission control
// times answers from it), and one that waited over MaxQueueWait is refused busy at once instead
// of handled late. Every command is answered. Without both, the handler saw every command as
// just arrived and the queue grew for as long as the load lasted.
func TestCommandsQueuedTooLongAreRefused(t *testing.T) {
	srv, err := natsserver.Start(natsserver.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatalf("embedded NATS server: %v", err)
	}
	t.Cleanup(srv.Stop)
	nc, err := natskv.Connect("", srv.ConnectOption())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	const shards = 4
	s := natscmd.NewServer(nc, shards, nil)
	s.MaxQueueWait = 100 * time.Millisecond
	id := "queued-1"
	sh := store.ShardOf(id, shards)
	var mu sync.Mutex
	var maxWaited time.Duration // handler start − Received
	handled := 0
	stop, err := s.Serve(sh, func(c shard.Command) {
		mu.Lock()
		maxWaited = max(maxWaited, time.Since(c.Received))
		handled++
		mu.Unlock()
		time.Sleep(4 * time.Millisecond)
		c.Reply(wire.EncodeReply(wire.Reply{OK: true}))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	client, err := natskv.Connect("", srv.ConnectOption())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	var ok, queuedBusy, other atomic.Int64
	inbox := client.NewInbox()
	sub, err := client.Subscribe(inbox, func(m *nats.Msg) {
		r, err := wire.DecodeReply(m.Data, false)
		switch {
		case err != nil:
			other.Add(1)
		case r.OK:
			ok.Add(1)
		case r.Error.Code == wire.CodeBusy && strings.Contains(r.Error.Message, "waited too long in its queue"):
			queuedBusy.Add(1)
		default:
			other.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	body, _ := wire.Canonical(map[string]any{"type": "attack"})
	sent := 0
	start := time.Now()
	for time.Since(start) < 1500*time.Millisecond {
		for due := int(time.Since(start).Seconds() * 1000); sent < due; sent++ {
			m := nats.NewMsg(wire.Subject(sh, id))
			m.Reply = inbox
			m.Header.Set(wire.HeaderRequestID, "q-"+time.Now().Format("150405.000000000"))
			m.Data = body
			if err := client.PublishMsg(m); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(time.Millisecond)
	}
	for deadline := time.Now().Add(30 * time.Second); ok.Load()+queuedBusy.Load()+other.Load() < int64(sent); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d sent, %d answered ok, %d busy (queued), %d other after 30 s", sent, ok.Load(), queuedBusy.Load(), other.Load())
		}
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d sent: %d ok, %d busy for waiting in the queue, %d other; handled %d, longest wait seen by the handler %v",
		sent, ok.Load(), queuedBusy.Load(), other.Load(), handled, maxWaited)
	if other.Load() != 0 {
		t.Errorf("%d answers neither ok nor busy for the queue", other.Load())
	}
	if queuedBusy.Load() == 0 {
		t.Errorf("no command refused for waiting in the queue: %d handled of %d sent, the handler at most 250/s", handled, sent)
	}
	if maxWaited < 50*time.Millisecond {
		t.Errorf("the handler saw commands at most %v after their arrival: the queue's wait is not in Received", maxWaited)
	}
}
