// Package lease keeps a key of the control bucket alive with a per-message TTL: the node leases
// (node.<id>) and the coordinator's (leader). The holder self-fences on its own monotonic clock:
// once sendTimeOfLastAckedRenewal + TTL − margin has passed, it must act as if it held nothing
// until a renewal is acknowledged again. The server's clock drives the TTL, which may only make a
// lease end early; no local time is ever compared with one read from the store.
package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/tickfence/tickfence/store"
)

// ErrLost: the key is no longer ours (it expired, or someone else holds it).
var ErrLost = errors.New("lease lost")

// Clock is the time source of leases. Every duration a lease measures or waits comes from
// Monotonic, After and AfterFunc; the wall clock (Now) may jump an hour either way without
// changing anything.
type Clock interface {
	// Now is the wall clock, for logs only.
	Now() time.Time
	// Monotonic is the time elapsed since a fixed point of this process, on a clock that only
	// moves forward at a steady rate.
	Monotonic() time.Duration
	// After sends the time once d has passed on the monotonic clock.
	After(d time.Duration) <-chan time.Time
	// AfterFunc runs f on its own goroutine once d has passed on the monotonic clock; stop
	// cancels it and reports whether it had not run yet.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// SystemClock is the real clock: time.Now, time.Since a start for the monotonic reading, and the
// time package's timers (which run on the monotonic clock).
type SystemClock struct{ start time.Time }

// NewSystemClock starts a system clock.
func NewSystemClock() SystemClock { return SystemClock{start: time.Now()} }

// Now implements Clock.
func (c SystemClock) Now() time.Time { return time.Now() }

// Monotonic implements Clock (time.Since uses the monotonic reading of time.Now).
func (c SystemClock) Monotonic() time.Duration { return time.Since(c.start) }

// After implements Clock.
func (c SystemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// AfterFunc implements Clock.
func (c SystemClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// Ticker is time.Ticker on a Clock: C receives at slots every period of monotonic time, however
// long the work between them takes; a slot nobody was ready for is dropped, not made up later.
type Ticker struct {
	C <-chan time.Time

	c      chan time.Time
	clock  Clock
	period time.Duration
	mu     sync.Mutex
	next   time.Duration
	stop   func() bool
	halted bool
}

// NewTicker starts a ticker whose first slot is one period from now.
func NewTicker(c Clock, period time.Duration) *Ticker {
	ch := make(chan time.Time, 1)
	t := &Ticker{C: ch, c: ch, clock: c, period: period, next: c.Monotonic()}
	t.mu.Lock()
	t.armLocked()
	t.mu.Unlock()
	return t
}

func (t *Ticker) armLocked() {
	now := t.clock.Monotonic()
	for t.next <= now {
		t.next += t.period
	}
	t.stop = t.clock.AfterFunc(t.next-now, t.fire)
}

func (t *Ticker) fire() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.halted {
		return
	}
	select {
	case t.c <- t.clock.Now():
	default:
	}
	t.armLocked()
}

// Stop ends the ticker; no slot is sent after it returns (one already sent may wait in C).
func (t *Ticker) Stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.halted = true
	t.stop()
}

// Config of a lease.
type Config struct {
	Store store.Control
	Key   string
	// TTL of the key, whole seconds (default 2s). Renewed every TTL/3.
	TTL time.Duration
	// Margin: self-fence this long before the TTL could run out (default 500ms).
	Margin time.Duration
	// Value returns what to write on each renewal (JSON that names the holder's session).
	Value func() []byte
	// Mine reports whether a stored value is ours (carries our session): a renewal whose ack was
	// lost is adopted this way.
	Mine   func(value []byte) bool
	Clock  Clock
	Logger *slog.Logger
	// OnFenced runs when the lease can no longer be trusted; OnValid when a renewal is
	// acknowledged again afterwards. Both run on the lease's goroutines; keep them short.
	OnFenced func()
	OnValid  func()
	// ObserveRenewal receives each acknowledged renewal's round trip.
	ObserveRenewal func(time.Duration)
	// Recreate: when the key is gone (it expired while renewals could not reach the store, e.g.
	// while the control bucket elected a leader), create it again with the holder's value instead
	// of giving the lease up. Only a key someone else holds is then lost. A node lease sets it
	// (its session goes on: the fence, not the lease, keeps its writes safe); the coordinator's
	// does not (a leader that lapsed steps down).
	Recreate bool
}

// Lease is a held key.
type Lease struct {
	cfg Config

	mu        sync.Mutex
	rev       uint64
	lastAcked time.Duration // monotonic send time of the last acknowledged write
	// lastAckedWall is the wall time of that acknowledgement, for operators' logs only (to match
	// the store's logs): no decision reads it.
	lastAckedWall time.Time
	// firstUnacked is the send time of the first renewal since lastAcked: if a renewal turns out
	// to have landed without its ack, none was sent earlier than this.
	firstUnacked time.Duration
	unacked      bool
	fenced       bool
	lost         bool        // the store showed the key is someone else's: never valid again
	stopTimer    func() bool // cancels the fence timer
	kick         chan struct{}

	cbMu       sync.Mutex // serialises OnFenced and OnValid
	toldFenced bool       // what the holder was last told
}

func (c *Config) defaults() error {
	if c.TTL == 0 {
		c.TTL = 2 * time.Second
	}
	if c.Margin == 0 {
		c.Margin = 500 * time.Millisecond
	}
	if c.Clock == nil {
		c.Clock = NewSystemClock()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Value == nil || c.Mine == nil || c.Store == nil || c.Key == "" {
		return errors.New("lease: store, key, Value and Mine are required")
	}
	if err := store.ValidTTL(c.TTL); err != nil {
		return err
	}
	if c.Margin >= c.TTL-c.TTL/3 {
		return fmt.Errorf("lease: margin %v leaves no time between renewals (TTL %v)", c.Margin, c.TTL)
	}
	return nil
}

// TryAcquire creates the key once; ErrConflict (wrapped) if someone holds it.
func TryAcquire(ctx context.Context, cfg Config) (*Lease, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	sent := cfg.Clock.Monotonic()
	rev, err := cfg.Store.ControlCreate(ctx, cfg.Key, cfg.Value(), cfg.TTL)
	if err != nil {
		return nil, err
	}
	l := &Lease{cfg: cfg, rev: rev, lastAcked: sent, lastAckedWall: cfg.Clock.Now(), kick: make(chan struct{}, 1)}
	l.armFence(sent)
	return l, nil
}

// Acquire creates the key, waiting out a live holder (its lease must expire first).
func Acquire(ctx context.Context, cfg Config, waiting func(holder store.Entry)) (*Lease, error) {
	for {
		l, err := TryAcquire(ctx, cfg)
		if !errors.Is(err, store.ErrConflict) {
			return l, err
		}
		if e, gerr := cfg.Store.ControlGet(ctx, cfg.Key); gerr == nil && waiting != nil {
			waiting(e)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-cfg.Clock.After(250 * time.Millisecond):
		}
	}
}

// armFence (re)starts the fence timer for a lease last acknowledged for a write sent at sent.
// Callers hold mu, or own the lease alone.
func (l *Lease) armFence(sent time.Duration) {
	if l.stopTimer != nil {
		l.stopTimer()
	}
	l.stopTimer = l.cfg.Clock.AfterFunc(l.untilFence(sent), l.fence)
}

func (l *Lease) untilFence(sent time.Duration) time.Duration {
	return sent + l.cfg.TTL - l.cfg.Margin - l.cfg.Clock.Monotonic()
}

func (l *Lease) fence() {
	l.mu.Lock()
	if l.fenced || l.untilFence(l.lastAcked) > 0 {
		l.mu.Unlock()
		return
	}
	l.fenced = true
	lastWall := l.lastAckedWall
	l.mu.Unlock()
	l.cfg.Logger.Warn("lease self-fenced: no renewal acknowledged in time", "key", l.cfg.Key, "revision", l.Revision(),
		"ttl", l.cfg.TTL, "margin", l.cfg.Margin, "last_acknowledged_at", lastWall)
	l.notify()
}

// forceFence stops trusting the lease at once: the store showed it is no longer ours, whatever
// the time of the last acknowledged renewal says.
func (l *Lease) forceFence() {
	l.mu.Lock()
	if l.fenced {
		l.mu.Unlock()
		return
	}
	l.fenced, l.lost = true, true
	l.mu.Unlock()
	l.cfg.Logger.Warn("lease lost: the key is no longer ours", "key", l.cfg.Key, "revision", l.Revision())
	l.notify()
}

// notify tells the holder the lease's current state if it differs from what it was last told.
// Callbacks run one at a time and always end on the current state, so a fence and a recovery
// racing each other cannot leave the holder paused while the lease is valid.
func (l *Lease) notify() {
	l.cbMu.Lock()
	defer l.cbMu.Unlock()
	l.mu.Lock()
	fenced := l.fenced
	l.mu.Unlock()
	if fenced == l.toldFenced {
		return
	}
	l.toldFenced = fenced
	switch {
	case fenced && l.cfg.OnFenced != nil:
		l.cfg.OnFenced()
	case !fenced && l.cfg.OnValid != nil:
		l.cfg.OnValid()
	}
}

// Valid reports whether the lease may be trusted now (not self-fenced).
func (l *Lease) Valid() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.fenced && !l.lost && l.untilFence(l.lastAcked) > 0
}

// Remaining is how long the lease may still be trusted (≤ 0: not now), on the lease's clock. A
// holder bounds its work by it, so nothing it starts while valid runs past the deadline.
func (l *Lease) Remaining() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fenced || l.lost {
		return 0
	}
	return l.untilFence(l.lastAcked)
}

// Revision is the key's revision as last written by us.
func (l *Lease) Revision() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rev
}

// Renew asks the running lease to renew now (to publish a changed value at once).
func (l *Lease) Renew() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// Run renews every TTL/3 until ctx ends (nil) or the key is no longer ours (ErrLost).
func (l *Lease) Run(ctx context.Context) error {
	defer func() {
		l.mu.Lock()
		l.stopTimer()
		l.mu.Unlock()
	}()
	t := NewTicker(l.cfg.Clock, l.cfg.TTL/3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-l.kick:
		}
		if err := l.renew(ctx); err != nil {
			return err
		}
	}
}

func (l *Lease) renew(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, l.cfg.TTL/3)
	defer cancel()
	sent := l.cfg.Clock.Monotonic()
	l.mu.Lock()
	if !l.unacked {
		l.firstUnacked, l.unacked = sent, true
	}
	l.mu.Unlock()
	rev, err := l.cfg.Store.ControlUpdate(rctx, l.cfg.Key, l.cfg.Value(), l.Revision(), l.cfg.TTL)
	switch {
	case err == nil:
	case errors.Is(err, store.ErrConflict):
		// Either an earlier renewal landed and only its ack was lost, or the key is gone. Read
		// through the stream leader: a lagging replica still shows my value at my revision. The
		// conflict proves the key moved past the revision held, so only a later one can be mine.
		held := l.Revision()
		e, gerr := l.cfg.Store.LatestControl(rctx, l.cfg.Key)
		recreated := false
		if l.cfg.Recreate && errors.Is(gerr, store.ErrNotFound) {
			// It expired: nobody holds it. Take it again, as its holder still; the TTL runs from
			// this create's send time.
			csent := l.cfg.Clock.Monotonic()
			r, cerr := l.cfg.Store.ControlCreate(rctx, l.cfg.Key, l.cfg.Value(), l.cfg.TTL)
			if cerr == nil {
				l.cfg.Logger.Warn("lease re-created after it expired unrenewed", "key", l.cfg.Key, "revision", r, "previous_revision", held)
				rev, sent, recreated = r, csent, true
			} else if !errors.Is(cerr, store.ErrConflict) {
				l.cfg.Logger.Warn("lease renewal failed", "key", l.cfg.Key, "err", cerr)
				return nil // unknown: the next renewal reads it again
			}
		}
		if recreated {
			break
		}
		if gerr != nil || !l.cfg.Mine(e.Value) || e.Revision <= held {
			l.forceFence()
			if gerr == nil && e.Revision <= held {
				gerr = fmt.Errorf("read back revision %d, not past the %d held", e.Revision, held)
			}
			return fmt.Errorf("%s: %w (read back: %v)", l.cfg.Key, ErrLost, gerr)
		}
		l.cfg.Logger.Info("adopted a renewal whose acknowledgement was lost", "key", l.cfg.Key, "revision", e.Revision)
		rev = e.Revision
		// It was one of the renewals sent since the last ack: count from the earliest of them.
		l.mu.Lock()
		sent = l.firstUnacked
		l.mu.Unlock()
	default:
		if ctx.Err() != nil {
			return nil
		}
		l.cfg.Logger.Warn("lease renewal failed", "key", l.cfg.Key, "err", err)
		return nil // the fence timer decides when this stops being a lease
	}
	if l.cfg.ObserveRenewal != nil {
		l.cfg.ObserveRenewal(l.cfg.Clock.Monotonic() - sent)
	}
	l.mu.Lock()
	l.rev = rev
	if sent > l.lastAcked {
		l.lastAcked = sent
	}
	l.lastAckedWall = l.cfg.Clock.Now()
	l.unacked = false
	wasFenced := l.fenced && l.untilFence(l.lastAcked) > 0
	if wasFenced {
		l.fenced = false
	}
	l.armFence(l.lastAcked)
	l.mu.Unlock()
	if wasFenced {
		l.cfg.Logger.Info("lease valid again", "key", l.cfg.Key, "revision", rev)
		l.notify()
	}
	return nil
}

// Release deletes the key if it is still at our revision (a compare-and-delete).
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	l.stopTimer()
	l.mu.Unlock()
	return l.cfg.Store.ControlDelete(ctx, l.cfg.Key, l.Revision())
}
