package natscmd

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
)

// Go sends a command as Exec does — the same attempts, retries after busy, retry or a timeout
// with backoff and jitter, and give-up (Client.GiveUp) — without a goroutine waiting for it:
// done gets what Exec would return, once. A sender of thousands of commands at a time (a
// gateway, a load generator) then needs no goroutine per command: with a goroutine each,
// tickd's 5 000 demo dungeons made hundreds of goroutines runnable at once whenever answers came
// in together (after a garbage collection's pause), and the tick workers queued behind them for
// 100 ms and more (execution traces of skipped ticks).
//
// done runs on the goroutine that settles the command (the one reading answers, a timer's, or
// Go's caller for a command refused before it is sent) and must not block. Once ctx is done,
// nothing more is sent and done is called at once, an attempt in flight included (its error then
// wraps ErrOutcomeUnknown: that attempt may yet be applied). Go returns at once, except that the compact form's numbering waits, as
// Exec's does, while store.MaxClientInFlight commands to the instance are unacknowledged.
func (c *Client) Go(ctx context.Context, instance, requestID string, body []byte, asJSON bool, done func(raw []byte, st wire.Status, err error)) {
	if err := store.ValidID(instance); err != nil {
		done(nil, wire.Status{}, err)
		return
	}
	k := &call{c: c, ctx: ctx, instance: instance, requestID: requestID, asJSON: asJSON, done: done,
		backoff: 20 * time.Millisecond}
	if c.GiveUp > 0 {
		k.giveUp = time.Now().Add(c.GiveUp)
	}
	if requestID == "" {
		seq, err := c.assign(ctx, instance, k.giveUp)
		if err != nil {
			done(nil, wire.Status{}, err)
			return
		}
		k.seq = seq
	}
	if err := c.replies.start(c.nc); err != nil {
		k.finish(nil, wire.Status{}, fmt.Errorf("subscribe the replies' inbox: %w", err))
		return
	}
	k.body = bytes.Clone(body) // it goes out from the queue, perhaps after Go returned
	k.attempt()
}

// call is one command sent with Go: its attempts, one at a time, each settled once — by its
// answer (replies.settle) or its timeout (replies.forget), whichever takes the token first.
type call struct {
	c                   *Client
	ctx                 context.Context
	instance, requestID string
	seq                 uint64
	body                []byte
	asJSON              bool
	giveUp              time.Time
	backoff             time.Duration
	last                error
	uncertain           bool // an attempt may have been applied (uncertainAfter)
	done                func([]byte, wire.Status, error)

	mu      sync.Mutex
	timeout *time.Timer // the attempt in flight's
	stopCtx func() bool // stops the attempt in flight's watch on ctx (nil: none)
}

// settled stops what watches the attempt in flight (its timer and its watch on ctx), once its
// token was taken.
func (k *call) settled() {
	k.mu.Lock()
	if k.timeout != nil {
		k.timeout.Stop()
		k.timeout = nil
	}
	if k.stopCtx != nil {
		k.stopCtx()
		k.stopCtx = nil
	}
	k.mu.Unlock()
}

// left bounds d by the give-up time; false: that time has come.
func (k *call) left(d time.Duration) (time.Duration, bool) {
	if k.giveUp.IsZero() {
		return d, true
	}
	l := time.Until(k.giveUp)
	return min(d, l), l > 0
}

// attempt sends the command once more, unless the caller or the give-up time says stop.
func (k *call) attempt() {
	if err := k.ctx.Err(); err != nil {
		k.finish(nil, wire.Status{}, k.c.gaveUp(k.instance, k.requestID, k.seq, err, k.last, k.uncertain))
		return
	}
	d, ok := k.left(k.c.Attempt)
	if !ok {
		k.finish(nil, wire.Status{}, k.c.gaveUp(k.instance, k.requestID, k.seq, context.DeadlineExceeded, k.last, k.uncertain))
		return
	}
	m := k.c.message(k.instance, k.requestID, k.seq, k.body, k.asJSON, false)
	if testHookAttempt != nil {
		testHookAttempt()
	}
	tok := k.c.replies.send(m, k.answered)
	t := time.AfterFunc(d, func() {
		if k.c.replies.forget(tok) { // else its answer took the token first
			k.settled()
			k.retry(nats.ErrTimeout)
		}
	})
	var stop func() bool
	if k.ctx.Done() != nil {
		stop = context.AfterFunc(k.ctx, func() {
			if k.c.replies.forget(tok) { // the caller is gone: so is this attempt's answer
				k.settled()
				k.finish(nil, wire.Status{}, k.c.gaveUp(k.instance, k.requestID, k.seq, k.ctx.Err(), k.last, true))
			}
		})
	}
	k.mu.Lock()
	k.timeout, k.stopCtx = t, stop
	k.mu.Unlock()
	if !k.c.replies.awaited(tok) {
		k.settled() // its answer came first: the watch on ctx must not outlive it
	}
}

// answered settles the attempt in flight with its outcome.
func (k *call) answered(a answer) {
	k.settled()
	final, raw, st, err, last := judge(a, k.asJSON)
	if final {
		k.finish(raw, st, err)
		return
	}
	k.retry(last)
}

// retry sends again after a backoff with full jitter (callers refused together do not come back
// together), or gives up if the give-up time comes first.
func (k *call) retry(last error) {
	k.last = last
	k.uncertain = k.uncertain || uncertainAfter(last)
	d, ok := k.left(time.Duration(rand.Int64N(int64(k.backoff))) + time.Millisecond)
	if !ok {
		k.finish(nil, wire.Status{}, k.c.gaveUp(k.instance, k.requestID, k.seq, context.DeadlineExceeded, last, k.uncertain))
		return
	}
	k.backoff = min(2*k.backoff, time.Second)
	time.AfterFunc(d, k.attempt)
}

func (k *call) finish(raw []byte, st wire.Status, err error) {
	if k.seq != 0 {
		k.c.settle(k.instance, k.seq) // answered or given up: never sent again
	}
	k.done(raw, st, err)
}
