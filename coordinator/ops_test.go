package coordinator

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
)

// TestRequestMoveRefusals: an operator's move to a node that cannot take the shard is refused
// with the reason, before any move record is written (a move to a drained node used to be
// accepted and then settled elsewhere, or stranded).
func TestRequestMoveRefusals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		w := newWorld(t, 2)
		w.node("A", false)
		w.start()
		defer w.stop()
		w.node("D", false)
		w.node("L", true)
		w.node("B", false)
		if err := Drain(ctx, w.st, "D"); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct{ to, want string }{
			{"D", "drained"}, {"L", "leaving"}, {"nobody", "holds no lease"},
		} {
			_, err := RequestMove(ctx, w.st, 0, tc.to)
			if !errors.Is(err, ErrMoveRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("move to %s: err = %v; want ErrMoveRefused saying %q", tc.to, err, tc.want)
			}
			if _, ok := w.move(0); ok {
				t.Fatalf("move to %s: a move record was written", tc.to)
			}
		}
		if _, err := RequestMove(ctx, w.st, 0, "A"); !errors.Is(err, ErrAlreadyPlaced) {
			t.Fatalf("move to the current owner: err = %v; want ErrAlreadyPlaced", err)
		}
		from, err := RequestMove(ctx, w.st, 0, "B")
		if err != nil || from.Owner != "A" {
			t.Fatalf("move to B = %+v, %v", from, err)
		}
		if _, err := RequestMove(ctx, w.st, 0, "B"); !errors.Is(err, ErrMoveRefused) {
			t.Fatalf("a second move of a moving shard: err = %v; want ErrMoveRefused", err)
		}
	})
}

// TestStuckLeavingIsReported: a leaving node whose only peers are drained cannot hand off; the
// state operators read says so.
func TestStuckLeavingIsReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		w := newWorld(t, 2)
		w.node("A", false)
		w.start()
		defer w.stop()
		w.node("D", false)
		if err := Drain(ctx, w.st, "D"); err != nil {
			t.Fatal(err)
		}
		w.node("A", true)
		w.settle()
		s, err := ReadState(ctx, w.st)
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Stuck) != 1 || s.Stuck[0].Node != "A" || s.Stuck[0].Shards != 2 || len(s.Stuck[0].Drained) != 1 {
			t.Fatalf("Stuck = %+v; want A with 2 shards behind drained D", s.Stuck)
		}
		if err := Undrain(ctx, w.st, "D"); err != nil {
			t.Fatal(err)
		}
		if s, _ := ReadState(ctx, w.st); len(s.Stuck) != 0 {
			t.Fatalf("Stuck after undrain = %+v", s.Stuck)
		}
	})
}
