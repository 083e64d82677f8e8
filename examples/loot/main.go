// Command loot is an example effects consumer: the loot service of the demo dungeon. It applies
// every "loot" effect exactly once — it records each applied effect key with a create in its own
// KV bucket, which refuses a key seen before — and prints each grant as it applies it.
//
//	go run ./cmd/tickd --nats-listen 127.0.0.1:4222 --demo 10 --demo-rate 20   # kills come quickly
//	go run ./examples/loot --nats nats://127.0.0.1:4222
//
// Start it after the cluster's storage exists (tickd above makes it; with the roles enforced, an
// admin's tickctl cluster init): a consumer never makes the effects stream, and exits naming what
// is missing if it is not there.
//
// A real service would apply the grant and record the key in one transaction of its own
// database; the KV create stands in for that here.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/tickfence/tickfence/shard/natscmd"
)

func main() {
	url := flag.String("nats", envOr("NATS_URL", nats.DefaultURL), "NATS server")
	name := flag.String("name", "loot-service", "durable consumer name (one per service)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *url, *name); err != nil && !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}

func run(ctx context.Context, url, name string) error {
	nc, err := nats.Connect(url, nats.Name("loot service"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	applied, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "loot-applied"})
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "applying loot effects from", natscmd.EffectsStream)
	return natscmd.ConsumeEffects(ctx, nc, name, []string{"loot"}, func(ctx context.Context, e natscmd.EffectMsg) error {
		var grant struct {
			Run    int    `msgpack:"run"`
			Player string `msgpack:"player"`
			Item   string `msgpack:"item"`
		}
		if err := msgpack.Unmarshal(e.Payload, &grant); err != nil {
			fmt.Fprintf(os.Stderr, "skipping %s: %v\n", e.Key, err)
			return nil // malformed: never applicable, do not redeliver
		}
		// KV keys cannot hold ':' — the key's parts are joined with '.' instead.
		if _, err := applied.Create(ctx, kvKey(e.Key), []byte(grant.Player)); errors.Is(err, jetstream.ErrKeyExists) {
			fmt.Printf("duplicate %s ignored\n", e.Key)
			return nil
		} else if err != nil {
			return err // not recorded: redelivered later
		}
		fmt.Printf("%s: %s gets %q (run %d of %s)\n", e.Key, grant.Player, grant.Item, grant.Run, e.Instance)
		return nil
	})
}

func kvKey(k string) string {
	b := []byte(k)
	for i, c := range b {
		if c == ':' {
			b[i] = '.'
		}
	}
	return string(b)
}

func envOr(k, d string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return d
}
