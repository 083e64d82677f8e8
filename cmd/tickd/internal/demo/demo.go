// Package demo drives tickd's demo dungeons: it creates demo-0 … demo-N-1 if missing and plays
// simulated players who join and attack through the real command path (NATS request/reply), so
// bosses lose HP, change phase, die and drop loot.
package demo

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
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
	Logger    *slog.Logger
}

// Driver plays the demo.
type Driver struct {
	cfg      Config
	sent     atomic.Uint64
	failed   atomic.Uint64
	wg       sync.WaitGroup
	cancel   context.CancelFunc
	progress atomic.Int64
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
	for i := 0; i < cfg.Instances; i++ {
		d.wg.Add(1)
		go d.play(pctx, i)
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

func (d *Driver) play(ctx context.Context, i int) {
	defer d.wg.Done()
	id := ID(i)
	rng := rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano())))
	// Players' commands are encoded once: a player sends the same few commands all the time.
	body := func(cmd map[string]any) []byte {
		b, err := wire.Canonical(cmd)
		if err != nil {
			panic(err) // constant maps of strings
		}
		return b
	}
	joins, attacks := make([][]byte, d.cfg.Players), make([][]byte, d.cfg.Players)
	for p := range d.cfg.Players {
		joins[p] = body(map[string]any{"type": "join", "player": fmt.Sprintf("p%d", p)})
		attacks[p] = body(map[string]any{"type": "attack", "player": fmt.Sprintf("p%d", p)})
	}
	send := func(cmd []byte) {
		start := time.Now()
		// The compact form (client session): the instance remembers only what is in flight.
		// The client gives up after GiveUp (Start sets it), without a context per command.
		_, _, err := d.cfg.Client.Exec(ctx, id, "", cmd, false)
		d.sent.Add(1)
		switch {
		case err == nil:
			d.rtt.Record(time.Since(start))
		case ctx.Err() == nil:
			d.failed.Add(1)
		}
	}
	for p := 0; p < d.cfg.Players; p++ {
		send(joins[p])
	}
	gap := d.cfg.Every / time.Duration(d.cfg.Players)
	t := time.NewTimer(time.Duration(rng.Int64N(int64(gap) + 1)))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		send(attacks[rng.IntN(d.cfg.Players)])
		t.Reset(gap/2 + time.Duration(rng.Int64N(int64(gap)+1)))
	}
}

// Sent is the number of commands sent and how many of them got no answer.
func (d *Driver) Sent() (sent, failed uint64) { return d.sent.Load(), d.failed.Load() }

// RoundTrips returns the round trips, as a player sees them (every retransmission of the client
// included), of the commands answered since the previous call.
func (d *Driver) RoundTrips() *hdr.Histogram {
	return d.rtt.Take()
}

// Stop stops the players and waits for their last commands.
func (d *Driver) Stop() {
	d.cancel()
	d.wg.Wait()
}
