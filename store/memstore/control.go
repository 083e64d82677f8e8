package memstore

import (
	"context"
	"fmt"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/tickfence/tickfence/store"
)

// The control bucket: like JetStream, a per-message TTL ends with a marker written by the store
// itself (driven by the store's clock, not the holder's).

type controlWatcher struct {
	filter string
	ch     chan store.Entry
	ctx    context.Context
}

func match(filter, key string) bool {
	// KV filters use "*" for one token and ">" for the rest; keys here have no "/".
	f := strings.ReplaceAll(filter, ".", "/")
	k := strings.ReplaceAll(key, ".", "/")
	if f == ">" {
		return true // every key
	}
	if strings.HasSuffix(f, "/>") {
		return strings.HasPrefix(k, strings.TrimSuffix(f, ">"))
	}
	ok, _ := path.Match(f, k)
	return ok
}

func (s *Store) control() *bucket { return s.bucket(store.ControlBucket, true) }

// putControlLocked writes a control key, notifies watchers and arms its TTL.
func (s *Store) putControlLocked(key string, value []byte, deleted, expired bool, ttl time.Duration) uint64 {
	rev := s.control().put(key, value, deleted)
	e := s.control().keys[key]
	e.expired = expired
	e.created = s.clock.Now()
	s.control().keys[key] = e
	ev := store.Entry{Key: key, Value: value, Revision: rev, Deleted: deleted, Expired: expired, Created: e.created}
	for _, w := range s.ctlWatchers { // a watcher whose ctx ended is closed by its own goroutine
		if w.ctx.Err() == nil && match(w.filter, key) {
			select {
			case w.ch <- ev:
			case <-w.ctx.Done():
			}
		}
	}
	if ttl > 0 {
		s.clock.AfterFunc(ttl, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if cur := s.control().keys[key]; cur.rev == rev && !cur.deleted {
				s.putControlLocked(key, nil, true, true, 0)
			}
		})
	}
	return rev
}

func (s *Store) liveControl(key string) (entry, bool) {
	e, ok := s.control().keys[key]
	return e, ok && !e.deleted
}

// ControlGet implements store.Control.
func (s *Store) ControlGet(_ context.Context, key string) (store.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.liveControl(key)
	if !ok {
		return store.Entry{}, fmt.Errorf("%s: %w", key, store.ErrNotFound)
	}
	return store.Entry{Key: key, Value: e.value, Revision: e.rev, Created: e.created}, nil
}

// LatestControl implements store.Control: memstore has one copy, so every read is the latest.
func (s *Store) LatestControl(ctx context.Context, key string) (store.Entry, error) {
	return s.ControlGet(ctx, key)
}

// ControlCreate implements store.Control.
func (s *Store) ControlCreate(_ context.Context, key string, value []byte, ttl time.Duration) (uint64, error) {
	if ttl > 0 {
		if err := store.ValidTTL(ttl); err != nil {
			return 0, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.liveControl(key); ok {
		return 0, fmt.Errorf("create %s: exists at revision %d: %w", key, e.rev, store.ErrConflict)
	}
	return s.putControlLocked(key, value, false, false, ttl), nil
}

// ControlUpdate implements store.Control.
func (s *Store) ControlUpdate(_ context.Context, key string, value []byte, expect uint64, ttl time.Duration) (uint64, error) {
	if ttl > 0 {
		if err := store.ValidTTL(ttl); err != nil {
			return 0, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if last := s.control().lastRev(key); last != expect {
		return 0, fmt.Errorf("update %s: revision %d, expected %d: %w", key, last, expect, store.ErrConflict)
	}
	return s.putControlLocked(key, value, false, false, ttl), nil
}

// ControlDelete implements store.Control.
func (s *Store) ControlDelete(_ context.Context, key string, expect uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if last := s.control().lastRev(key); expect != 0 && last != expect {
		return fmt.Errorf("delete %s: revision %d, expected %d: %w", key, last, expect, store.ErrConflict)
	}
	if _, ok := s.liveControl(key); ok || expect != 0 {
		s.putControlLocked(key, nil, true, false, 0)
	}
	return nil
}

func (s *Store) listControlLocked(filter string) []store.Entry {
	var out []store.Entry
	for k, e := range s.control().keys {
		if !e.deleted && match(filter, k) {
			out = append(out, store.Entry{Key: k, Value: e.value, Revision: e.rev, Created: e.created})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Revision < out[j].Revision })
	return out
}

// ControlList implements store.Control.
func (s *Store) ControlList(_ context.Context, filter string) ([]store.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listControlLocked(filter), nil
}

// ControlWatch implements store.Control.
func (s *Store) ControlWatch(ctx context.Context, filter string) (<-chan store.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	initial := s.listControlLocked(filter)
	w := &controlWatcher{filter: filter, ch: make(chan store.Entry, len(initial)+1024), ctx: ctx}
	for _, e := range initial {
		w.ch <- e
	}
	s.ctlWatchers = append(s.ctlWatchers, w)
	go func() {
		<-ctx.Done()
		s.mu.Lock()
		defer s.mu.Unlock()
		live := s.ctlWatchers[:0]
		for _, x := range s.ctlWatchers {
			if x == w {
				close(x.ch)
				continue
			}
			live = append(live, x)
		}
		s.ctlWatchers = live
	}()
	return w.ch, nil
}
