package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/tickfence/tickfence/store"
)

// Operator verbs: they write the placement inputs of the control bucket (drain.<node>, pin.<S>,
// weight.<node>) and move.<S> records, which the old owner and the coordinator carry out. tickctl
// is a thin caller; fault tests race them in-process.

var (
	// ErrMoveRefused: the move cannot be carried out as asked (the error says why).
	ErrMoveRefused = errors.New("move refused")
	// ErrAlreadyPlaced: the shard already runs on the node asked for.
	ErrAlreadyPlaced = errors.New("shard already on that node")
)

// RequestMove asks for a graceful hand-off of a shard to a node, as an operator. It is refused if
// the node holds no lease, is drained or leaving, or the shard is unassigned or already moving. It
// returns the owner the shard is moving from.
func RequestMove(ctx context.Context, st store.Store, shard uint32, to string) (store.Assignment, error) {
	return StartMove(ctx, st, Move{Shard: shard, To: to, Reason: "operator"})
}

// StartMove writes move.<S> for m after the checks of RequestMove; if m.From is set, the shard
// must still be on that node.
func StartMove(ctx context.Context, st store.Store, m Move) (store.Assignment, error) {
	s, err := ReadState(ctx, st)
	if err != nil {
		return store.Assignment{}, err
	}
	if m.Shard >= s.Cluster.Shards {
		return store.Assignment{}, fmt.Errorf("%w: shard %d: the cluster has shards 0..%d", ErrMoveRefused, m.Shard, s.Cluster.Shards-1)
	}
	n, live := s.Live(m.To)
	switch {
	case !live:
		return store.Assignment{}, fmt.Errorf("%w: node %s holds no lease (is it running?)", ErrMoveRefused, m.To)
	case n.Record.Leaving:
		return store.Assignment{}, fmt.Errorf("%w: node %s is leaving (shutting down)", ErrMoveRefused, m.To)
	case n.Drained:
		return store.Assignment{}, fmt.Errorf("%w: node %s is drained (undrain it first)", ErrMoveRefused, m.To)
	}
	cur := s.Shards[m.Shard]
	switch {
	case cur.Revision == 0:
		return store.Assignment{}, fmt.Errorf("%w: shard %d is unassigned; the coordinator places it", ErrMoveRefused, m.Shard)
	case cur.Owner.Owner == m.To:
		return cur.Owner, fmt.Errorf("shard %d is on %s: %w", m.Shard, m.To, ErrAlreadyPlaced)
	case m.From != "" && cur.Owner.Owner != m.From:
		return cur.Owner, fmt.Errorf("%w: shard %d moved to %s meanwhile", ErrMoveRefused, m.Shard, cur.Owner.Owner)
	}
	rec := store.MoveRecord{From: cur.Owner.Owner, FromSession: cur.Owner.Session, FromGrant: cur.Owner.Grant, To: m.To,
		State: store.MoveRequested, Reason: m.Reason}
	b, _ := json.Marshal(rec)
	return cur.Owner, createMove(ctx, st, m.Shard, b)
}

// createMove writes move.<S>, replacing a finished move the coordinator has not cleaned up yet.
func createMove(ctx context.Context, st store.Store, sh uint32, rec []byte) error {
	_, err := st.ControlCreate(ctx, store.MoveKey(sh), rec, 0)
	if !errors.Is(err, store.ErrConflict) {
		return err
	}
	e, gerr := st.LatestControl(ctx, store.MoveKey(sh))
	var cur store.MoveRecord
	if gerr != nil || json.Unmarshal(e.Value, &cur) != nil || cur.State != store.MoveDone {
		return fmt.Errorf("%w: shard %d is already moving", ErrMoveRefused, sh)
	}
	if err := st.ControlDelete(ctx, store.MoveKey(sh), e.Revision); err != nil {
		return fmt.Errorf("shard %d: %w", sh, err)
	}
	_, err = st.ControlCreate(ctx, store.MoveKey(sh), rec, 0)
	if errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("%w: shard %d is already moving", ErrMoveRefused, sh)
	}
	return err
}

// Drain marks a node drained: the coordinator moves its shards away and places nothing on it.
func Drain(ctx context.Context, st store.Store, node string) error {
	if err := store.ValidID(node); err != nil {
		return err
	}
	if _, err := st.ControlCreate(ctx, store.DrainKey(node), []byte(`{}`), 0); err != nil && !errors.Is(err, store.ErrConflict) {
		return err
	}
	return nil
}

// Undrain lets the coordinator place shards on a node again.
func Undrain(ctx context.Context, st store.Store, node string) error {
	return st.ControlDelete(ctx, store.DrainKey(node), 0)
}

// Pin keeps a shard where it is (the rebalancer skips it; drains and failures still move it), or
// unpins it.
func Pin(ctx context.Context, st store.Store, shard uint32, on bool) error {
	if !on {
		return st.ControlDelete(ctx, store.PinKey(shard), 0)
	}
	if _, err := st.ControlCreate(ctx, store.PinKey(shard), []byte(`{}`), 0); err != nil && !errors.Is(err, store.ErrConflict) {
		return err
	}
	return nil
}

// SetWeight sets a node's share of the load (default 1), in (0, 1000].
func SetWeight(ctx context.Context, st store.Store, node string, w float64) error {
	if !(w > 0 && w <= 1000) {
		return fmt.Errorf("weight %g: want a number in (0, 1000]", w)
	}
	b, _ := json.Marshal(store.WeightRecord{Weight: w})
	for {
		e, err := st.LatestControl(ctx, store.WeightKey(node))
		switch {
		case err == nil:
			_, err = st.ControlUpdate(ctx, store.WeightKey(node), b, e.Revision, 0)
		case errors.Is(err, store.ErrNotFound):
			_, err = st.ControlCreate(ctx, store.WeightKey(node), b, 0)
		}
		if !errors.Is(err, store.ErrConflict) {
			return err // a conflict is another operator's weight landing first: write ours over it
		}
	}
}
