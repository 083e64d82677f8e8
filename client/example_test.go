package client_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/tickfence/tickfence"
	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/actor/dungeon"
	"github.com/tickfence/tickfence/client"
)

// A game's client: it dials the cluster, which tells it its shard count, creates a dungeon,
// sends commands as Go values with their results decoded into Go values, and watches the
// dungeon's frames.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url, stop := exampleNode(ctx) // a node to talk to: yours runs elsewhere (tickd, or your game's tickfence.Run)
	defer stop()

	c, err := client.Dial(ctx, url) // add client.Creds(file) on a server enforcing roles
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	fmt.Println("shards:", c.Shards())

	if err := c.Create(ctx, "dungeon-7", "dungeon", map[string]any{"boss_hp": 1000}); err != nil && client.Code(err) != client.CodeExists {
		log.Fatal(err)
	}
	type command struct {
		Type   string `msgpack:"type"`
		Player string `msgpack:"player"`
	}
	var joined struct {
		Players int `msgpack:"players"`
	}
	if err := c.Send(ctx, "dungeon-7", command{Type: "join", Player: "ada"}, &joined); err != nil {
		log.Fatal(err)
	}
	fmt.Println("players:", joined.Players)

	var hit map[string]any // numbers in an any are int64 or float64, whatever their width on the wire
	if err := c.Send(ctx, "dungeon-7", command{Type: "attack", Player: "ada"}, &hit); err != nil {
		log.Fatal(err) // errors.Is(err, client.ErrOutcomeUnknown): it may have been applied
	}
	fmt.Printf("boss HP after the hit: %T %v\n", hit["hp"], hit["hp"].(int64) < 1000)

	w, err := c.Watch(ctx, "dungeon-7") // until ctx ends; c.Watch(ctx, id, "topic") for chosen topics only
	if err != nil {
		log.Fatal(err)
	}
	var frame struct {
		HP    int64  `msgpack:"hp"`
		Phase string `msgpack:"phase"`
	}
	f := <-w.C
	if err := client.Decode(f.Payload, &frame); err != nil {
		log.Fatal(err)
	}
	fmt.Println("frame: phase", frame.Phase, "hp below 1000:", frame.HP < 1000)
	// Output:
	// shards: 16
	// players: 1
	// boss HP after the hit: int64 true
	// frame: phase 1 hp below 1000: true
}

// A player's client on a server enforcing the roles: its own credential (tickctl auth user DIR
// gateway ada) may not read the cluster record, so it is given the shard count; it then sends as
// player ada, on the only subjects that credential may publish on.
func ExampleDial_player() {
	ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	c, err := client.Dial(ctx, "nats://game.example:4222", client.Creds("ada.creds"), client.Shards(256),
		client.TLS("ca.pem", "", ""))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	err = c.Send(ctx, "dungeon-7", map[string]any{"type": "attack", "player": "ada"}, nil)
	if err != nil {
		log.Fatal(err)
	}
}

// exampleNode starts a node on an embedded server, listening on a loopback port.
func exampleNode(ctx context.Context) (url string, stop func()) {
	dir, err := os.MkdirTemp("", "tickfence-example")
	if err != nil {
		log.Fatal(err)
	}
	n, err := tickfence.Start(ctx, tickfence.Options{Kinds: []actor.Kind{dungeon.Kind{FrameEvery: 1}}, NodeID: "example",
		DataDir: dir, Listen: "127.0.0.1:0", Shards: 16, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	return n.ClientURL(), func() {
		n.Close()
		os.RemoveAll(dir)
	}
}
