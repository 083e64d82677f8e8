package coordinator

import (
	"context"
	"fmt"
	"time"

	"github.com/tickfence/tickfence/store"
)

// ApplyProgress reports an operator rebalance as it goes: a move done, or one refused.
type ApplyProgress struct {
	Done, Total int
	Move        Move
	Refused     error // the move was not started (the shard moved meanwhile, the node left ...)
}

// ApplyPlan carries out the moves of a plan as an operator's rebalance (tickctl rebalance, the
// console): at most maxMoves hand-offs under way at once, each started with StartMove (so a shard
// that left m.From meanwhile is refused, not moved twice), and waits until each has left its old
// owner. progress (may be nil) is called after each move is done or refused. It returns the
// number of moves done; on ctx's end, with its error.
func ApplyPlan(ctx context.Context, st store.Store, epoch uint64, moves []Move, maxMoves int, progress func(ApplyProgress)) (int, error) {
	if maxMoves < 1 {
		maxMoves = 1
	}
	if progress == nil {
		progress = func(ApplyProgress) {}
	}
	done := 0
	pending := append([]Move(nil), moves...)
	inFlight := map[uint32]Move{}
	for len(pending) > 0 || len(inFlight) > 0 {
		for len(pending) > 0 && len(inFlight) < maxMoves {
			m := pending[0]
			pending = pending[1:]
			m.Reason = "operator-rebalance"
			if _, err := StartMove(ctx, st, m); err != nil {
				progress(ApplyProgress{Done: done, Total: len(moves), Move: m, Refused: err})
				continue
			}
			inFlight[m.Shard] = m
		}
		for sh, m := range inFlight {
			if a, _, err := st.Assignment(ctx, epoch, sh); err == nil && a.Owner != m.From {
				delete(inFlight, sh)
				done++
				progress(ApplyProgress{Done: done, Total: len(moves), Move: m})
			}
		}
		if len(pending) == 0 && len(inFlight) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return done, fmt.Errorf("rebalance: %d of %d moves done: %w", done, len(moves), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return done, nil
}
