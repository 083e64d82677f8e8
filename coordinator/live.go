package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/tickfence/tickfence/store"
)

// Change is one update a Watcher applied: a control key's new value (Control), or a shard.<S>'s
// (Shard, with Prev the shard as it was before, for telling hand-offs and failovers apart).
// Values a watch replays at its start that were already read are not changes.
type Change struct {
	Control *store.Entry           `json:"control,omitempty"`
	Shard   *store.AssignmentEvent `json:"shard,omitempty"`
	Prev    ShardState             `json:"-"`
	// Epoch is set when the cluster moved to a new epoch (a restore): the view was rebuilt.
	Epoch uint64 `json:"epoch,omitempty"`
}

// Watcher keeps the cluster's State current from watches of the control bucket and of every
// shard.<S> (the same view the leader plans from), for operator consoles: no key is polled.
type Watcher struct {
	st  store.Store
	log *slog.Logger
	on  func(Change)

	mu sync.Mutex
	cl store.Cluster
	v  *view
}

// Watch reads the cluster record and starts watching; on is called (from the watcher's own
// goroutines, one at a time) after each change is applied. It runs until ctx ends, opening a
// watch again after it fails and rebuilding the view when a restore moves the cluster to a new
// epoch. Watch returns once the current values have been read.
func Watch(ctx context.Context, st store.Store, log *slog.Logger, on func(Change)) (*Watcher, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if on == nil {
		on = func(Change) {}
	}
	cl, err := st.Cluster(ctx)
	if err != nil {
		return nil, err
	}
	w := &Watcher{st: st, log: log, on: on, cl: cl, v: newView(cl)}
	first := make(chan error, 1)
	go w.run(ctx, first)
	select {
	case err := <-first:
		if err != nil {
			return nil, err
		}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return w, nil
}

func newView(cl store.Cluster) *view {
	return &view{control: map[string]store.Entry{}, shards: make([]ShardState, cl.Shards)}
}

// State is the cluster as the watches last showed it; lease ages as of now.
func (w *Watcher) State() *State {
	w.mu.Lock()
	cl, v := w.cl, w.v
	w.mu.Unlock()
	return v.state(cl, time.Now())
}

// Cluster is the cluster record of the epoch being watched.
func (w *Watcher) Cluster() store.Cluster {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cl
}

func (w *Watcher) run(ctx context.Context, first chan<- error) {
	reported := false
	report := func(err error) {
		if !reported {
			reported = true
			first <- err
		}
	}
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := w.watchEpoch(ctx, func() { report(nil); backoff = 100 * time.Millisecond })
		if ctx.Err() != nil {
			break
		}
		if errors.Is(err, errEpochChanged) {
			cl, cerr := w.st.Cluster(ctx)
			if cerr == nil {
				w.mu.Lock()
				w.cl, w.v = cl, newView(cl)
				w.mu.Unlock()
				w.on(Change{Epoch: cl.Epoch})
				continue
			}
			err = cerr
		}
		if !reported {
			report(err)
			return
		}
		w.log.Warn("cluster watch ended; watching again", "err", err, "after", backoff)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
	report(ctx.Err())
}

// watchEpoch feeds the view from both watches until one ends or the epoch changes; ready is
// called once both have replayed the current values.
func (w *Watcher) watchEpoch(ctx context.Context, ready func()) error {
	w.mu.Lock()
	cl, v := w.cl, w.v
	w.mu.Unlock()
	ectx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ctlCh, err := w.st.ControlWatch(ectx, ">")
	if err != nil {
		return fmt.Errorf("watch the control bucket: %w", err)
	}
	shardCh, err := w.st.WatchAssignments(ectx, cl.Epoch)
	if err != nil {
		return fmt.Errorf("watch the assignments of epoch %d: %w", cl.Epoch, err)
	}
	// Read the current values directly too: the page has every shard before the replay is through.
	entries, err := w.st.ControlList(ectx, ">")
	if err != nil {
		return fmt.Errorf("list control keys: %w", err)
	}
	var mu sync.Mutex // one Change at a time to on
	for _, e := range entries {
		v.applyControl(e)
	}
	assigned, err := w.st.ListAssignments(ectx, cl.Epoch)
	if err != nil {
		return fmt.Errorf("list assignments: %w", err)
	}
	for _, ev := range assigned {
		v.applyShard(ev)
	}
	ready()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for e := range ctlCh {
			if e.Key == store.ClusterKey && !e.Deleted {
				var c store.Cluster
				if json.Unmarshal(e.Value, &c) == nil && c.Epoch != cl.Epoch {
					cancel(errEpochChanged)
					continue
				}
			}
			v.mu.Lock()
			cur, had := v.control[e.Key]
			v.mu.Unlock()
			if had && cur.Revision >= e.Revision {
				continue // a replayed value already read
			}
			v.applyControl(e)
			mu.Lock()
			e := e
			w.on(Change{Control: &e})
			mu.Unlock()
		}
		cancel(errViewLost)
	}()
	go func() {
		defer wg.Done()
		for ev := range shardCh {
			if int(ev.Shard) >= len(v.shards) {
				continue
			}
			v.mu.Lock()
			prev := v.shards[ev.Shard]
			v.mu.Unlock()
			if prev.Revision >= ev.Revision || (ev.Deleted && prev.Revision == 0) {
				continue // a replayed value already read
			}
			v.applyShard(ev)
			mu.Lock()
			ev := ev
			w.on(Change{Shard: &ev, Prev: prev})
			mu.Unlock()
		}
		cancel(errViewLost)
	}()
	wg.Wait()
	return context.Cause(ectx)
}
