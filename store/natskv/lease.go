package natskv

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickfence/tickfence/store"
)

// The control bucket: leases are keys with per-message TTLs (AllowMsgTTL on the bucket's stream,
// without delete markers, which would force it to take roll-ups: controlShape; ControlWatch finds
// expiries itself). kv.Update would drop a key's TTL, so renewals publish directly with the
// expected-last-subject-sequence and TTL options (DESIGN.md section 3).

func (s *Store) ctl(ctx context.Context) (jetstream.KeyValue, error) {
	return s.kv(ctx, store.ControlBucket)
}

// ControlGet implements store.Control.
func (s *Store) ControlGet(ctx context.Context, key string) (store.Entry, error) {
	kv, err := s.ctl(ctx)
	if err != nil {
		return store.Entry{}, err
	}
	e, err := kv.Get(ctx, key)
	if err != nil {
		return store.Entry{}, classifyRead("get "+key, err)
	}
	return store.Entry{Key: key, Value: e.Value(), Revision: e.Revision(), Created: e.Created()}, nil
}

// LatestControl implements store.Control, through the stream leader (see leaderGet).
func (s *Store) LatestControl(ctx context.Context, key string) (store.Entry, error) {
	m, err := s.leaderGet(ctx, store.ControlBucket, key)
	if err != nil {
		return store.Entry{}, err
	}
	if m.deleted {
		return store.Entry{}, fmt.Errorf("%s: %w", key, store.ErrNotFound)
	}
	return store.Entry{Key: key, Value: m.data, Revision: m.seq, Created: m.time}, nil
}

// ControlCreate implements store.Control.
func (s *Store) ControlCreate(ctx context.Context, key string, value []byte, ttl time.Duration) (uint64, error) {
	kv, err := s.ctl(ctx)
	if err != nil {
		return 0, err
	}
	var opts []jetstream.KVCreateOpt
	if ttl > 0 {
		if err := store.ValidTTL(ttl); err != nil {
			return 0, err
		}
		opts = append(opts, jetstream.KeyTTL(ttl))
	}
	rev, err := kv.Create(ctx, key, value, opts...)
	return rev, classify("create "+key, err)
}

// ControlUpdate implements store.Control.
func (s *Store) ControlUpdate(ctx context.Context, key string, value []byte, expect uint64, ttl time.Duration) (uint64, error) {
	kv, err := s.ctl(ctx)
	if err != nil {
		return 0, err
	}
	if ttl == 0 {
		rev, err := kv.Update(ctx, key, value, expect)
		return rev, classify("update "+key, err)
	}
	if err := store.ValidTTL(ttl); err != nil {
		return 0, err
	}
	m := &nats.Msg{Subject: "$KV." + store.ControlBucket + "." + key, Data: value, Header: nats.Header{}}
	ack, err := s.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(expect), jetstream.WithMsgTTL(ttl))
	if err != nil {
		return 0, classify("renew "+key, err)
	}
	return ack.Sequence, nil
}

// ControlDelete implements store.Control.
func (s *Store) ControlDelete(ctx context.Context, key string, expect uint64) error {
	kv, err := s.ctl(ctx)
	if err != nil {
		return err
	}
	var opts []jetstream.KVDeleteOpt
	if expect != 0 {
		opts = append(opts, jetstream.LastRevision(expect))
	}
	return classify("delete "+key, kv.Delete(ctx, key, opts...))
}

func entryOf(e jetstream.KeyValueEntry) store.Entry {
	return store.Entry{Key: e.Key(), Value: e.Value(), Revision: e.Revision(), Created: e.Created(),
		Deleted: e.Operation() != jetstream.KeyValuePut, Expired: e.Operation() == jetstream.KeyValuePurge}
}

// ControlList implements store.Control.
func (s *Store) ControlList(ctx context.Context, filter string) ([]store.Entry, error) {
	kv, err := s.ctl(ctx)
	if err != nil {
		return nil, err
	}
	w, err := kv.Watch(ctx, filter, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", filter, err)
	}
	var out []store.Entry
	if err := initialValues(ctx, w, "list "+filter, func(e jetstream.KeyValueEntry) error {
		out = append(out, entryOf(e))
		return nil
	}); err != nil {
		return nil, err
	}
	return out, nil
}

// ControlWatch implements store.Control. The control bucket writes no delete marker when a lease
// expires (it would have to take roll-ups: controlShape), so the watch finds expiries itself: a
// key not written again within its per-message TTL of being seen is read through the stream
// leader, and if the server has removed it the watch delivers a marker (Deleted and Expired, at
// the lease's revision + 1). A key without a TTL is read once, a second after it is seen, and
// then never again until it is written.
func (s *Store) ControlWatch(ctx context.Context, filter string) (<-chan store.Entry, error) {
	kv, err := s.ctl(ctx)
	if err != nil {
		return nil, err
	}
	w, err := kv.Watch(ctx, filter)
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", filter, err)
	}
	out := make(chan store.Entry, 256)
	go func() {
		defer close(out)
		defer w.Stop()
		send := func(e store.Entry) bool {
			select {
			case out <- e:
				return true
			case <-ctx.Done():
				return false
			}
		}
		exp := expiries{s: s, keys: map[string]*expiring{}, ttls: map[string]time.Duration{}}
		defer func() {
			if exp.tick != nil {
				exp.tick.Stop()
			}
		}()
		for {
			var check <-chan time.Time
			if len(exp.keys) > 0 {
				check = exp.ticker()
			}
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil {
					continue
				}
				ent := entryOf(e)
				exp.seen(ent, time.Now())
				if !send(ent) {
					return
				}
			case now := <-check:
				for _, ent := range exp.due(ctx, now) {
					if !send(ent) {
						return
					}
				}
			}
		}
	}()
	return out, nil
}

// expiries is what a control watch knows of the keys it has seen, to tell when one expired.
type expiries struct {
	s    *Store
	keys map[string]*expiring     // keys seen put, not yet known gone or without a TTL
	ttls map[string]time.Duration // each key's TTL, once read
	tick *time.Ticker
}

type expiring struct {
	rev  uint64
	seen time.Time // when the watch delivered it, or its revision's time if that is earlier (a replay)
	due  time.Time // read it through the leader then
}

// expiryPoll is how often a watch looks for keys due to be read, and how soon it reads again a key
// the server has not yet removed past its TTL.
const expiryPoll = 100 * time.Millisecond

func (x *expiries) ticker() <-chan time.Time {
	if x.tick == nil {
		x.tick = time.NewTicker(expiryPoll)
	}
	return x.tick.C
}

// seen notes a delivered entry: a put is due to be read one TTL later (one second if its TTL is
// not known yet); a delete is gone.
func (x *expiries) seen(e store.Entry, now time.Time) {
	if e.Deleted {
		delete(x.keys, e.Key)
		return
	}
	ttl, known := x.ttls[e.Key]
	if known && ttl == 0 {
		return // a key without a TTL; written again, it would still have none
	}
	if !known {
		ttl = time.Second
	}
	seen := now
	if !e.Created.IsZero() && e.Created.Before(now) {
		// A value written a while ago (a watch's replay of a lease: a new coordinator's) expires
		// that much sooner. The store's clock, not this one: a skew only makes the read early
		// (and then again every expiryPoll until the server removes it) or late by as much.
		seen = e.Created
	}
	x.keys[e.Key] = &expiring{rev: e.Revision, seen: seen, due: seen.Add(ttl)}
}

// due reads the keys whose time has come and returns a marker for each the server removed.
func (x *expiries) due(ctx context.Context, now time.Time) []store.Entry {
	var gone []store.Entry
	for key, k := range x.keys {
		if now.Before(k.due) {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		m, err := x.s.leaderGet(rctx, store.ControlBucket, key)
		cancel()
		switch {
		case errors.Is(err, store.ErrNotFound):
			gone = append(gone, store.Entry{Key: key, Revision: k.rev + 1, Deleted: true, Expired: true})
			delete(x.keys, key)
		case err != nil:
			k.due = now.Add(2 * expiryPoll) // the leader is away: read again soon
		case m.deleted:
			delete(x.keys, key) // deleted: the watch delivers it
		case m.seq != k.rev:
			k.due = now.Add(max(x.ttls[key], time.Second)) // written again: the watch delivers it
		case m.ttl == 0:
			x.ttls[key] = 0
			delete(x.keys, key)
		default:
			k.due = k.seen.Add(m.ttl) // the TTL it was written with (it may differ from the last one's)
			x.ttls[key] = m.ttl
			if !now.Before(k.due) {
				k.due = now.Add(expiryPoll) // past its TTL, not removed yet: the server's expiry is due
			}
		}
	}
	if len(x.keys) == 0 && x.tick != nil {
		x.tick.Stop()
		x.tick = nil
	}
	return gone
}
