// Command raid is a game server built on tickfence: four heroes against a boss whose fire
// scorches a 100 KiB terrain (raid.go, frames.go), run as a tickfence node. With -play it also
// creates raid-1 and plays four bots in it, each a player's client of its own, and applies the
// loot the raid drops exactly once (bots.go). See docs/game-guide.md.
//
//	go run . -play -for 20s                                  # one process: an embedded NATS server, a node, the bots
//	go run . -nats nats://127.0.0.1:4222 -node-id r1          # a node of a cluster (tickd server is its NATS)
//	go run . -nats nats://127.0.0.1:4222 -node=false -play    # the bots alone, against the cluster
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence"
	"github.com/tickfence/tickfence/actor"
)

func main() {
	natsURL := flag.String("nats", os.Getenv("NATS_URL"), "NATS server with JetStream (default $NATS_URL; empty: an embedded one)")
	data := flag.String("data", "raid-data", "directory of the embedded server's files")
	listen := flag.String("listen", "", "HOST:PORT the embedded server accepts clients on (default: a free port with -play, else none)")
	nodeID := flag.String("node-id", "", "this node's name in the cluster (default: the host name)")
	runNode := flag.Bool("node", true, "run a tickfence node in this process")
	play := flag.Bool("play", false, "create raid-1 and play four bots in it")
	bossHP := flag.Int("boss-hp", BossHP, "the boss's HP when -play creates raid-1")
	runFor := flag.Duration("for", 0, "stop after this long (0: until interrupted)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *runFor > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *runFor)
		defer cancel()
	}
	if err := run(ctx, *natsURL, *data, *listen, *nodeID, *runNode, *play, *bossHP); err != nil {
		fmt.Fprintln(os.Stderr, "raid:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, url, data, listen, nodeID string, runNode, play bool, bossHP int) error {
	if !runNode {
		if !play || url == "" {
			return errors.New("-node=false runs the bots only: give -play and -nats (or $NATS_URL)")
		}
		return playRaid(ctx, url, bossHP)
	}
	opt := tickfence.Options{
		Kinds:   []actor.Kind{Kind{}}, // every node of the cluster registers the same kinds
		NATS:    url,                  // "": an embedded JetStream server, its files in DataDir
		DataDir: data,
		NodeID:  nodeID,
		Logger:  slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	if url == "" {
		opt.Listen = listen
		if opt.Listen == "" && play {
			opt.Listen = "127.0.0.1:0" // the bots are NATS clients like any other
		}
	}
	node, err := start(ctx, opt)
	if err != nil {
		return err
	}
	if url == "" {
		url = node.ClientURL()
	}
	if play {
		err = playRaid(ctx, url, bossHP)
	} else {
		select {
		case <-ctx.Done(): // Ctrl-C, SIGTERM: hand the shards off and leave
		case err := <-node.Err(): // it stopped by itself (its store gone for good)
			node.Close()
			return err
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if serr := node.Stop(sctx); err == nil {
		err = serr
	}
	return err
}

// start starts the node, waiting up to 30 s for a NATS server that is not up yet.
func start(ctx context.Context, opt tickfence.Options) (*tickfence.Node, error) {
	for wait := 30; ; wait-- {
		node, err := tickfence.Start(ctx, opt)
		if !errors.Is(err, nats.ErrNoServers) || wait == 0 {
			return node, err
		}
		fmt.Fprintf(os.Stderr, "waiting for NATS at %s\n", opt.NATS)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
