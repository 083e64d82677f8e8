package lease_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tickfence/tickfence/internal/clocktest"
	"github.com/tickfence/tickfence/internal/lease"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/memstore"
)

// TestFenceInstantIsSendTimePlusTTLMinusMargin drives the holder and the store by one hand-moved
// clock: the lease is trusted until exactly sent+TTL−margin of the last acknowledged renewal and
// not a moment longer, an hour's jump of the wall clock either way changes neither, and the
// store's TTL ends the key only after the holder stopped trusting it.
func TestFenceInstantIsSendTimePlusTTLMinusMargin(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clock := clocktest.New(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	st := &lossy{Store: memstore.New().WithClock(clock)}
	var fenced, valid atomic.Int32
	cfg := config(st, "s1", &fenced, &valid) // TTL 1 s, margin 200 ms: renewals every 333 ms
	cfg.Clock = clock
	l, err := lease.TryAcquire(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	// Armed: the fence timer, the store's TTL and the renewal ticker.
	clock.BlockUntil(3)

	st.cut.Store(true) // from now on no renewal reaches the store: the acquisition at 0 is the last ack
	clock.JumpWall(time.Hour)
	clock.Advance(799 * time.Millisecond)
	waitRenewalsSettle(clock)
	if !l.Valid() || fenced.Load() != 0 {
		t.Fatalf("at 799 ms (fence at 800 ms), wall clock +1h: valid %v, fenced %d", l.Valid(), fenced.Load())
	}
	if got := l.Remaining(); got != time.Millisecond {
		t.Fatalf("Remaining at 799 ms = %v, want 1ms", got)
	}
	clock.JumpWall(-2 * time.Hour)
	if !l.Valid() {
		t.Fatal("a wall clock jump back ended the lease")
	}
	clock.Advance(time.Millisecond)
	waitFor(t, "the fence", func() bool { return fenced.Load() == 1 })
	if l.Valid() || l.Remaining() > 0 {
		t.Fatalf("at 800 ms: valid %v, remaining %v; want fenced", l.Valid(), l.Remaining())
	}
	// The store still holds the key (its TTL runs to 1 s), so nobody could have taken it while
	// the holder trusted it.
	if _, err := st.ControlGet(ctx, "node.n1"); err != nil {
		t.Fatalf("the store ended the key before its holder self-fenced: %v", err)
	}
	clock.Advance(200 * time.Millisecond) // 1 s: the store's TTL
	waitFor(t, "the store's TTL", func() bool {
		_, err := st.ControlGet(ctx, "node.n1")
		return errors.Is(err, store.ErrNotFound)
	})
	st.cut.Store(false)
	clock.Advance(time.Second) // the next renewal finds the key gone
	select {
	case err := <-done:
		if !errors.Is(err, lease.ErrLost) {
			t.Fatalf("Run = %v, want ErrLost", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the holder never learned its lease was lost")
	}
	if valid.Load() != 0 {
		t.Fatalf("OnValid ran %d times for a lost lease", valid.Load())
	}
}

// TestTickerKeepsItsCadence: slots come every period of the clock however long each wait's work
// takes, a missed slot is dropped, and Stop sends nothing after it.
func TestTickerKeepsItsCadence(t *testing.T) {
	clock := clocktest.New(time.Unix(0, 0))
	tk := lease.NewTicker(clock, 100*time.Millisecond)
	clock.BlockUntil(1)
	clock.Advance(99 * time.Millisecond)
	select {
	case <-tk.C:
		t.Fatal("a slot at 99 ms of a 100 ms ticker")
	default:
	}
	clock.Advance(time.Millisecond)
	<-tk.C
	clock.BlockUntil(1)
	clock.Advance(350 * time.Millisecond) // slots at 200, 300 and 400 ms: one waits, two are dropped
	waitFor(t, "the re-armed slot", func() bool { return clock.Waiters() == 1 })
	<-tk.C
	select {
	case <-tk.C:
		t.Fatal("missed slots were made up in a burst")
	default:
	}
	clock.Advance(50 * time.Millisecond) // 500 ms: the next slot is on the cadence, not 100 ms after 450
	<-tk.C
	tk.Stop()
	clock.Advance(time.Second)
	select {
	case <-tk.C:
		t.Fatal("a slot after Stop")
	default:
	}
}

// waitRenewalsSettle waits until the renewal goroutine is parked again after an Advance (its
// ticker re-armed): the fence timer and the ticker are armed.
func waitRenewalsSettle(c *clocktest.Manual) { c.BlockUntil(2) }

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
