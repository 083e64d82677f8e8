package main

import (
	"context"
	"testing"
	"time"

	"github.com/tickfence/tickfence"
	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/client"
)

// The raid on a real node (an embedded NATS JetStream server) through the exported API only:
// two players' clients join and fight with typed commands, each one's watch gets its own HUD and
// no other's, and the kill's loot reaches the loot service once per hero.
func TestRaidOnANode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node, err := tickfence.Start(ctx, tickfence.Options{Kinds: []actor.Kind{Kind{}}, NodeID: "test", DataDir: t.TempDir(), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	url := node.ClientURL()
	admin, err := client.Dial(ctx, url, client.GiveUp(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.Create(ctx, "raid-t", "raid", map[string]any{"boss_hp": 120}); err != nil {
		t.Fatal(err)
	}
	var loot lootCount
	lctx, stopLoot := context.WithCancel(ctx)
	defer stopLoot()
	go func() {
		if err := applyLoot(lctx, admin.Conn(), &loot); err != nil && lctx.Err() == nil {
			t.Error("loot service:", err)
		}
	}()

	heroes := map[string]*client.Client{}
	huds := map[string]*client.Watch{}
	for _, name := range []string{"ada", "bob"} {
		c, err := client.Dial(ctx, url, client.Player(name), client.GiveUp(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var j Joined
		if err := c.Send(ctx, "raid-t", JoinCmd{Type: "join"}, &j); err != nil || j.Player != name {
			t.Fatalf("%s joins: %+v %v", name, j, err)
		}
		if huds[name], err = c.Watch(ctx, "raid-t", "hud"); err != nil {
			t.Fatal(err)
		}
		heroes[name] = c
	}
	for name, w := range huds { // a few HUDs each: its own only
		for range 3 {
			f := <-w.C
			var hud HUD
			if err := client.Decode(f.Payload, &hud); err != nil || f.To != name || len(hud.Abilities) != 2 {
				t.Fatalf("%s's watch got %+v (to %q): %v", name, hud, f.To, err)
			}
		}
	}

	var used Used
	if err := heroes["ada"].Send(ctx, "raid-t", AbilityCmd{Type: "ability", Ability: "strike"}, &used); err != nil || used.BossHP != 80 {
		t.Fatalf("ada's strike: %+v %v", used, err)
	}
	if err := heroes["ada"].Send(ctx, "raid-t", AbilityCmd{Type: "ability", Ability: "strike"}, nil); client.Code(err) != "cooldown" {
		t.Fatalf("ada's second strike at once: %v, want cooldown", err)
	}
	if err := heroes["bob"].Send(ctx, "raid-t", AbilityCmd{Type: "ability", Ability: "fireball"}, &used); err != nil || used.BossHP != 0 {
		t.Fatalf("bob's fireball: %+v %v", used, err)
	}
	var st Status
	if err := admin.Send(ctx, "raid-t", map[string]any{"type": "status"}, &st); err != nil || len(st.Heroes) != 2 || st.BossHP != 0 {
		t.Fatalf("status: %+v %v", st, err)
	}
	for loot.applied.Load() < 2 && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	if a, r := loot.applied.Load(), loot.repeats.Load(); a != 2 || r != 0 {
		t.Fatalf("loot applied %d, repeats %d; want 2 and 0", a, r)
	}
	stopLoot()
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer scancel()
	if err := node.Stop(sctx); err != nil {
		t.Fatal(err)
	}
}
