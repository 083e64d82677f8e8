package natscmd_test

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/shard/natscmd"
)

// Exec may return (its context ended) while its message still sits in the publish queue; the
// message holds the caller's body slice, so a caller that reuses its buffer after Exec returned
// has the new contents published under the abandoned command's session number.
func TestExecDoesNotPublishABodyAfterItReturned(t *testing.T) {
	cnc, onc := clientConns(t)
	c := natscmd.NewClient(cnc, clientShards)
	c.GiveUp = 5 * time.Second
	// Load that keeps a publisher busy: big commands to another instance.
	fakeOwner(t, onc, "bulk-1", func(int, *nats.Msg) ([]byte, time.Duration) { return okWith("x"), 0 })
	var mutatedSeen atomic.Int64
	var seqs sync.Map
	fakeOwner(t, onc, "victim-1", func(_ int, m *nats.Msg) ([]byte, time.Duration) {
		if bytes.HasPrefix(m.Data, []byte("MUTATED")) {
			mutatedSeen.Add(1)
			seqs.Store(m.Header.Get("Tickfence-Seq"), true)
		}
		return okWith("x"), 0
	})
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
	deadline := time.Now().Add(3 * time.Second)
	returnedQueued := 0
	for time.Now().Before(deadline) && mutatedSeen.Load() == 0 {
		body := []byte("ORIGINAL-command-body")
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Microsecond)
		_, _, err := c.Exec(ctx, "victim-1", "", body, false)
		cancel()
		if err != nil {
			returnedQueued++
			copy(body, "MUTATED") // the caller reuses its buffer: Exec has returned
		}
	}
	close(stop)
	wg.Wait()
	time.Sleep(200 * time.Millisecond)
	if n := mutatedSeen.Load(); n > 0 {
		t.Fatalf("the owner received %d commands whose body was changed by the caller after Exec had returned (%d Execs gave up)", n, returnedQueued)
	}
	t.Logf("not reproduced (%d Execs gave up)", returnedQueued)
}
