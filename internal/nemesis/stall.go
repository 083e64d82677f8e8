package nemesis

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"time"

	"github.com/tickfence/tickfence/coordinator"
	"github.com/tickfence/tickfence/internal/lease"
	"github.com/tickfence/tickfence/store"
)

// Coordinator stalls across a lease expiry. The process nemesis's freeze stops a process's store
// calls, but its timers go on firing: a frozen coordinator's lease self-fences on time and steps
// it down while it is still frozen, so what it does when it thaws it does as a former leader
// that knows it. A stalled process (a GC pause, SIGSTOP, a VM descheduled) knows nothing until
// it runs again: then its store calls go on, and its timers — the lease's fence among them —
// fire only as the process catches up. A stall here freezes a coordinator's store client and its
// clock (stallClock, the coordinator's coordinator.Clock): timers that come due while stalled
// fire after the thaw, a few milliseconds after its store calls went on. Only what the
// coordinator checks by reading the clock itself (its lease's validity, its round's deadline)
// stops a write it meant to make as leader from landing after another leader took over.
//
// Stalls come at random (half of the coordinator freezes) and, in some runs (stallShare), exactly
// as a coordinator issues a grant (a write of shard.<S>), for longer than the leader lease, while
// the operator moves that shard away from its owner and back again (A→B→A: the key shows the
// same session under another grant), so that the stalled coordinator's grant, on a conflict,
// finds the value it read "only rotated" by owner and session.
const stallShare = 0.35

// stallClock is the system clock of one coordinator life, which the nemesis can stall: While
// stalled, timers that come due (After, AfterFunc) wait, and fire once it resumes.
type stallClock struct {
	sys lease.SystemClock

	mu    sync.Mutex
	going chan struct{} // non-nil while stalled; closed when it resumes
}

var _ coordinator.Clock = (*stallClock)(nil)

func newStallClock() *stallClock { return &stallClock{sys: lease.NewSystemClock()} }

// Now implements coordinator.Clock.
func (k *stallClock) Now() time.Time { return k.sys.Now() }

// Monotonic implements coordinator.Clock: the elapsed time goes on during a stall (a process that
// reads it after a stall sees the jump).
func (k *stallClock) Monotonic() time.Duration { return k.sys.Monotonic() }

// After implements coordinator.Clock.
func (k *stallClock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	k.AfterFunc(d, func() { ch <- time.Now() })
	return ch
}

// AfterFunc implements coordinator.Clock: f runs once d has passed and the clock is not stalled.
// stop prevents a call that has not started, held by a stall included.
func (k *stallClock) AfterFunc(d time.Duration, f func()) (stop func() bool) {
	var mu sync.Mutex
	stopped, started := false, false
	t := time.AfterFunc(d, func() {
		k.wait()
		mu.Lock()
		if stopped {
			mu.Unlock()
			return
		}
		started = true
		mu.Unlock()
		f()
	})
	return func() bool {
		mu.Lock()
		defer mu.Unlock()
		if started || stopped {
			return false
		}
		stopped = true
		t.Stop()
		return true
	}
}

// wait blocks while the clock is stalled.
func (k *stallClock) wait() {
	k.mu.Lock()
	ch := k.going
	k.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

func (k *stallClock) stall() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.going == nil {
		k.going = make(chan struct{})
	}
}

// resume lets the timers held by a stall fire (nil-safe).
func (k *stallClock) resume() {
	if k == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.going != nil {
		close(k.going)
		k.going = nil
	}
}

// stallCoordinator stalls p's coordinator for d: its store client frozen, its clock stalled; on
// the thaw its store calls go on first and its timers fire 1–30 ms later. until, if set, ends
// the stall early once it is closed (but not before d).
func (c *cluster) stallCoordinator(p *proc, d time.Duration, why string) {
	c.stallUntil(p, d, nil, why)
}

func (c *cluster) stallUntil(p *proc, d time.Duration, until <-chan struct{}, why string) {
	c.mu.Lock()
	if c.stallsClosed {
		c.mu.Unlock()
		return
	}
	c.stalls.Add(1)
	c.mu.Unlock()
	p.mu.Lock()
	coordC, clock := p.coordC, p.clock
	p.mu.Unlock()
	c.edges.stalls.Add(1)
	c.net.Logf("nemesis: stall the coordinator process of %s (%s) for %v %s", p.id, coordC.Name(), d, why)
	coordC.Freeze()
	clock.stall()
	go func() {
		defer c.stalls.Done()
		time.Sleep(d)
		if until != nil {
			select {
			case <-until:
			case <-time.After(6 * time.Second):
			}
		}
		c.net.Logf("nemesis: the coordinator process of %s (%s) runs again", p.id, coordC.Name())
		coordC.Thaw()
		time.Sleep(c.dur(time.Millisecond, 30*time.Millisecond))
		clock.resume()
	}()
}

// stallAtGrant is called (from observeWrite) as a coordinator client issues a write of key: in
// runs that arm it, the first grant (shard.<S>) issued a second or more into the run stalls that
// coordinator for longer than its lease, while the shard is moved away from its owner and back.
func (c *cluster) stallAtGrant(client, key string) {
	if !strings.HasPrefix(client, "coord-") || !strings.HasPrefix(key, "shard.") || c.healed.Load() || c.retiring.Load() {
		return
	}
	c.mu.Lock()
	armed := c.stallNext && time.Since(c.grid) > time.Second
	if armed {
		c.stallNext = false
	}
	c.mu.Unlock()
	if !armed {
		return
	}
	var p *proc
	for _, q := range c.procs {
		q.mu.Lock()
		if q.coordC != nil && q.coordC.Name() == client && q.alive {
			p = q
		}
		q.mu.Unlock()
	}
	if p == nil {
		return
	}
	var s uint32
	if sh, err := store.ShardName(strings.TrimPrefix(key, "shard.")); err == nil {
		s = sh
	} else {
		return
	}
	bounced := make(chan struct{})
	c.mu.Lock()
	if c.stallsClosed {
		c.mu.Unlock()
		return
	}
	c.stalls.Add(1)
	c.mu.Unlock()
	from, _, _ := c.mem.LatestAssignment(context.Background(), c.epochNow(), s) // what the coordinator read, if its view is current
	go func() { defer c.stalls.Done(); defer close(bounced); c.bounce(s, from) }()
	c.stallUntil(p, c.dur(2500*time.Millisecond, 4*time.Second), bounced, "as it issues a grant of "+key)
}

// bounce makes shard s go away from the session that owned it when the stalled coordinator read
// it (a) and come back to that session under another grant (A→B→A), as operators moving it and
// undoing the move do, once another coordinator leads: the other leader may have settled the
// stalled one's own move (then it only has to come back), or not (then it is moved away first).
// Each step is retried and waited for, within bounds; an owner that died meanwhile ends it.
func (c *cluster) bounce(s uint32, a store.Assignment) {
	ctx := context.Background()
	if a.Owner == "" {
		return
	}
	time.Sleep(2200 * time.Millisecond) // the stalled leader's lease has expired; another may lead
	live := func() bool {               // a's session still holds its node's lease
		e, err := c.mem.LatestControl(ctx, store.NodeKey(a.Owner))
		var r store.NodeRecord
		return err == nil && json.Unmarshal(e.Value, &r) == nil && r.Session == a.Session
	}
	owner := func() store.Assignment {
		now, _, _ := c.mem.LatestAssignment(ctx, c.epochNow(), s)
		return now
	}
	move := func(to string, done func(store.Assignment) bool) bool {
		for attempt := 0; attempt < 5 && live(); attempt++ {
			if done(owner()) {
				return true
			}
			from, err := coordinator.RequestMove(ctx, c.op, s, to)
			c.net.Logf("nemesis: bounce shard %d: operator move from %s to %s: %v", s, from.Owner, to, err)
			for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				if done(owner()) {
					return true
				}
			}
		}
		return false
	}
	away := func(now store.Assignment) bool { return now.Owner != "" && !sameSession(now, a) }
	if !away(owner()) {
		var others []string
		for _, q := range c.procs {
			if q.id != a.Owner && q.isAlive() {
				others = append(others, q.id)
			}
		}
		if len(others) == 0 || !move(others[c.intn(len(others))], away) {
			return
		}
	}
	if move(a.Owner, func(now store.Assignment) bool { return sameSession(now, a) }) {
		c.edges.bounces.Add(1)
		c.net.Logf("nemesis: bounce shard %d: back with %s (session %s) under another grant", s, a.Owner, a.Session)
	}
}

func sameSession(x, y store.Assignment) bool { return x.Owner == y.Owner && x.Session == y.Session }
