// Command arena is a game server built on tickfence: it registers its own kind of instance, an
// arena with moving players and a shrinking safe zone (arena.go), and runs a tickfence node.
// With -play it also creates an arena and plays bots in it, printing the arena's status. See
// README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/vmihailenco/msgpack/v5"

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
// second. It follows the arena through its frames, watched durably: it prints the status every
// second and announces each round's winner — never one a failover undoes — then starts the next
// round, until ctx ends.
func playBots(ctx context.Context, c *natscmd.Client) error {
	const id = "arena-1"
	r, err := c.SendMap(ctx, id, "create-arena-1", map[string]any{"type": "create", "kind": "arena"})
	if err != nil {
		return err
	}
	if !r.OK && r.Error.Code != "already_exists" {
		return fmt.Errorf("create %s: %s", id, r.Error)
	}
	// Durable: a frame comes once the write of its tick is stored. A fast watch (c.Watch) would
	// show each at once, but after a failover the new owner goes on from its stored tick and a
	// winner shown may never have won: its next frame says Rewound, too late for the
	// announcement.
	w, err := c.WatchDurable(ctx, id)
	if err != nil {
		return err
	}
	bots := []string{"ann", "bob", "cid", "dee"}
	for _, b := range bots {
		// An empty request ID: the client numbers the command in its session (exactly once).
		if r, err := c.SendMap(ctx, id, "", map[string]any{"type": "join", "player": b}); err != nil || !r.OK {
			return fmt.Errorf("join %s: %v %v", b, err, r.Error)
		}
	}
	won := make(chan int, 1)
	go follow(ctx, id, w, os.Stdout, time.Second, func(round int) {
		select {
		case won <- round:
		default:
		}
	})
	move := time.NewTicker(100 * time.Millisecond)
	defer move.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-won:
			if _, err := c.SendMap(ctx, id, "", map[string]any{"type": "restart"}); err != nil && ctx.Err() == nil {
				return err
			}
		case <-move.C:
			b := bots[rand.IntN(len(bots))]
			// Bots drift towards the centre, with some noise.
			_, err := c.SendMap(ctx, id, "", map[string]any{"type": "move", "player": b,
				"dx": rand.IntN(MaxStep+3) - 2, "dy": rand.IntN(MaxStep+3) - 2}) // -2 … MaxStep
			if err != nil && ctx.Err() == nil {
				return err
			}
		}
	}
}

// status is an arena's frame: what Arena.status returns.
type status struct {
	Tick    uint64 `msgpack:"tick"`
	Zone    int    `msgpack:"zone"`
	Players int    `msgpack:"players"`
	Alive   int    `msgpack:"alive"`
	Winner  string `msgpack:"winner"`
	Rounds  int    `msgpack:"rounds"`
}

// follow prints an arena's status from its frames, at most one line per every, and each round's
// winner once (calling won with the round's number); a frame that says Rewound — frames the watch
// received were undone by a failover — is said too. It returns when the watch ends.
func follow(ctx context.Context, id string, w *natscmd.Watch, out io.Writer, every time.Duration, won func(round int)) {
	var last time.Time
	announced := -1
	for f := range w.C {
		var st status
		if err := msgpack.Unmarshal(f.Payload, &st); err != nil {
			continue
		}
		if f.Rewound {
			fmt.Fprintf(out, "%s: rewound: the arena went on from its stored tick %d (a failover); what was not stored is gone\n", id, f.Stored)
		}
		if announced < 0 {
			announced = st.Rounds // rounds won before we watched are not news
		}
		if st.Winner != "" && st.Rounds > announced {
			announced = st.Rounds
			fmt.Fprintf(out, "%s: round %d won by %s at tick %d\n", id, st.Rounds, st.Winner, st.Tick)
			won(st.Rounds)
		}
		if time.Since(last) >= every {
			last = time.Now()
			fmt.Fprintf(out, "%s: tick %d zone %d alive %d/%d rounds %d\n", id, st.Tick, st.Zone, st.Alive, st.Players, st.Rounds)
		}
	}
}
