// Package memstore is an in-memory store.Store with the semantics of the JetStream adapter: one
// sequence per bucket, revisions are sequences, fences compare against the last sequence of
// shard.<S>. It exists for fast tests of the core and passes the same conformance suite.
package memstore

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tickfence/tickfence/store"
)

type entry struct {
	rev     uint64
	value   []byte
	deleted bool
	expired bool
	created time.Time
}

type bucket struct {
	seq  uint64
	keys map[string]entry
	// log is every message in order, kept only by a store made with NewWithHistory.
	log  []Message
	keep bool
	// sealed: a restore sealed the bucket (DESIGN 6); every write is refused, as JetStream
	// refuses every publish to a sealed stream.
	sealed bool
}

// Message is one message of a bucket's stream, as a history check reads it.
type Message struct {
	Seq     uint64
	Key     string
	Value   []byte
	Deleted bool
	// Token is the fence token of a fenced delete marker (its Tickfence-Token header), else 0.
	Token uint64
}

func (b *bucket) put(key string, value []byte, deleted bool) uint64 {
	return b.putToken(key, value, deleted, 0)
}

func (b *bucket) putToken(key string, value []byte, deleted bool, token uint64) uint64 {
	b.seq++
	b.keys[key] = entry{rev: b.seq, value: value, deleted: deleted}
	if b.keep {
		b.log = append(b.log, Message{Seq: b.seq, Key: key, Value: value, Deleted: deleted, Token: token})
	}
	return b.seq
}

// refuse is the error of an unfenced write to a sealed bucket (ErrSealed); nil if the bucket takes
// writes. A fenced one gets a sealed *store.StaleOwnerError (fenced).
func (b *bucket) refuse(op string) error {
	if !b.sealed {
		return nil
	}
	return fmt.Errorf("%s: %w", op, store.ErrSealed)
}

// lastRev is the sequence of the last message on a key, delete markers included (0: none).
func (b *bucket) lastRev(key string) uint64 { return b.keys[key].rev }

// Store is the in-memory backend. The zero value is not usable; call New.
type Store struct {
	mu          sync.Mutex
	buckets     map[string]*bucket
	watchers    []*watcher
	ctlWatchers []*controlWatcher
	hold        func(string) bool
	held        []store.HeldWrite
	history     bool
	clock       Clock

	blobMu sync.Mutex
	blobs  map[string]memBlob // store.BlobBucket
	// blobWriter uploads a large state only when it changed (store.BlobWriter).
	blobWriter store.BlobWriter
}

type memBlob struct {
	data     []byte
	modified time.Time
}

// memBlobs is store.Blobs in memory.
type memBlobs struct{ s *Store }

func (b memBlobs) PutBlob(name string, data []byte) (string, error) {
	b.s.blobMu.Lock()
	defer b.s.blobMu.Unlock()
	if b.s.blobs == nil {
		b.s.blobs = map[string]memBlob{}
	}
	b.s.blobs[name] = memBlob{data: append([]byte(nil), data...), modified: b.s.clock.Now()}
	return store.BlobDigest(data), nil
}

func (b memBlobs) GetBlob(name string) ([]byte, error) {
	b.s.blobMu.Lock()
	defer b.s.blobMu.Unlock()
	o, ok := b.s.blobs[name]
	if !ok {
		return nil, fmt.Errorf("blob %s: %w", name, store.ErrNotFound)
	}
	return o.data, nil
}

// BlobStats is what this store uploaded, and the large writes that uploaded nothing.
func (s *Store) BlobStats() store.BlobStats { return s.blobWriter.Stats() }

// CollectBlobs deletes the blobs no current record references once older than grace, never a
// referenced one (store.CollectBlobs); dryRun reports without deleting.
func (s *Store) CollectBlobs(ctx context.Context, grace time.Duration, dryRun bool) (store.GCResult, error) {
	return store.CollectBlobs(ctx, memCatalog{s}, s.clock.Now(), grace, dryRun)
}

// memCatalog is store.BlobCatalog in memory.
type memCatalog struct{ s *Store }

func (c memCatalog) QuietEpoch(context.Context) (uint64, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if e, ok := c.s.liveControl(store.RestoreKey); ok {
		return 0, fmt.Errorf("a restore holds its claim (%s): collect blobs after it ends", e.value)
	}
	cl, err := c.s.clusterLocked()
	return cl.Epoch, err
}

func (c memCatalog) ListBlobs(context.Context) ([]store.BlobInfo, error) {
	c.s.blobMu.Lock()
	defer c.s.blobMu.Unlock()
	out := make([]store.BlobInfo, 0, len(c.s.blobs))
	for n, o := range c.s.blobs {
		out = append(out, store.BlobInfo{Name: n, Size: len(o.data), Modified: o.modified})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (c memCatalog) BlobRefs(_ context.Context, epoch uint64) (map[string]bool, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	cl, err := c.s.clusterLocked()
	if err != nil {
		return nil, err
	}
	refs := map[string]bool{}
	for p := uint32(0); p < cl.Partitions; p++ {
		b := c.s.bucket(store.DataBucket(epoch, p), false)
		if b == nil {
			continue
		}
		for k, e := range b.keys {
			if !strings.HasPrefix(k, "inst.") || e.deleted {
				continue
			}
			if r, err := store.DecodeRecord(e.value); err == nil && r.Blob != nil {
				refs[r.Blob.Name] = true
			}
		}
	}
	return refs, nil
}

func (c memCatalog) BlobModified(_ context.Context, name string) (time.Time, bool, error) {
	c.s.blobMu.Lock()
	defer c.s.blobMu.Unlock()
	o, ok := c.s.blobs[name]
	return o.modified, ok, nil
}

func (c memCatalog) DeleteBlob(_ context.Context, name string) error {
	c.s.blobMu.Lock()
	defer c.s.blobMu.Unlock()
	delete(c.s.blobs, name)
	return nil
}

// Clock is the store's time: Now stamps control entries, AfterFunc ends a control key's TTL.
// Tests pass a hand-driven one (WithClock) to expire leases without sleeping.
type Clock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) AfterFunc(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }

type watcher struct {
	bucket string
	ch     chan store.AssignmentEvent
	ctx    context.Context
}

var (
	_ store.Store         = (*Store)(nil)
	_ store.FaultInjector = (*Store)(nil)
)

// New returns an empty store.
func New() *Store { return &Store{buckets: map[string]*bucket{}, clock: systemClock{}} }

// NewWithHistory returns an empty store that keeps every message of every bucket, for History.
func NewWithHistory() *Store {
	return &Store{buckets: map[string]*bucket{}, history: true, clock: systemClock{}}
}

// WithClock makes the store keep time by c (TTLs and entry times) and returns it; call it before
// the store is used.
func (s *Store) WithClock(c Clock) *Store {
	s.clock = c
	return s
}

// History returns every message of a bucket in order (nil unless made with NewWithHistory).
func (s *Store) History(bucket string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.buckets[bucket]
	if b == nil {
		return nil
	}
	return append([]Message(nil), b.log...)
}

func (s *Store) bucket(name string, create bool) *bucket {
	b := s.buckets[name]
	if b == nil && create {
		b = &bucket{keys: map[string]entry{}, keep: s.history}
		s.buckets[name] = b
	}
	return b
}

func (s *Store) dataBucket(epoch uint64, shard uint32) (*bucket, string, error) {
	c, err := s.clusterLocked()
	if err != nil {
		return nil, "", err
	}
	name := store.DataBucket(epoch, shard%c.Partitions)
	b := s.bucket(name, false)
	if b == nil {
		return nil, "", fmt.Errorf("data bucket %s: %w", name, store.ErrNotFound)
	}
	return b, name, nil
}

func (s *Store) clusterLocked() (store.Cluster, error) {
	cb := s.bucket(store.ControlBucket, false)
	if cb == nil {
		return store.Cluster{}, fmt.Errorf("cluster record: %w", store.ErrNotFound)
	}
	e, ok := cb.keys[store.ClusterKey]
	if !ok || e.deleted {
		return store.Cluster{}, fmt.Errorf("cluster record: %w", store.ErrNotFound)
	}
	var c store.Cluster
	if err := json.Unmarshal(e.value, &c); err != nil {
		return store.Cluster{}, fmt.Errorf("cluster record: %w", err)
	}
	return c, nil
}

// Bootstrap implements store.Store.
func (s *Store) Bootstrap(_ context.Context, want store.Cluster) (store.Cluster, error) {
	if err := want.Validate(); err != nil {
		return store.Cluster{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.clusterLocked()
	if err != nil {
		v, _ := json.Marshal(want)
		s.bucket(store.ControlBucket, true).put(store.ClusterKey, v, false)
		c = want
	}
	for p := uint32(0); p < c.Partitions; p++ {
		s.bucket(store.DataBucket(c.Epoch, p), true)
	}
	return c, nil
}

// Cluster implements store.Store.
func (s *Store) Cluster(context.Context) (store.Cluster, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.clusterLocked()
}

// Assignment implements store.Store.
func (s *Store) Assignment(_ context.Context, epoch uint64, shard uint32) (store.Assignment, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, _, err := s.dataBucket(epoch, shard)
	if err != nil {
		return store.Assignment{}, 0, err
	}
	e, ok := b.keys[store.ShardKey(shard)]
	if !ok || e.deleted {
		return store.Assignment{}, 0, fmt.Errorf("shard %d: %w", shard, store.ErrNotFound)
	}
	var a store.Assignment
	if err := json.Unmarshal(e.value, &a); err != nil {
		return store.Assignment{}, 0, fmt.Errorf("shard %d: %w", shard, err)
	}
	return a, e.rev, nil
}

// LatestAssignment implements store.Store: memstore has one copy, so every read is the latest.
func (s *Store) LatestAssignment(ctx context.Context, epoch uint64, shard uint32) (store.Assignment, uint64, error) {
	return s.Assignment(ctx, epoch, shard)
}

// ListAssignments implements store.Store.
func (s *Store) ListAssignments(_ context.Context, epoch uint64) ([]store.AssignmentEvent, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.assignmentsLocked(epoch)
}

func (s *Store) assignmentsLocked(epoch uint64) ([]store.AssignmentEvent, error) {
	c, err := s.clusterLocked()
	if err != nil {
		return nil, err
	}
	var out []store.AssignmentEvent
	for p := uint32(0); p < c.Partitions; p++ {
		name := store.DataBucket(epoch, p)
		b := s.bucket(name, false)
		if b == nil {
			return nil, fmt.Errorf("data bucket %s: %w", name, store.ErrNotFound)
		}
		for k, e := range b.keys {
			var sh uint32
			if _, err := fmt.Sscanf(k, "shard.%d", &sh); err != nil || !strings.HasPrefix(k, "shard.") {
				continue
			}
			ev := store.AssignmentEvent{Shard: sh, Revision: e.rev, Deleted: e.deleted}
			if !e.deleted {
				_ = json.Unmarshal(e.value, &ev.Assignment)
			}
			out = append(out, ev)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Revision < out[j].Revision })
	return out, nil
}

// Assign implements store.Store.
func (s *Store) Assign(_ context.Context, epoch uint64, shard uint32, a store.Assignment, expect uint64) (uint64, error) {
	v, err := json.Marshal(a)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, name, err := s.dataBucket(epoch, shard)
	if err != nil {
		return 0, err
	}
	if err := b.refuse(fmt.Sprintf("assign shard %d", shard)); err != nil {
		return 0, err
	}
	key := store.ShardKey(shard)
	e, ok := b.keys[key]
	// Like KV Create, expect 0 also succeeds over a delete marker.
	if !(e.rev == expect || expect == 0 && ok && e.deleted) {
		return 0, fmt.Errorf("assign shard %d: revision %d, expected %d: %w", shard, e.rev, expect, store.ErrConflict)
	}
	rev := b.put(key, v, false)
	s.notifyLocked(name, store.AssignmentEvent{Shard: shard, Revision: rev, Assignment: a})
	return rev, nil
}

func (s *Store) notifyLocked(bucket string, ev store.AssignmentEvent) {
	for _, w := range s.watchers { // a watcher whose ctx ended is closed by its own goroutine
		if w.ctx.Err() == nil && w.bucket == bucket {
			select {
			case w.ch <- ev:
			case <-w.ctx.Done():
			}
		}
	}
}

// WatchAssignments implements store.Store. Events are delivered in order; a watcher that does not
// keep up delays writers (the channel is generously buffered).
func (s *Store) WatchAssignments(ctx context.Context, epoch uint64) (<-chan store.AssignmentEvent, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.clusterLocked()
	if err != nil {
		return nil, err
	}
	w := &watcher{ch: make(chan store.AssignmentEvent, 4*int(c.Shards)+64), ctx: ctx}
	initial, err := s.assignmentsLocked(epoch)
	if err != nil {
		return nil, err
	}
	// One watcher per partition bucket shares the channel.
	w.bucket = store.DataBucket(epoch, 0)
	for p := uint32(1); p < c.Partitions; p++ {
		s.watchers = append(s.watchers, &watcher{bucket: store.DataBucket(epoch, p), ch: w.ch, ctx: ctx})
	}
	for _, ev := range initial {
		w.ch <- ev
	}
	s.watchers = append(s.watchers, w)
	go func() { // close the channel once ctx ends, even if nothing is written any more
		<-ctx.Done()
		s.mu.Lock()
		defer s.mu.Unlock()
		live := s.watchers[:0]
		closed := false
		for _, x := range s.watchers {
			if x.ch == w.ch {
				if !closed {
					close(x.ch)
					closed = true
				}
				continue
			}
			live = append(live, x)
		}
		s.watchers = live
	}()
	return w.ch, nil
}

// Rotate implements store.Store.
func (s *Store) Rotate(_ context.Context, g store.Grant) (store.Grant, error) {
	v, err := json.Marshal(g.Assignment)
	if err != nil {
		return store.Grant{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, name, err := s.dataBucket(g.Epoch, g.Shard)
	if err != nil {
		return store.Grant{}, err
	}
	if err := b.refuse("rotate " + g.String()); err != nil {
		return store.Grant{}, err
	}
	key := store.ShardKey(g.Shard)
	if b.lastRev(key) != g.Token {
		return store.Grant{}, fmt.Errorf("rotate %s: %w", g, store.ErrStaleOwner)
	}
	g.Token = b.put(key, v, false)
	s.notifyLocked(name, store.AssignmentEvent{Shard: g.Shard, Revision: g.Token, Assignment: g.Assignment})
	return g, nil
}

// ReleaseShard implements store.Store.
func (s *Store) ReleaseShard(_ context.Context, g store.Grant) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, name, err := s.dataBucket(g.Epoch, g.Shard)
	if err != nil {
		return err
	}
	if err := b.refuse("release " + g.String()); err != nil {
		return err
	}
	key := store.ShardKey(g.Shard)
	if b.lastRev(key) != g.Token {
		return fmt.Errorf("release %s: %w", g, store.ErrStaleOwner)
	}
	rev := b.put(key, nil, true)
	s.notifyLocked(name, store.AssignmentEvent{Shard: g.Shard, Revision: rev, Deleted: true})
	return nil
}

// Instances implements store.Store.
func (s *Store) Instances(_ context.Context, epoch uint64, shard uint32) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, _, err := s.dataBucket(epoch, shard)
	if err != nil {
		return nil, err
	}
	prefix := fmt.Sprintf("inst.%d.", shard)
	var ids []string
	for k, e := range b.keys {
		if strings.HasPrefix(k, prefix) && !e.deleted {
			ids = append(ids, strings.TrimPrefix(k, prefix))
		}
	}
	sort.Strings(ids)
	return ids, nil
}

// Load implements store.Store.
func (s *Store) Load(_ context.Context, epoch uint64, shard uint32, id string) (store.Record, uint64, error) {
	if err := store.ValidID(id); err != nil {
		return store.Record{}, 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, _, err := s.dataBucket(epoch, shard)
	if err != nil {
		return store.Record{}, 0, err
	}
	e, ok := b.keys[store.InstanceKey(shard, id)]
	if !ok || e.deleted {
		return store.Record{}, 0, fmt.Errorf("instance %s: %w", id, store.ErrNotFound)
	}
	r, err := store.DecodeRecord(e.value)
	if err == nil {
		err = store.StateFromBlob(&r, id, memBlobs{s}) // s.mu held: memBlobs takes blobMu only
	}
	if err != nil {
		return store.Record{}, 0, fmt.Errorf("instance %s at revision %d: %w", id, e.rev, err)
	}
	return r, e.rev, nil
}

// Register implements store.Store.
func (s *Store) Register(_ context.Context, g store.Grant, id string, rec store.Record, loadedRev uint64) (uint64, error) {
	if err := store.ValidID(id); err != nil {
		return 0, err
	}
	rec.Token = g.Token
	store.KeepBlobPointer(&rec)
	v, err := store.EncodeRecord(rec)
	if err != nil {
		return 0, err
	}
	rev, err := s.register(g, id, v, loadedRev)
	if err == nil {
		s.blobWriter.Registered(g, id, rev, rec.Blob)
	}
	return rev, err
}

func (s *Store) register(g store.Grant, id string, v []byte, loadedRev uint64) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, _, err := s.dataBucket(g.Epoch, g.Shard)
	if err != nil {
		return 0, err
	}
	if err := b.refuse("register " + id); err != nil {
		return 0, err
	}
	key := store.InstanceKey(g.Shard, id)
	if last := b.lastRev(key); last != loadedRev {
		return 0, fmt.Errorf("register %s: revision %d, loaded %d: %w", id, last, loadedRev, store.ErrConflict)
	}
	return b.put(key, v, false), nil
}

// Create implements store.Store.
func (s *Store) Create(_ context.Context, g store.Grant, id string, rec store.Record) (uint64, error) {
	if err := store.ValidID(id); err != nil {
		return 0, err
	}
	rec.Token, rec.State = g.Token, nil
	v, err := store.EncodeRecord(rec)
	if err != nil {
		return 0, err
	}
	s.blobWriter.Forget(g, id)
	s.mu.Lock()
	defer s.mu.Unlock()
	b, _, err := s.dataBucket(g.Epoch, g.Shard)
	if err != nil {
		return 0, err
	}
	if err := b.refuse("create " + id); err != nil {
		return 0, err
	}
	key := store.InstanceKey(g.Shard, id)
	if e, ok := b.keys[key]; ok && !e.deleted {
		return 0, fmt.Errorf("create %s: exists at revision %d: %w", id, e.rev, store.ErrConflict)
	}
	return b.put(key, v, false), nil
}

// fenced applies a fenced write or delete marker.
func (s *Store) fenced(g store.Grant, id string, v []byte, del bool) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.fence(g, "write "+id)
	if err != nil {
		return 0, err
	}
	tok := uint64(0)
	if del {
		tok = g.Token
	}
	return b.putToken(store.InstanceKey(g.Shard, id), v, del, tok), nil
}

// fence is the one place the fence is checked: the data bucket of g if shard.<S> is still at g's
// token, under s.mu.
func (s *Store) fence(g store.Grant, op string) (*bucket, error) {
	b, _, err := s.dataBucket(g.Epoch, g.Shard)
	if err != nil {
		return nil, err
	}
	if b.sealed {
		return nil, &store.StaleOwnerError{Op: op, Grant: g, Sealed: true}
	}
	if e := b.keys[store.ShardKey(g.Shard)]; e.rev != g.Token {
		err := &store.StaleOwnerError{Op: op, Grant: g, Revision: e.rev, HolderKnown: e.rev != 0}
		if !e.deleted && e.rev != 0 && json.Unmarshal(e.value, &err.Holder) != nil {
			err.HolderKnown = false
		}
		return nil, err
	}
	return b, nil
}

// WriteBatch implements store.BatchWriter: the batch is checked against the fence once and
// stored whole, under one lock.
func (s *Store) WriteBatch(g store.Grant, writes []store.BatchWrite, done func(int, uint64, error)) {
	batch := heldBatch{s: s, g: g}
	held := false
	var settles []func(uint64, error)
	for i, w := range writes {
		v, settle, err := s.prepare(g, w.ID, w.Rec)
		if err != nil {
			done(i, 0, err)
			continue
		}
		batch.idx, batch.ids, batch.vs = append(batch.idx, i), append(batch.ids, w.ID), append(batch.vs, v)
		settles = append(settles, settle)
		held = held || s.holds(w.ID)
	}
	if len(batch.idx) == 0 {
		return
	}
	if held {
		s.mu.Lock()
		s.held = append(s.held, batch)
		s.mu.Unlock()
		for k, i := range batch.idx {
			err := fmt.Errorf("write %s: its batch is held by fault injection: %w", writes[i].ID, store.ErrUnknownOutcome)
			settles[k](0, err)
			done(i, 0, err)
		}
		return
	}
	revs, err := batch.commit()
	for k, i := range batch.idx {
		if err != nil {
			settles[k](0, err)
			done(i, 0, err)
		} else {
			settles[k](revs[k], nil)
			done(i, revs[k], nil)
		}
	}
}

// heldBatch is a prepared batch: ids[k] with encoded record vs[k] was writes[idx[k]].
type heldBatch struct {
	s   *Store
	g   store.Grant
	idx []int
	ids []string
	vs  [][]byte
}

func (h heldBatch) Instance() string { return h.ids[0] }
func (h heldBatch) Deliver(context.Context) error {
	_, err := h.commit()
	return err
}

func (h heldBatch) commit() ([]uint64, error) {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	b, err := h.s.fence(h.g, fmt.Sprintf("batch of %d writes (%s…)", len(h.ids), h.ids[0]))
	if err != nil {
		return nil, err
	}
	revs := make([]uint64, len(h.ids))
	for k, id := range h.ids {
		revs[k] = b.putToken(store.InstanceKey(h.g.Shard, id), h.vs[k], false, 0)
	}
	return revs, nil
}

func (s *Store) holds(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hold != nil && s.hold(id)
}

// prepare encodes rec for a fenced write of id under g, its large state in a blob (uploaded only
// if it changed: store.BlobWriter); settle takes the write's outcome.
func (s *Store) prepare(g store.Grant, id string, rec store.Record) (v []byte, settle func(uint64, error), err error) {
	if err := store.ValidID(id); err != nil {
		return nil, nil, err
	}
	rec.Token = g.Token
	if settle, err = s.blobWriter.Prepare(&rec, g, id, memBlobs{s}); err != nil {
		return nil, nil, err
	}
	if v, err = store.EncodeRecord(rec); err != nil {
		settle(0, err)
		return nil, nil, err
	}
	return v, settle, nil
}

type heldWrite struct {
	s   *Store
	g   store.Grant
	id  string
	v   []byte
	del bool
}

func (h heldWrite) Instance() string { return h.id }
func (h heldWrite) Deliver(context.Context) error {
	_, err := h.s.fenced(h.g, h.id, h.v, h.del)
	return err
}

// holdBack reports whether a write is to be held back, keeping it if so.
func (s *Store) holdBack(g store.Grant, id string, v []byte, del bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hold == nil || !s.hold(id) {
		return false
	}
	s.held = append(s.held, heldWrite{s: s, g: g, id: id, v: v, del: del})
	return true
}

// Write implements store.Store.
func (s *Store) Write(_ context.Context, g store.Grant, id string, rec store.Record) (uint64, error) {
	v, settle, err := s.prepare(g, id, rec)
	if err != nil {
		return 0, err
	}
	if s.holdBack(g, id, v, false) {
		err := fmt.Errorf("write %s: held by fault injection: %w", id, store.ErrUnknownOutcome)
		settle(0, err)
		return 0, err
	}
	rev, err := s.fenced(g, id, v, false)
	settle(rev, err)
	return rev, err
}

// WriteAsync implements store.Store; the in-memory write completes before it returns.
func (s *Store) WriteAsync(g store.Grant, id string, rec store.Record, done func(uint64, error)) {
	done(s.Write(context.Background(), g, id, rec))
}

// End implements store.Store.
func (s *Store) End(_ context.Context, g store.Grant, id string) (uint64, error) {
	if err := store.ValidID(id); err != nil {
		return 0, err
	}
	s.blobWriter.Forget(g, id)
	if s.holdBack(g, id, nil, true) {
		return 0, fmt.Errorf("end %s: held by fault injection: %w", id, store.ErrUnknownOutcome)
	}
	return s.fenced(g, id, nil, true)
}

// HoldWrites implements store.FaultInjector.
func (s *Store) HoldWrites(hold func(string) bool) {
	s.mu.Lock()
	s.hold = hold
	s.mu.Unlock()
}

// TakeHeld implements store.FaultInjector.
func (s *Store) TakeHeld() []store.HeldWrite {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.held
	s.held = nil
	return h
}

// Close implements store.Store.
func (s *Store) Close() error { return nil }

// PutRaw stores bytes as an instance record with no checks at all: for tests that plant bad data.
func (s *Store) PutRaw(epoch uint64, shard uint32, id string, data []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, _, err := s.dataBucket(epoch, shard)
	if err == nil {
		err = b.refuse("put raw " + id)
	}
	if err != nil {
		panic(err)
	}
	b.put(store.InstanceKey(shard, id), data, false)
}

// Blobs implements store.Epochs.
func (s *Store) Blobs(context.Context) store.Blobs { return memBlobs{s} }
