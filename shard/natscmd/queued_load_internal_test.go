package natscmd

import (
	"bytes"
	"context"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/natskv"
)

// Under load, no state poked (the load of TestExecDoesNotPublishABodyAfterItReturned): Execs
// whose context ended return while their message is still in r.queued (not yet taken by any
// publisher), and the owner then receives those commands.
func TestGivenUpCommandsStillQueuedAreNotSent(t *testing.T) {
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
	cnc, onc := conns[0], conns[1]
	const shards = 8
	ok := wire.EncodeReply(wire.Reply{OK: true})
	var mu sync.Mutex
	arrived := map[string]bool{}
	for _, id := range []string{"bulk-1", "victim-1"} {
		if _, err := onc.Subscribe(wire.Subject(store.ShardOf(id, shards), id), func(m *nats.Msg) {
			if id == "victim-1" {
				mu.Lock()
				arrived[m.Header.Get(wire.HeaderSeq)] = true
				mu.Unlock()
			}
			_ = m.Respond(ok)
		}); err != nil {
			t.Fatal(err)
		}
	}
	_ = onc.Flush()
	c := NewClient(cnc, shards)
	c.GiveUp = 5 * time.Second
	big := bytes.Repeat([]byte{0x90}, int(cnc.MaxPayload()/2))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, _, _ = c.Exec(context.Background(), "bulk-1", "", big, false)
			}
		})
	}
	seqRe := regexp.MustCompile(`/(\d+) to victim-1: gave up`)
	stillQueued := map[string]bool{}
	gaveUp := 0
	for range 200 {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Microsecond)
		_, _, err := c.Exec(ctx, "victim-1", "", attackBody, false)
		cancel()
		if err == nil {
			continue
		}
		m := seqRe.FindStringSubmatch(err.Error())
		if m == nil {
			continue
		}
		gaveUp++
		c.replies.out.Lock()
		for _, o := range c.replies.queued {
			if o.m.Header.Get(wire.HeaderSeq) == m[1] {
				stillQueued[m[1]] = true
			}
		}
		c.replies.out.Unlock()
	}
	close(stop)
	wg.Wait()
	time.Sleep(300 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	applied := 0
	for seq := range stillQueued {
		if arrived[seq] {
			applied++
		}
	}
	t.Logf("%d Execs gave up; %d of them were still in the publish queue when Exec returned; the owner received %d of those afterwards", gaveUp, len(stillQueued), applied)
	if applied > 0 {
		t.Fail()
	}
}
