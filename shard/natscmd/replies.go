package natscmd

import (
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
)

// replies carries a Client's commands out and routes their answers back: one subscription on
// <inbox>.* for all of them and a token per attempt (as nats.go's own request multiplexer does).
//
// The Client waits with a timer of its own instead of a context per attempt: at 20 000
// commands/s, the two contexts a command cost (the caller's give-up and the attempt's) were 7 %
// of a node's CPU with the players in its process (tickd --demo 5000).
//
// Sending goroutines do not take the connection's lock themselves: they queue their message, and
// whichever finds nobody publishing publishes the queue (flat combining). With thousands of
// goroutines calling Exec (a gateway, tickd's demo players), every request taking the
// connection's lock twice (nats.go's RequestMsg) pushed that lock into starvation mode once the
// CPU was saturated: each unlock handed it to the next of ~800 waiters through the scheduler,
// commands fell from 15 000/s to a few hundred for 20-30 s at a time while the CPU idled, and
// the handoff chain held the processors' run queues so ticks ran late and were skipped.
type replies struct {
	once   sync.Once
	err    error
	nc     *nats.Conn
	prefix string // <inbox>., the reply subjects are prefix + token
	next   atomic.Uint64
	tabs   [replyStripes]replyTab

	out        sync.Mutex // held only to queue or take the queue, never while publishing
	queued     []outgoing
	spare      []outgoing
	publishing bool
}

const replyStripes = 16

type replyTab struct {
	mu      sync.Mutex
	waiting map[uint64]func(answer)
}

// answer is an attempt's outcome: the owner's message, or why the attempt could not be sent.
type answer struct {
	m   *nats.Msg
	err error
}

type outgoing struct {
	m   *nats.Msg
	tok uint64
}

// start subscribes the inbox, once; later calls return the first outcome.
func (r *replies) start(nc *nats.Conn) error {
	r.once.Do(func() {
		r.nc, r.prefix = nc, CommandInbox(nc)+"."
		for i := range r.tabs {
			r.tabs[i].waiting = map[uint64]func(answer){}
		}
		// Lives as long as the connection, as nats.go's own request multiplexer does.
		_, r.err = nc.Subscribe(r.prefix+"*", r.deliver)
	})
	return r.err
}

// CommandInbox is a new inbox for the answers to commands: <inbox prefix>.cmd.<unique>. Within
// the trusted account nodes may publish answers under _INBOX.*.cmd.> only (package auth), not into
// the inboxes where their users receive JetStream's replies.
func CommandInbox(nc *nats.Conn) string {
	prefix := nc.Opts.InboxPrefix
	if prefix == "" {
		prefix = nats.InboxPrefix[:len(nats.InboxPrefix)-1]
	}
	return prefix + ".cmd." + strings.TrimPrefix(nc.NewInbox(), prefix+".")
}

func (r *replies) deliver(m *nats.Msg) {
	tok, err := strconv.ParseUint(strings.TrimPrefix(m.Subject, r.prefix), 10, 64)
	if err != nil {
		return
	}
	r.settle(tok, answer{m: m})
}

// settle hands an attempt its outcome, if it still waits for one: the token is gone first, so
// its function runs once, on the goroutine settling it.
func (r *replies) settle(tok uint64, a answer) {
	t := &r.tabs[tok%replyStripes]
	t.mu.Lock()
	fn := t.waiting[tok]
	delete(t.waiting, tok)
	t.mu.Unlock()
	if fn != nil {
		fn(a)
	}
}

// send registers a new attempt of m and queues it for publishing; its outcome goes to fn (which
// must not block: it runs on the subscription's goroutine, or the sender's if publishing
// fails), unless it is forgotten first. It returns the token to forget it by.
func (r *replies) send(m *nats.Msg, fn func(answer)) uint64 {
	tok := r.next.Add(1)
	m.Reply = r.prefix + strconv.FormatUint(tok, 10)
	t := &r.tabs[tok%replyStripes]
	t.mu.Lock()
	t.waiting[tok] = fn
	t.mu.Unlock()
	r.out.Lock()
	r.queued = append(r.queued, outgoing{m, tok})
	if r.publishing {
		r.out.Unlock() // the publisher takes it with the rest
		return tok
	}
	r.publishing = true
	r.out.Unlock()
	r.publish(publishRounds)
	return tok
}

// publishRounds bounds how many times a sender publishes the queue before it leaves the rest to
// a goroutine of its own: under a sustained stream of commands the queue may never be empty, and
// the sender has its own command to wait for.
const publishRounds = 8

// publish publishes the queue until it is empty (then the next sender publishes), or for rounds
// rounds, after which a new goroutine goes on. The caller set r.publishing.
func (r *replies) publish(rounds int) {
	r.out.Lock()
	for len(r.queued) > 0 {
		if rounds == 0 {
			r.out.Unlock()
			go r.publish(publishRounds)
			return
		}
		rounds--
		batch := r.queued
		r.queued = r.spare[:0]
		r.out.Unlock()
		for _, o := range batch {
			if !r.awaited(o.tok) {
				continue // its attempt ended (given up, timed out) while queued: never sent after that
			}
			if err := r.nc.PublishMsg(o.m); err != nil {
				r.settle(o.tok, answer{err: err})
			}
		}
		clear(batch)
		r.out.Lock()
		r.spare = batch[:0]
	}
	r.publishing = false
	r.out.Unlock()
}

// forget drops a token whose answer is no longer awaited (a late answer is then discarded). It
// reports whether the token still waited: false, its outcome was or is being settled.
func (r *replies) forget(tok uint64) bool {
	t := &r.tabs[tok%replyStripes]
	t.mu.Lock()
	_, ok := t.waiting[tok]
	delete(t.waiting, tok)
	t.mu.Unlock()
	return ok
}

// awaited reports whether tok's attempt still waits for its outcome.
func (r *replies) awaited(tok uint64) bool {
	t := &r.tabs[tok%replyStripes]
	t.mu.Lock()
	_, ok := t.waiting[tok]
	t.mu.Unlock()
	return ok
}

// noResponders reports the server's status answer for a request nobody subscribes to.
func noResponders(m *nats.Msg) bool {
	return len(m.Data) == 0 && m.Header.Get("Status") == "503"
}
