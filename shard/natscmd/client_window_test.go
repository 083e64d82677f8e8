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

// The window is held past GiveUp (Once with a 3 s context ignores GiveUp): only assign's own
// give-up check can end the wait.
func TestGiveUpBoundsTheWaitForAWindowSlot(t *testing.T) {
	cnc, onc := clientConns(t)
	id := "full-2"
	fakeOwner(t, onc, id, func(int, *nats.Msg) ([]byte, time.Duration) { return nil, 0 }) // silent
	c := natscmd.NewClient(cnc, clientShards)
	c.GiveUp = 500 * time.Millisecond
	hold, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for range store.MaxClientInFlight {
		wg.Go(func() { _, _ = c.Once(hold, id, "", map[string]any{"type": "attack"}) })
	}
	time.Sleep(100 * time.Millisecond) // the window is full
	start := time.Now()
	_, _, err := c.Exec(context.Background(), id, "", []byte{0x80}, false)
	took := time.Since(start)
	cancel()
	wg.Wait()
	t.Logf("Exec: %v after %v", err, took)
	if took > c.GiveUp+1000*time.Millisecond {
		t.Fatalf("Exec took %v with GiveUp %v", took, c.GiveUp)
	}
}
