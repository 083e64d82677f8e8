package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickfence/tickfence/client"
	"github.com/tickfence/tickfence/shard/natscmd"
)

const raidID = "raid-1"

var botNames = []string{"ada", "bob", "cid", "dee"}

// JoinCmd is tickfence's own join, for a game that tracks its players; Joined its answer.
type JoinCmd struct {
	Type string `msgpack:"type"` // "join"
}

// Joined is the answer to a join: the player and the tick it joined at.
type Joined struct {
	Player string `msgpack:"player"`
	Since  uint64 `msgpack:"since"`
}

// playRaid creates raid-1 (or finds it), starts a bot per hero and a loot service, and prints
// what the raid shows every watcher until ctx ends.
func playRaid(ctx context.Context, url string, bossHP int) error {
	c, err := dial(ctx, url) // trusted: it creates the raid, watches it and applies its loot
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.Create(ctx, raidID, "raid", map[string]any{"boss_hp": bossHP}); err != nil && client.Code(err) != client.CodeExists {
		return fmt.Errorf("create %s: %w", raidID, err)
	}
	// The boss as it happens: a fast watch, which a failover may rewind (Frame.Rewound). The events
	// once stored: a durable watch, so a kill it prints is never undone.
	w, err := c.Watch(ctx, raidID, "")
	if err != nil {
		return err
	}
	events, err := c.WatchDurable(ctx, raidID, "events")
	if err != nil {
		return err
	}
	var loot lootCount
	go func() {
		if err := applyLoot(ctx, c.Conn(), &loot); err != nil && ctx.Err() == nil {
			fmt.Fprintln(os.Stderr, "loot service:", err)
		}
	}()
	for _, name := range botNames {
		go bot(ctx, url, name)
	}
	show := time.NewTicker(time.Second)
	defer show.Stop()
	var last BossFrame
	for {
		select {
		case f, ok := <-w.C:
			if !ok {
				return nil // ctx ended
			}
			if f.Rewound {
				fmt.Printf("%s rewound to tick %d: a failover undid the frames shown after it\n", raidID, f.Stored)
			}
			if err := client.Decode(f.Payload, &last); err != nil {
				return err
			}
		case f, ok := <-events.C:
			if !ok {
				return nil
			}
			var text string
			_ = client.Decode(f.Payload, &text)
			fmt.Printf("%s tick %d: %s\n", raidID, f.Tick, text)
		case <-show.C:
			var heroes []string
			for _, h := range last.Heroes {
				heroes = append(heroes, fmt.Sprintf("%s (%s) %d HP", h.Name, h.Class, h.HP))
			}
			fmt.Printf("%s tick %d run %d: boss %d/%d HP, phase %d, %d tiles scorched | %s | loot applied %d, repeats ignored %d\n",
				raidID, last.Tick, last.Run, last.HP, last.MaxHP, last.Phase, last.Scorched, strings.Join(heroes, ", "), loot.applied.Load(), loot.repeats.Load())
		}
	}
}

// dial connects a client, waiting while the cluster is still being made (its nodes starting).
func dial(ctx context.Context, url string, opts ...client.Option) (*client.Client, error) {
	opts = append(opts, client.GiveUp(30*time.Second)) // a command is retried for 30 s: through any failover
	for {
		c, err := client.Dial(ctx, url, opts...)
		if err == nil || ctx.Err() != nil {
			return c, err
		}
		fmt.Fprintf(os.Stderr, "waiting for the cluster at %s: %v\n", url, err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// bot plays one hero: a player's client of its own, acting on its HUD frames.
func bot(ctx context.Context, url, name string) {
	for ctx.Err() == nil {
		if err := playHero(ctx, url, name); err != nil && ctx.Err() == nil {
			fmt.Fprintf(os.Stderr, "%s: %v (again in a second)\n", name, err)
			time.Sleep(time.Second)
		}
	}
}

func playHero(ctx context.Context, url, name string) error {
	c, err := dial(ctx, url, client.Player(name)) // sends as name, on its own subjects
	if err != nil {
		return err
	}
	defer c.Close()
	var j Joined
	if err := c.Send(ctx, raidID, JoinCmd{Type: "join"}, &j); err != nil {
		return err
	}
	// A player's watch receives its own frames (f.To == name) and keeps it in the raid with a
	// heartbeat every 5 s; "hud" subscribes that topic only.
	w, err := c.Watch(ctx, raidID, "hud")
	if err != nil {
		return err
	}
	for f := range w.C {
		var hud HUD
		if err := client.Decode(f.Payload, &hud); err != nil || f.To != name || hud.DownUntil != 0 {
			continue
		}
		if hud.Burning {
			err = c.Send(ctx, raidID, MoveCmd{Type: "move", DX: rand.IntN(17) - 8, DY: rand.IntN(17) - 8}, nil)
		}
		for _, a := range hud.Abilities {
			if err != nil || a.ReadyAt > hud.Tick {
				continue
			}
			var used Used
			err = c.Send(ctx, raidID, AbilityCmd{Type: "ability", Ability: a.Name}, &used)
		}
		switch client.Code(err) {
		case "", "cooldown", "down", "no_boss": // the raid moved on since this frame: the next one says
		default:
			return err
		}
		err = nil
	}
	return ctx.Err()
}

type lootCount struct{ applied, repeats atomic.Int64 }

// applyLoot is the loot service: it applies every "loot" effect exactly once. Effects are
// delivered at least once (a new owner republishes what its loaded record holds), so it keys on
// the effect's key: a KV create refuses a key it has seen. A real game grants the item and
// records the key in one transaction of its own database.
func applyLoot(ctx context.Context, nc *nats.Conn, n *lootCount) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	applied, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "raid-loot"})
	if err != nil {
		return err
	}
	return natscmd.ConsumeEffects(ctx, nc, "raid-loot", []string{"loot"}, func(ctx context.Context, e natscmd.EffectMsg) error {
		var l Loot
		if err := client.Decode(e.Payload, &l); err != nil {
			return nil // never applicable: not redelivered
		}
		_, err := applied.Create(ctx, strings.ReplaceAll(e.Key, ":", "."), []byte(l.Player))
		switch {
		case errors.Is(err, jetstream.ErrKeyExists):
			n.repeats.Add(1)
			return nil
		case err != nil:
			return err // not recorded: delivered again
		}
		n.applied.Add(1)
		fmt.Printf("loot %s: %s gets the %s (run %d)\n", e.Key, l.Player, l.Item, l.Run)
		return nil
	})
}
