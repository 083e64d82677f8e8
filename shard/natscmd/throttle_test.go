package natscmd_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
)

// owner is a fake owner of one shard on the fake clock: it admits capacity commands per second
// (a token bucket of a few), and refuses the rest busy.
type owner struct {
	perMs, tokens float64
}

func (o *owner) tick() { o.tokens = min(o.tokens+o.perMs, 5) }

func (o *owner) take() bool {
	if o.tokens >= 1 {
		o.tokens--
		return true
	}
	return false
}

// offer makes attempts per ms attempts every ms for ms milliseconds through th, answered by o;
// it returns what was sent and what o accepted.
func offer(th *natscmd.Throttle, o *owner, ms, attempts int) (sent, accepted int) {
	for range ms {
		o.tick()
		for range attempts {
			if !th.Allow(0) {
				continue
			}
			sent++
			ok := o.take()
			if ok {
				accepted++
			}
			th.Answered(0, ok)
		}
		time.Sleep(time.Millisecond)
	}
	return sent, accepted
}

// Offered twice what the owner admits, the client sends about K times what the owner accepts, and
// the owner's capacity is still used.
func TestThrottleSendsKTimesWhatIsAccepted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, load := range []int{2, 4, 10} {
			th := natscmd.NewThrottle(1)
			o := &owner{perMs: 1}
			offer(th, o, 5000, load) // learning
			before := th.Throttled()
			sent, acc := offer(th, o, 5000, load)
			ratio := float64(sent) / float64(acc)
			t.Logf("%d× the capacity: sent %d/s, accepted %d/s (%.2f×), refused here %d/s", load, sent/5, acc/5, ratio, (th.Throttled()-before)/5)
			if ratio < 1 || ratio > th.K+0.1 {
				t.Errorf("%d×: sent %.2f× what the owner accepted; want about K = %.2f", load, ratio, th.K)
			}
			if acc < 4500 {
				t.Errorf("%d×: the owner accepted %d of its capacity 5000: the throttle wastes it", load, acc)
			}
			if got := th.Throttled() - before; got != int64(5000*load-sent) {
				t.Errorf("Throttled counted %d, want every attempt not sent: %d", got, 5000*load-sent)
			}
		}
	})
}

// Nothing is refused here while the owner accepts everything, or while attempts go unanswered
// (no owner, timeouts: the throttle follows what owners say).
func TestThrottleRefusesNothingUnlessTheOwnerDoes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := natscmd.NewThrottle(4)
		for i := range 20000 {
			sh := uint32(i % 4)
			if !th.Allow(sh) {
				t.Fatalf("attempt %d refused while the owner accepted every one", i)
			}
			if i%2 == 0 {
				th.Answered(sh, true)
			} // else no answer

			if i%10 == 0 {
				time.Sleep(time.Millisecond)
			}
		}
		// One shard's owner refusing does not throttle another's.
		for range 2000 {
			if th.Allow(0) {
				th.Answered(0, false)
			}
			if !th.Allow(1) {
				t.Fatal("shard 1 throttled for shard 0's refusals")
			}
			th.Answered(1, true)
			time.Sleep(100 * time.Microsecond)
		}
		if th.Throttled() == 0 {
			t.Fatal("2 000 attempts refused busy by shard 0's owner and none refused here")
		}
	})
}

// After a spell in which the owner refused everything, the client finds out within a second that
// it accepts again (and does not probe with one attempt in a thousand for many half-lives).
func TestThrottleRecoversAfterTheOwnerDoes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := natscmd.NewThrottle(1)
		o := &owner{perMs: 1}
		offer(th, o, 3000, 2)
		o.perMs = 0
		sent, _ := offer(th, o, 3000, 2)
		if sent > 1000 {
			t.Errorf("the owner refused everything for 3 s and the client still sent %d of 6 000", sent)
		}
		o.perMs = 100 // spare capacity
		offer(th, o, 1000, 2)
		sent, acc := offer(th, o, 1000, 2)
		if sent < 1990 || acc != sent {
			t.Errorf("a second after the owner accepts again, sent %d of 2 000 (%d accepted)", sent, acc)
		}
	})
}

// The client answers busy itself what an owner that keeps refusing would refuse: the owner (here a
// responder on a real server that answers everything busy) receives a fraction of the attempts;
// without a Throttle it receives every one. When it accepts again, commands get through.
func TestClientThrottlesABusyOwner(t *testing.T) {
	srv, err := natsserver.Start(natsserver.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatalf("embedded NATS server: %v", err)
	}
	t.Cleanup(srv.Stop)
	nc, err := nats.Connect("", srv.ConnectOption())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	var received atomic.Int64
	var accepting atomic.Bool
	busy := wire.EncodeReply(wire.Reply{Error: wire.Errorf(wire.CodeBusy, "shedding")})
	ok := wire.EncodeReply(wire.Reply{OK: true})
	sub, err := nc.Subscribe(wire.Subject(store.ShardOf("d1", 8), "d1"), func(m *nats.Msg) {
		received.Add(1)
		if accepting.Load() {
			_ = m.Respond(ok)
		} else {
			_ = m.Respond(busy)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cmd := map[string]any{"type": "attack"}
	run := func(c *natscmd.Client, n int) (busies int) {
		t.Helper()
		for range n {
			r, err := c.Once(ctx, "d1", "", cmd)
			if err != nil {
				t.Fatal(err)
			}
			if r.OK || r.Error.Code != wire.CodeBusy {
				t.Fatalf("answer %+v from an owner refusing everything", r)
			}
			busies++
		}
		return busies
	}
	plain := natscmd.NewClient(nc, 8)
	plain.Throttle = nil
	received.Store(0)
	run(plain, 1000)
	if got := received.Load(); got != 1000 {
		t.Fatalf("without a throttle the owner received %d of 1 000 attempts", got)
	}
	c := natscmd.NewClient(nc, 8)
	received.Store(0)
	run(c, 1000)
	got := received.Load()
	t.Logf("with the throttle the owner received %d of 1 000 attempts; %d refused by the client", got, c.Throttle.Throttled())
	if got > 500 || c.Throttle.Throttled() != 1000-got {
		t.Fatalf("with the throttle the owner received %d of 1 000 attempts, %d refused by the client", got, c.Throttle.Throttled())
	}
	// It accepts again: a command sent with Exec (which retries busy) gets through.
	accepting.Store(true)
	ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	body, _ := wire.Canonical(cmd)
	if _, st, err := c.Exec(ectx, "d1", "", body, false); err != nil || !st.OK {
		t.Fatalf("after the owner accepts again: %+v, %v", st, err)
	}
}
