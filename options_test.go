package tickfence_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tickfence/tickfence"
	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/actor/dungeon"
)

// A bad write strategy is refused by Start at once (it used to reach the shard host inside the
// node's join loop, which retried it for ever).
func TestStartRefusesABadWriteStrategy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	n, err := tickfence.Start(ctx, tickfence.Options{Kinds: []actor.Kind{dungeon.Kind{}}, NodeID: "n1",
		DataDir: t.TempDir(), WriteStrategy: "fast"})
	if err == nil {
		n.Close()
		t.Fatal("Start with WriteStrategy \"fast\" succeeded")
	}
	if !strings.Contains(err.Error(), "Options.WriteStrategy") || time.Since(start) > 5*time.Second {
		t.Fatalf("Start with WriteStrategy \"fast\": %v after %v; want an Options.WriteStrategy error at once", err, time.Since(start))
	}
}
