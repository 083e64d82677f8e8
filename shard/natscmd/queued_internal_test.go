package natscmd

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/natskv"
)

// Another sender is the publisher (flat combining) and has not reached this command's message
// when the command's context ends / GiveUp passes: Exec returns "gave up", and the message is
// published afterwards; the owner applies a command its caller was told was given up.
func TestAQueuedCommandIsNotSentAfterExecGaveUp(t *testing.T) {
	for _, mode := range []string{"ctx", "giveup"} {
		t.Run(mode, func(t *testing.T) {
			srv, err := natsserver.Start(natsserver.Config{DataDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(srv.Stop)
			var conns [2]*nats.Conn
			for i := range conns {
				if conns[i], err = natskv.Connect("", srv.ConnectOption()); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(conns[i].Close)
			}
			const shards, id = 8, "queued-1"
			var got atomic.Int64
			ok := wire.EncodeReply(wire.Reply{OK: true})
			if _, err := conns[1].Subscribe(wire.Subject(store.ShardOf(id, shards), id), func(m *nats.Msg) {
				if m.Reply == "" {
					return // an acknowledgement alone, not a command
				}
				got.Add(1)
				_ = m.Respond(ok)
			}); err != nil {
				t.Fatal(err)
			}
			_ = conns[1].Flush()
			c := NewClient(conns[0], shards)
			if err := c.replies.start(c.nc); err != nil {
				t.Fatal(err)
			}
			c.replies.out.Lock()
			c.replies.publishing = true // a sender is in its publish rounds
			c.replies.out.Unlock()
			ctx := context.Background()
			if mode == "ctx" {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, 100*time.Millisecond)
				defer cancel()
			} else {
				c.GiveUp = 100 * time.Millisecond
			}
			_, _, err = c.Exec(ctx, id, "", attackBody, false)
			if err == nil {
				t.Fatal("Exec answered")
			}
			t.Logf("Exec returned: %v", err)
			returned := time.Now()
			c.replies.publish(publishRounds) // the publisher reaches the queue
			_ = c.nc.Flush()
			time.Sleep(200 * time.Millisecond)
			if n := got.Load(); n != 0 {
				t.Errorf("the owner received and applied %d command(s) published %v after Exec returned %q", n, time.Since(returned).Round(time.Millisecond), err)
			}
		})
	}
}
