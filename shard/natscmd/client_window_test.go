package natscmd_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/store"
)

// GiveUp is documented to bound a command "as a deadline on their context would"; a deadline on
// the context also bounds assign's wait for a free slot in the session window, GiveUp does not.
func TestGiveUpBoundsTheWaitForAWindowSlot(t *testing.T) {
	cnc, onc := clientConns(t)
	id := "full-1"
	fakeOwner(t, onc, id, func(int, *nats.Msg) ([]byte, time.Duration) { return nil, 0 }) // silent
	c := natscmd.NewClient(cnc, clientShards)
	c.GiveUp = 500 * time.Millisecond
	var wg sync.WaitGroup
	for range store.MaxClientInFlight {
		wg.Go(func() { _, _, _ = c.Exec(context.Background(), id, "", attack, false) })
	}
	time.Sleep(50 * time.Millisecond) // the window is full
	start := time.Now()
	_, _, err := c.Exec(context.Background(), id, "", attack, false)
	took := time.Since(start)
	wg.Wait()
	t.Logf("Exec: %v after %v", err, took)
	if took > c.GiveUp+250*time.Millisecond { // it took twice GiveUp when only ctx bounded the wait
		t.Fatalf("Exec took %v with GiveUp %v", took, c.GiveUp)
	}
}
