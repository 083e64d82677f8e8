package client_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/tickfence/tickfence/client"
)

// Issue 35, labels: instances created with labels are listed by the Go client, filtered on them;
// an ended one is not listed.
func TestInstancesListedByLabels(t *testing.T) {
	n := startNode(t, "")
	c := dial(t, n.ClientURL(), client.GiveUp(30*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for id, mode := range map[string]string{"r1": "heroic", "r2": "normal", "r3": "heroic"} {
		if err := c.Create(ctx, id, "dungeon", map[string]any{"labels": map[string]string{"mode": mode}}); err != nil {
			t.Fatal(err)
		}
	}
	ids := func(labels map[string]string) []string {
		t.Helper()
		ls, err := c.Instances(ctx, labels)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, l := range ls {
			if l.Kind != "dungeon" || l.Labels["mode"] == "" {
				t.Fatalf("listed %+v", l)
			}
			out = append(out, l.ID)
		}
		return out
	}
	if got := ids(map[string]string{"mode": "heroic"}); !slices.Equal(got, []string{"r1", "r3"}) {
		t.Fatalf("mode=heroic: %v, want [r1 r3]", got)
	}
	if got := ids(nil); !slices.Equal(got, []string{"r1", "r2", "r3"}) {
		t.Fatalf("every instance: %v", got)
	}
	if err := c.End(ctx, "r3"); err != nil {
		t.Fatal(err)
	}
	if got := ids(map[string]string{"mode": "heroic"}); !slices.Equal(got, []string{"r1"}) {
		t.Fatalf("mode=heroic after r3 ended: %v, want [r1]", got)
	}
	if err := c.Create(ctx, "r4", "dungeon", map[string]any{"labels": map[string]string{"bad key": "x"}}); client.Code(err) != client.CodeBadRequest {
		t.Fatalf("create with a bad label: %v, want bad_request", err)
	}
}
