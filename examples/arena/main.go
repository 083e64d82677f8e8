// Command arena is a game server built on tickfence: it registers its own kind of instance, an
// arena with moving players and a shrinking safe zone (arena.go), and runs a tickfence node.
// With -play it also creates an arena and plays bots in it, printing the arena's status. See
// README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tickfence/tickfence"
	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/shard/natscmd"
)

func main() {
	natsURL := flag.String("nats", os.Getenv("NATS_URL"), "NATS server with JetStream (default $NATS_URL; empty: an embedded one)")
	data := flag.String("data", "arena-data", "directory of the embedded server's files")
	nodeID := flag.String("node-id", "", "this node's name in the cluster (default: the host name)")
	play := flag.Bool("play", false, "create arena-1 and play four bots in it")
	runFor := flag.Duration("for", 0, "stop after this long (0: until interrupted)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *runFor > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *runFor)
		defer cancel()
	}
	opt := tickfence.Options{Kinds: []actor.Kind{Kind{}}, NATS: *natsURL, DataDir: *data, NodeID: *nodeID, Logger: log}
	if !*play {
		if err := tickfence.Run(ctx, opt); err != nil {
			fmt.Fprintln(os.Stderr, "arena:", err)
			os.Exit(1)
		}
		return
	}
	node, err := tickfence.Start(ctx, opt)
	if err != nil {
		fmt.Fprintln(os.Stderr, "arena:", err)
		os.Exit(1)
	}
	client, err := node.Client()
	if err == nil {
		err = playBots(ctx, client)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if serr := node.Stop(sctx); err == nil {
		err = serr
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "arena:", err)
		os.Exit(1)
	}
}

// playBots creates arena-1 (or finds it), joins four bots and moves them at random, ten moves a
// second, printing the arena's status every second until ctx ends.
func playBots(ctx context.Context, c *natscmd.Client) error {
	const id = "arena-1"
	r, err := c.SendMap(ctx, id, "create-arena-1", map[string]any{"type": "create", "kind": "arena"})
	if err != nil {
		return err
	}
	if !r.OK && r.Error.Code != "already_exists" {
		return fmt.Errorf("create %s: %s", id, r.Error)
	}
	bots := []string{"ann", "bob", "cid", "dee"}
	for _, b := range bots {
		// An empty request ID: the client numbers the command in its session (exactly once).
		if r, err := c.SendMap(ctx, id, "", map[string]any{"type": "join", "player": b}); err != nil || !r.OK {
			return fmt.Errorf("join %s: %v %v", b, err, r.Error)
		}
	}
	move := time.NewTicker(100 * time.Millisecond)
	defer move.Stop()
	show := time.NewTicker(time.Second)
	defer show.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-show.C:
			r, err := c.SendMap(ctx, id, "", map[string]any{"type": "status"})
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			fmt.Printf("%s: %v\n", id, r.Result)
			if m, ok := r.Result.(map[string]any); ok && m["winner"] != "" && m["winner"] != nil {
				if _, err := c.SendMap(ctx, id, "", map[string]any{"type": "restart"}); err != nil && ctx.Err() == nil {
					return err
				}
			}
		case <-move.C:
			b := bots[rand.IntN(len(bots))]
			// Bots drift towards the centre, with some noise.
			_, err := c.SendMap(ctx, id, "", map[string]any{"type": "move", "player": b,
				"dx": rand.IntN(2*3+1) - 2, "dy": rand.IntN(2*3+1) - 2})
			if err != nil && ctx.Err() == nil {
				return err
			}
		}
	}
}
