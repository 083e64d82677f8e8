package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tickfence/tickfence"
	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/actor/dungeon"
	"github.com/tickfence/tickfence/client"
)

// BenchmarkWakeJetStream is a command's round trip through NATS to a demo dungeon on a node with
// its embedded JetStream server: "awake", a dungeon loaded and ticking; "passivated", one its kind
// passivated (KindOptions.Passivate), which the command wakes: load and registration from the
// store, Restore, its first tick (in the next phase bucket: Schedule.AddSoon), the write of the
// command's effect. A command to an awake instance waits for its instance's next tick (up to a
// period, 50 ms at 20 Hz), a woken one's ticks at once. p50 and p99 are reported besides the
// mean.
func BenchmarkWakeJetStream(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const passivate = 200 * time.Millisecond
	n, err := tickfence.Start(ctx, tickfence.Options{Kinds: []actor.Kind{dungeon.Kind{Options: actor.KindOptions{Passivate: passivate}}, awakeDungeon{}},
		NodeID: "bench", DataDir: b.TempDir(), Listen: "127.0.0.1:0", Shards: 16})
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close()
	c, err := client.Dial(ctx, n.ClientURL(), client.GiveUp(30*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	const pool = 32
	ids, awake := make([]string, pool), make([]string, pool)
	for i := range ids {
		ids[i], awake[i] = fmt.Sprintf("w%d", i), fmt.Sprintf("a%d", i)
		if err := c.Create(ctx, ids[i], "dungeon", nil); err != nil {
			b.Fatal(err)
		}
		if err := c.Create(ctx, awake[i], "dungeon-awake", nil); err != nil {
			b.Fatal(err)
		}
	}
	host := n.Shard().Host()
	allPassive := func() {
		for host.Passive() < pool {
			time.Sleep(5 * time.Millisecond)
		}
	}
	join := func(id string, i int) {
		if err := c.Send(ctx, id, map[string]any{"type": "join", "player": fmt.Sprintf("p%d", i)}, nil); err != nil {
			b.Fatal(err)
		}
	}
	report := func(b *testing.B, took []time.Duration) {
		slices.Sort(took)
		b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99-ms")
	}
	b.Run("awake", func(b *testing.B) {
		rng := rand.New(rand.NewPCG(1, 2))
		var took []time.Duration
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			join(awake[rng.IntN(pool)], i) // at random: in creation order, each would just miss its phase
			took = append(took, time.Since(t0))
		}
		report(b, took)
	})
	b.Run("passivated", func(b *testing.B) {
		var took []time.Duration
		b.StopTimer()
		for i := 0; i < b.N; i++ {
			if i%pool == 0 {
				allPassive()
			}
			b.StartTimer()
			t0 := time.Now()
			join(ids[i%pool], i)
			took = append(took, time.Since(t0))
			b.StopTimer()
		}
		report(b, took)
	})
}

// awakeDungeon is the demo dungeon under another name, without passivation.
type awakeDungeon struct{ dungeon.Kind }

func (awakeDungeon) Name() string                   { return "dungeon-awake" }
func (awakeDungeon) KindOptions() actor.KindOptions { return actor.KindOptions{} }
