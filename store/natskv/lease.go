package natskv

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickfence/tickfence/store"
)

// The control bucket: leases are keys with per-message TTLs (LimitMarkerTTL is set on the bucket,
// so an expiry leaves a marker that watchers see). kv.Update would drop a key's TTL, so renewals
// publish directly with the expected-last-subject-sequence and TTL options (DESIGN.md section 3).

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

// ControlWatch implements store.Control.
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
		for {
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
				select {
				case out <- entryOf(e):
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}
