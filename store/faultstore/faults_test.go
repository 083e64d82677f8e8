package faultstore_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/faultstore"
	"github.com/tickfence/tickfence/store/memstore"
)

func setup(t *testing.T) (*faultstore.Net, *faultstore.Client, store.Grant) {
	t.Helper()
	ctx := context.Background()
	n := faultstore.New(memstore.New(), 7, faultstore.Options{})
	c := n.Client("a")
	if _, err := c.Bootstrap(ctx, store.Cluster{Shards: 1, Partitions: 1, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	a := store.Assignment{Owner: "A", Session: "s"}
	tok, err := c.Assign(ctx, 1, 0, a, 0)
	if err != nil {
		t.Fatal(err)
	}
	g := store.Grant{Epoch: 1, Shard: 0, Token: tok, Assignment: a}
	if _, err := c.Create(ctx, g, "i", store.Record{Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	return n, c, g
}

// A write whose answer is lost and that lands after the client's next acknowledged write of the
// same instance under the same token makes the tick go back: the fault the nemesis relies on.
func TestLostAnswerLandsAfterLaterWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		n, c, g := setup(t)
		n.SetOptions(faultstore.Options{LoseAnswer: 1, LandLater: 1})
		if _, err := c.Write(ctx, g, "i", store.Record{Kind: "k", Tick: 1, State: []byte("w1")}); !errors.Is(err, store.ErrUnknownOutcome) {
			t.Fatalf("W1: %v, want unknown outcome", err)
		}
		n.SetOptions(faultstore.Options{})
		for tick := uint64(2); tick <= 4; tick++ {
			if _, err := c.Write(ctx, g, "i", store.Record{Kind: "k", Tick: tick, State: []byte("w")}); err != nil {
				t.Fatal(err)
			}
		}
		if n.Pending() != 0 {
			t.Fatalf("%d late writes pending after 3 more writes", n.Pending())
		}
		r, _, err := n.Under().Load(ctx, 1, 0, "i")
		if err != nil || r.Tick != 1 && r.Tick != 4 {
			t.Fatalf("stored %+v, %v", r, err)
		}
		if n.Counts()["late_landed"] != 1 {
			t.Fatalf("counts %v", n.Counts())
		}
		// Late after a rotation: the store fences it.
		n.SetOptions(faultstore.Options{LoseAnswer: 1, LandLater: 1})
		_, _ = c.Write(ctx, g, "i", store.Record{Kind: "k", Tick: 5})
		n.SetOptions(faultstore.Options{})
		if _, err := c.Rotate(ctx, g); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		if n.Counts()["late_refused"] != 1 {
			t.Fatalf("late write after a rotation: counts %v", n.Counts())
		}
	})
}

// Lagging reads answer an older revision; the latest read never lags.
func TestLaggingReads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		n, c, g := setup(t)
		time.Sleep(time.Second)
		_, rev1, _ := c.Assignment(ctx, 1, 0)
		time.Sleep(10 * time.Millisecond)
		g2, err := c.Rotate(ctx, g)
		if err != nil {
			t.Fatal(err)
		}
		n.SetOptions(faultstore.Options{Lag: 1, MaxLag: time.Second})
		old := 0
		for range 20 {
			if _, rev, _ := c.Assignment(ctx, 1, 0); rev == rev1 {
				old++
			}
			if _, rev, _ := c.LatestAssignment(ctx, 1, 0); rev != g2.Token {
				t.Fatalf("LatestAssignment lagged: %d, want %d", rev, g2.Token)
			}
		}
		if old == 0 {
			t.Fatal("no lagging read in 20")
		}
	})
}

// A frozen client blocks until thawed; a killed one fails at once, blocked calls included.
func TestFreezeThawKill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		_, c, g := setup(t)
		c.Freeze()
		done := make(chan error, 1)
		go func() { _, err := c.Write(ctx, g, "i", store.Record{Kind: "k", Tick: 1}); done <- err }()
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("a frozen client's write completed")
		default:
		}
		c.Thaw()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		c.Freeze()
		go func() { _, err := c.Write(ctx, g, "i", store.Record{Kind: "k", Tick: 2}); done <- err }()
		synctest.Wait()
		c.Kill()
		if err := <-done; !errors.Is(err, faultstore.ErrKilled) {
			t.Fatalf("blocked write of a killed client: %v", err)
		}
		if _, _, err := c.Assignment(ctx, 1, 0); !errors.Is(err, faultstore.ErrKilled) {
			t.Fatalf("read of a killed client: %v", err)
		}
	})
}

// A reconnect loses every answer in flight at once.
func TestReconnectLosesInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, c, g := setup(t)
		n.SetOptions(faultstore.Options{InFlight: 1, MaxInFlight: time.Second})
		errs := make(chan error, 3)
		for i := range 3 {
			c.WriteAsync(g, "i", store.Record{Kind: "k", Tick: uint64(i + 1)}, func(_ uint64, err error) { errs <- err })
		}
		c.Reconnect()
		for range 3 {
			if err := <-errs; !errors.Is(err, store.ErrUnknownOutcome) {
				t.Fatalf("answer after reconnect: %v", err)
			}
		}
		n.Heal()
		if n.Pending() != 0 {
			t.Fatal("late writes left after Heal")
		}
	})
}

// A watch ended by the Net closes its channel.
func TestWatchEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, c, _ := setup(t)
		n.SetOptions(faultstore.Options{WatchEnd: 1, WatchLife: time.Second})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ch, err := c.WatchAssignments(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		for range ch {
		}
		if n.Counts()["watch_ended"] != 1 {
			t.Fatalf("counts %v", n.Counts())
		}
	})
}
