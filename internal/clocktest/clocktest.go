// Package clocktest is a hand-driven clock for tests of what decides by time (leases, coordinator
// rounds, TTLs): its monotonic time moves only when the test calls Advance, its wall time can be
// jumped apart from it, and BlockUntil waits until the code under test is parked on its timers.
// It satisfies lease.Clock, coordinator.Clock, node.Clock and memstore.Clock.
package clocktest

import (
	"sort"
	"sync"
	"time"
)

// Manual is a clock that moves only when told. The zero value is not usable; make one with New.
type Manual struct {
	mu      sync.Mutex
	cond    *sync.Cond
	mono    time.Duration
	wall    time.Time
	seq     int
	waiters []*waiter
}

type waiter struct {
	at   time.Duration
	seq  int // ties fire in the order they were armed
	ch   chan time.Time
	f    func()
	done bool
}

// New makes a clock whose wall time starts at wall and whose monotonic time starts at zero.
func New(wall time.Time) *Manual {
	c := &Manual{wall: wall}
	c.cond = sync.NewCond(&c.mu)
	return c
}

// Now is the wall time: the start, plus every Advance, plus every JumpWall.
func (c *Manual) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wall
}

// Monotonic is the sum of every Advance.
func (c *Manual) Monotonic() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mono
}

// After sends the wall time once Advance has moved the clock d past now.
func (c *Manual) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	c.arm(d, ch, nil)
	return ch
}

// AfterFunc runs f on its own goroutine once Advance has moved the clock d past now.
func (c *Manual) AfterFunc(d time.Duration, f func()) func() bool {
	w := c.arm(d, nil, f)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if w.done {
			return false
		}
		w.done = true
		c.remove(w)
		return true
	}
}

func (c *Manual) arm(d time.Duration, ch chan time.Time, f func()) *waiter {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	w := &waiter{at: c.mono + max(d, 0), seq: c.seq, ch: ch, f: f}
	c.waiters = append(c.waiters, w)
	c.cond.Broadcast()
	return w
}

func (c *Manual) remove(w *waiter) {
	for i, x := range c.waiters {
		if x == w {
			c.waiters = append(c.waiters[:i], c.waiters[i+1:]...)
			return
		}
	}
}

// Advance moves the monotonic and the wall time forward by d, firing, in time order, every timer
// that falls due; each fires with the clock set to its own instant.
func (c *Manual) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.mono + d
	for {
		sort.Slice(c.waiters, func(i, j int) bool {
			a, b := c.waiters[i], c.waiters[j]
			return a.at < b.at || a.at == b.at && a.seq < b.seq
		})
		if len(c.waiters) == 0 || c.waiters[0].at > end {
			break
		}
		w := c.waiters[0]
		c.waiters = c.waiters[1:]
		c.wall = c.wall.Add(w.at - c.mono)
		c.mono = w.at
		w.done = true
		if w.ch != nil {
			w.ch <- c.wall
		} else {
			go w.f()
		}
	}
	c.wall = c.wall.Add(end - c.mono)
	c.mono = end
	c.mu.Unlock()
}

// JumpWall moves only the wall time, by d (negative: back), as an NTP step or an operator would.
func (c *Manual) JumpWall(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wall = c.wall.Add(d)
}

// Waiters is how many timers are armed and have not fired.
func (c *Manual) Waiters() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

// BlockUntil waits until at least n timers are armed (the code under test is parked on them).
func (c *Manual) BlockUntil(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.waiters) < n {
		c.cond.Wait()
	}
}
