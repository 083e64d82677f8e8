// Package demo drives tickd's demo dungeons: it creates demo-0 … demo-N-1 if missing and plays
// simulated players who join and attack through the real command path (NATS request/reply), so
// bosses lose HP, change phase, die and drop loot.
package demo

import (
	"container/heap"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tickfence/tickfence/internal/hdr"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/shard/wire"
)

// Config of the demo driver.
type Config struct {
	// Client sends the commands; once the dungeons are created, Start sets its GiveUp to GiveUp
	// if it has none (the players' commands are bounded by it, not by a context each).
	Client    *natscmd.Client
	Instances int
	Players   int           // per dungeon (default 4)
	Every     time.Duration // between two attacks of one player, on average (default 1s)
	// Idle: create the dungeons and play nothing (idle instances: what passivation is for).
	Idle   bool
	Logger *slog.Logger
}

// Driver plays the demo.
type Driver struct {
	cfg      Config
	sent     atomic.Uint64
	failed   atomic.Uint64
	wg       sync.WaitGroup // the loops
	inflight sync.WaitGroup // commands sent and not settled
	cancel   context.CancelFunc
	// The commands of player p: joins[p], attacks[p].
	joins, attacks [][]byte
	progress       atomic.Int64
	// rtt holds the round trips (retries included) of the commands answered since the last
	// RoundTrips call.
	rtt *hdr.Window
}

// GiveUp is how long a player tries one command before it counts it as unanswered.
const GiveUp = 10 * time.Second

// ID names the i-th demo dungeon.
func ID(i int) string { return fmt.Sprintf("demo-%d", i) }

// Start creates the dungeons (showing progress) and starts the players. Stop ends them.
func Start(ctx context.Context, cfg Config) (*Driver, error) {
	if cfg.Players <= 0 {
		cfg.Players = 4
	}
	if cfg.Every <= 0 {
		cfg.Every = time.Second
	}
	d := &Driver{cfg: cfg, rtt: hdr.NewWindow(4)}
	if err := d.create(ctx); err != nil { // bounded by ctx alone
		return nil, err
	}
	if cfg.Client.GiveUp <= 0 {
		cfg.Client.GiveUp = GiveUp // before any player sends
	}
	pctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	if cfg.Idle {
		return d, nil
	}
	// Players' commands are encoded once: every dungeon's players send the same few commands.
	body := func(cmd map[string]any) []byte {
		b, err := wire.Canonical(cmd)
		if err != nil {
			panic(err) // constant maps of strings
		}
		return b
	}
	for p := range cfg.Players {
		d.joins = append(d.joins, body(map[string]any{"type": "join", "player": fmt.Sprintf("p%d", p)}))
		d.attacks = append(d.attacks, body(map[string]any{"type": "attack", "player": fmt.Sprintf("p%d", p)}))
	}
	loops := make([]*loop, min(runtime.GOMAXPROCS(0), max(cfg.Instances, 1)))
	for k := range loops {
		loops[k] = &loop{wake: make(chan struct{}, 1)}
	}
	now := time.Now()
	for i := 0; i < cfg.Instances; i++ {
		l := loops[i%len(loops)]
		dg := &dungeon{id: ID(i), rng: rand.New(rand.NewPCG(uint64(i), uint64(now.UnixNano()))), loop: l,
			next: d.joins[0], gap: cfg.Every / time.Duration(cfg.Players)}
		dg.due = now
		l.due = append(l.due, dg) // all due now: already a heap
	}
	for _, l := range loops {
		d.wg.Add(1)
		go d.run(pctx, l)
	}
	return d, nil
}

func (d *Driver) create(ctx context.Context) error {
	start := time.Now()
	sem := make(chan struct{}, 32)
	errs := make(chan error, d.cfg.Instances)
	var wg sync.WaitGroup
	var done atomic.Int64
	for i := 0; i < d.cfg.Instances; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			// The same request ID on every start: an existing dungeon answers already_exists.
			r, err := d.cfg.Client.SendMap(ctx, ID(i), "demo-create", map[string]any{"type": "create", "kind": "dungeon"})
			if err != nil {
				errs <- fmt.Errorf("create %s: %w", ID(i), err)
				return
			}
			if !r.OK && r.Error.Code != "already_exists" {
				errs <- fmt.Errorf("create %s: %s", ID(i), r.Error)
				return
			}
			if n := done.Add(1); n%25 == 0 || int(n) == d.cfg.Instances {
				d.cfg.Logger.Info("demo dungeons ready", "done", n, "of", d.cfg.Instances)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	d.cfg.Logger.Info("demo dungeons created or found", "instances", d.cfg.Instances, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// The players of every dungeon send one command at a time, as real players behind one gateway
// connection would if each waited for their last action's answer: first the joins, then an
// attack of one of them at random every Every/Players on average. They take no goroutine each:
// a few loops send the commands that are due (Client.Go) and the answers schedule the next
// ones. With a goroutine per dungeon, answers coming in together (after a collection's pause)
// made hundreds of them runnable at once, and the node's tick workers queued behind them for
// 100 ms and more (execution traces of skipped ticks at 5 000 dungeons).

// dungeon is one dungeon's players.
type dungeon struct {
	id     string
	rng    *rand.Rand
	joined int           // players joined so far
	due    time.Time     // when its next command is due
	loop   *loop         // the loop that sends its commands
	next   []byte        // the command to send when due
	start  time.Time     // when the command in flight was sent
	gap    time.Duration // Every/Players
}

// loop sends the commands of its dungeons when they are due.
type loop struct {
	mu   sync.Mutex
	due  dueHeap
	wake chan struct{}
}

type dueHeap []*dungeon

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(*dungeon)) }
func (h *dueHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return x
}

// schedule makes dg's next command due at due.
func (l *loop) schedule(dg *dungeon, due time.Time) {
	l.mu.Lock()
	dg.due = due
	heap.Push(&l.due, dg)
	first := l.due[0] == dg
	l.mu.Unlock()
	if first {
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
}

func (d *Driver) run(ctx context.Context, l *loop) {
	defer d.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var batch []*dungeon
	for {
		now := time.Now()
		l.mu.Lock()
		for len(l.due) > 0 && !l.due[0].due.After(now) {
			batch = append(batch, heap.Pop(&l.due).(*dungeon))
		}
		wait := time.Hour
		if len(l.due) > 0 {
			wait = l.due[0].due.Sub(now)
		}
		l.mu.Unlock()
		for i, dg := range batch {
			d.send(ctx, dg)
			batch[i] = nil
		}
		batch = batch[:0]
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-l.wake:
		case <-timer.C:
		}
	}
}

// send sends dg's due command; its answer schedules the next.
func (d *Driver) send(ctx context.Context, dg *dungeon) {
	dg.start = time.Now()
	d.inflight.Add(1)
	// The compact form (client session): the instance remembers only what is in flight. The
	// client gives up after GiveUp (Start sets it), without a context per command.
	d.cfg.Client.Go(ctx, dg.id, "", dg.next, false, func(_ []byte, _ wire.Status, err error) {
		defer d.inflight.Done()
		d.sent.Add(1)
		switch {
		case err == nil:
			d.rtt.Record(time.Since(dg.start))
		case ctx.Err() == nil:
			d.failed.Add(1)
		}
		if ctx.Err() != nil {
			return
		}
		if dg.joined < len(d.joins) {
			dg.joined++
		}
		now := time.Now()
		if dg.joined < len(d.joins) {
			dg.next = d.joins[dg.joined]
			dg.loop.schedule(dg, now)
			return
		}
		dg.next = d.attacks[dg.rng.IntN(len(d.attacks))]
		dg.loop.schedule(dg, now.Add(dg.gap/2+time.Duration(dg.rng.Int64N(int64(dg.gap)+1))))
	})
}

// Sent is the number of commands sent and how many of them got no answer.
func (d *Driver) Sent() (sent, failed uint64) { return d.sent.Load(), d.failed.Load() }

// RoundTrips returns the round trips, as a player sees them (every retransmission of the client
// included), of the commands answered since the previous call.
func (d *Driver) RoundTrips() *hdr.Histogram {
	return d.rtt.Take()
}

// Stop stops the players and waits for their last commands (an attempt in flight ends with its
// answer or its timeout, Client.Attempt).
func (d *Driver) Stop() {
	d.cancel()
	d.wg.Wait()
	d.inflight.Wait()
}
