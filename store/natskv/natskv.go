// Package natskv is the NATS JetStream KV backend of store.Store. Buckets and keys follow
// DESIGN.md section 3; fenced writes are publishes whose Nats-Expected-Last-Subject-Sequence is
// checked by the server against shard.<S> (Nats-Expected-Last-Subject-Sequence-Subject), in the
// same atomic step as the write.
package natskv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickfence/tickfence/store"
)

// Header names of a fenced write (DESIGN.md section 4).
const (
	HeaderToken     = "Tickfence-Token"
	headerKVOp      = "KV-Operation"
	codeWrongLast   = jetstream.JSErrCodeStreamWrongLastSequence         // 10071: the fence or CAS failed
	codeSubjectBusy = jetstream.JSErrCodeStreamWrongLastSequenceConstant // 10164: retry, never a fence
	codeSealed      = jetstream.ErrorCode(10109)                         // invalid operation on sealed stream
)

// Options configure the adapter.
type Options struct {
	// Storage of buckets this adapter creates (file by default).
	Storage jetstream.StorageType
	// Replicas of a new cluster's buckets and streams when Bootstrap's want does not name them
	// (want.Replicas 0), recorded in the cluster record it creates; default 1. Every bucket made
	// later (a restore's new epoch, the blobs) gets the replicas of the cluster record it read, so
	// a client that joins an R3 cluster with the default makes R3 buckets.
	Replicas int
	// History kept per key in data buckets (1 by default). Fault tests raise it to keep every
	// revision of the run: above 64 (the KV API's limit) the stream's per-subject limit is raised
	// directly after the bucket is created.
	History int64
	// AckTimeout bounds the wait for a publish acknowledgement; past it the outcome is unknown.
	AckTimeout time.Duration
	// MaxPending bounds pipelined writes in flight.
	MaxPending int
	// MaxBatchesInFlight bounds this adapter's atomic batches awaiting their commit per data
	// bucket (default 16). The server refuses a stream more than max_batch_inflight_per_stream
	// (50 by default) from all its clients together: keep nodes × this under it.
	MaxBatchesInFlight int
	// OpenOnly makes this store open the cluster's buckets and never create one (a node on its own
	// credentials, which may not shape storage: DESIGN 9): Bootstrap joins the cluster there is and
	// fails with ErrNotInitialised when there is none, and a missing blobs bucket is an error too.
	// An admin makes them first with Init (tickctl cluster init).
	OpenOnly bool
	// Progress, if set, receives each step of Bootstrap and Init: what it found or made.
	Progress func(Step)
}

// ErrNotInitialised is what an OpenOnly store meets on a cluster whose storage was never made.
var ErrNotInitialised = errors.New("the cluster is not initialised: run tickctl cluster init with admin credentials")

// Step is one thing Bootstrap or Init found or did to the storage (Options.Progress).
type Step struct {
	What  string `json:"what"`  // "control bucket", "data bucket", "cluster record", "blobs bucket", "stream"
	Name  string `json:"name"`  // the bucket's or stream's name
	State string `json:"state"` // StepCreated, StepExists or StepUpdated
	Note  string `json:"note,omitempty"`
}

// The states of a Step.
const (
	StepCreated = "created"
	StepExists  = "exists"
	StepUpdated = "updated"
)

func (s *Store) step(what, name, state, note string) {
	if s.opts.Progress != nil {
		s.opts.Progress(Step{What: what, Name: name, State: state, Note: note})
	}
}

func (o *Options) defaults() {
	if o.History == 0 {
		o.History = 1
	}
	if o.AckTimeout == 0 {
		o.AckTimeout = 5 * time.Second
	}
	if o.MaxPending == 0 {
		o.MaxPending = 16384
	}
	if o.MaxBatchesInFlight <= 0 {
		o.MaxBatchesInFlight = defaultBatchesInFlight
	}
}

// Store is the JetStream backend.
type Store struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	opts Options

	mu      sync.Mutex
	buckets map[string]jetstream.KeyValue
	objects jetstream.ObjectStore // store.BlobBucket, once used
	// blobWriter uploads a large state only when it changed (store.BlobWriter).
	blobWriter store.BlobWriter
	cluster    *store.Cluster
	hold       func(string) bool
	held       []store.HeldWrite
	// batchSlots bounds the atomic batches in flight per data bucket (Options.MaxBatchesInFlight).
	batchSlots map[string]chan struct{}
	// reported are the data buckets whose Step this store gave (Init reports each once).
	reported map[string]bool

	// Pipelined writes awaiting their outcome, in submission order. Unbounded: a done callback
	// that submits the instance's next write must never wait for the goroutine that runs it.
	ackMu sync.Mutex
	acks  []pending
	wake  chan struct{}
	quit  chan struct{}
	wg    sync.WaitGroup
}

type pending struct {
	fut  jetstream.PubAckFuture
	g    store.Grant
	id   string
	done func(uint64, error)
}

var (
	_ store.Store         = (*Store)(nil)
	_ store.FaultInjector = (*Store)(nil)
)

// Connect dials NATS the way the adapter needs: the reconnect buffer is disabled, so a publish
// made while disconnected fails at once instead of being flushed, unseen, after a reconnect; and
// a server that stops answering (a hung process, a link dropping packets) is given up after
// PingInterval × (MaxPingsOutstanding + 1), 4–6 s, for another server of the cluster — nats.go's
// defaults (2 minutes, 2 pings) leave a node's commands stuck on a hung server for minutes while
// its lease, renewed over another connection, keeps its shards from failing over. opts win.
func Connect(url string, opts ...nats.Option) (*nats.Conn, error) {
	opts = append([]nats.Option{nats.ReconnectBufSize(-1), nats.MaxReconnects(-1),
		nats.PingInterval(PingInterval), nats.MaxPingsOutstanding(MaxPingsOutstanding)}, opts...)
	return nats.Connect(url, opts...)
}

// How Connect finds a server that stopped answering: a ping every PingInterval, given up with more
// than MaxPingsOutstanding unanswered.
const (
	PingInterval        = 2 * time.Second
	MaxPingsOutstanding = 2
)

// Open wraps a connection. The connection must have its reconnect buffer disabled (Connect does
// that; for nats.Connect pass nats.ReconnectBufSize(-1)).
func Open(nc *nats.Conn, opts Options) (*Store, error) {
	if nc.Opts.ReconnectBufSize != -1 {
		return nil, errors.New("natskv: the connection must disable its reconnect buffer (nats.ReconnectBufSize(-1)): " +
			"publishes buffered during a reconnect could land after the owner rotated away from them")
	}
	opts.defaults()
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncTimeout(opts.AckTimeout),
		jetstream.WithPublishAsyncMaxPending(opts.MaxPending))
	if err != nil {
		return nil, err
	}
	s := &Store{nc: nc, js: js, opts: opts, buckets: map[string]jetstream.KeyValue{}, batchSlots: map[string]chan struct{}{},
		reported: map[string]bool{}, wake: make(chan struct{}, 1), quit: make(chan struct{})}
	s.wg.Add(1)
	go s.settle()
	return s, nil
}

// Close stops the acknowledgement goroutine. Writes still in flight complete with ErrUnknownOutcome.
func (s *Store) Close() error {
	close(s.quit)
	s.wg.Wait()
	s.ackMu.Lock() // a write submitted while closing
	rest := s.acks
	s.acks = nil
	s.ackMu.Unlock()
	for _, p := range rest {
		p.done(0, fmt.Errorf("write %s: store closed: %w", p.id, store.ErrUnknownOutcome))
	}
	return nil
}

// settle delivers the outcomes of pipelined writes, in submission order.
func (s *Store) settle() {
	defer s.wg.Done()
	var batch []pending
	for {
		s.ackMu.Lock()
		batch, s.acks = s.acks, batch[:0]
		s.ackMu.Unlock()
		if len(batch) == 0 {
			select {
			case <-s.quit:
				s.ackMu.Lock()
				rest := s.acks
				s.acks = nil
				s.ackMu.Unlock()
				for _, p := range rest {
					p.done(0, fmt.Errorf("write %s: store closed: %w", p.id, store.ErrUnknownOutcome))
				}
				return
			case <-s.wake:
			}
			continue
		}
		for i, p := range batch {
			batch[i] = pending{}
			select {
			case ack := <-p.fut.Ok():
				p.done(ack.Sequence, nil)
				reuseRecordBuf(p.fut.Msg())
			case err := <-p.fut.Err():
				if apiCode(err) == codeSubjectBusy || noneTook(err) {
					s.wg.Add(1)
					go s.retryBusy(p)
					continue
				}
				if err := classifyFenced("write "+p.id, p.g, err); errors.Is(err, store.ErrStaleOwner) {
					s.wg.Add(1)
					go s.staleDone(p, err) // reads who the store met, off the acknowledgement path
				} else {
					p.done(0, err)
				}
			case <-s.quit:
				p.done(0, fmt.Errorf("write %s: store closed: %w", p.id, store.ErrUnknownOutcome))
			}
		}
	}
}

// retryBusy resends a write the stream leader refused with 10164 (the fence subject was busy with
// another proposal), or that nobody took (noneTook). The refusal is definite, so the resend cannot
// duplicate it.
func (s *Store) retryBusy(p pending) {
	defer s.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.AckTimeout)
	defer cancel()
	rev, err := s.publishFenced(ctx, p.fut.Msg(), p.g, p.id)
	p.done(rev, err)
}

// staleDone answers a pipelined write the fence refused, with the holder the store met.
func (s *Store) staleDone(p pending, err error) {
	defer s.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.AckTimeout)
	defer cancel()
	p.done(0, s.metHolder(ctx, err))
}

// metHolder fills in a stale-owner error the value of shard.<S> at the revision the store met,
// read from the stream leader by sequence; if that read fails the holder stays unknown.
func (s *Store) metHolder(ctx context.Context, err error) error {
	var e *store.StaleOwnerError
	if !errors.As(err, &e) || e.Sealed || e.Revision == 0 {
		return err
	}
	_, bucket, derr := s.dataKV(ctx, e.Grant.Epoch, e.Grant.Shard)
	if derr != nil {
		return err
	}
	m, gerr := s.leaderGetSeq(ctx, bucket, e.Revision)
	if gerr != nil || m.subject != "$KV."+bucket+"."+store.ShardKey(e.Grant.Shard) {
		return err
	}
	if !m.deleted && json.Unmarshal(m.data, &e.Holder) != nil {
		e.Holder = store.Assignment{}
		return err
	}
	e.HolderKnown = true
	return err
}

func apiCode(err error) jetstream.ErrorCode {
	var ae *jetstream.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode
	}
	return 0
}

// classify maps an error of a compare-on-revision on the key itself.
func classify(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
		return fmt.Errorf("%s: %w", op, store.ErrNotFound)
	case apiCode(err) == codeWrongLast, errors.Is(err, jetstream.ErrKeyRevisionMismatch), errors.Is(err, jetstream.ErrKeyExists):
		return fmt.Errorf("%s: %w: %v", op, store.ErrConflict, err)
	case apiCode(err) == codeSealed:
		return fmt.Errorf("%s: %w: %w", op, store.ErrSealed, err) // refused: nothing stored
	case apiCode(err) != 0, errors.Is(err, nats.ErrMaxPayload):
		return fmt.Errorf("%s: %w: %w", op, store.ErrRefused, err) // the server's answer: nothing stored
	default:
		return fmt.Errorf("%s: %w: %w", op, store.ErrUnknownOutcome, err)
	}
}

// classifyRead maps an error of a read: a missing key is ErrNotFound; anything else is the
// server's or the connection's own error (a read has no outcome to be unknown: it changed nothing).
func classifyRead(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
		return fmt.Errorf("%s: %w", op, store.ErrNotFound)
	default:
		return fmt.Errorf("%s: %w", op, err)
	}
}

// classifyFenced maps an error of a fenced write: a wrong last sequence there is the fence, and a
// sealed stream is an epoch that ended with a restore (DESIGN 6): no grant of it is valid any more.
// The server says which revision it met: "wrong last sequence: N".
func classifyFenced(op string, g store.Grant, err error) error {
	switch apiCode(err) {
	case codeWrongLast:
		e := &store.StaleOwnerError{Op: op, Grant: g, Cause: err}
		if m := wrongLastRE.FindStringSubmatch(err.Error()); m != nil {
			e.Revision, _ = strconv.ParseUint(m[1], 10, 64)
		}
		return e
	case codeSealed:
		return &store.StaleOwnerError{Op: op, Grant: g, Sealed: true, Cause: err}
	}
	return classify(op, err)
}

var wrongLastRE = regexp.MustCompile(`wrong last sequence: (\d+)`)

func (s *Store) kv(ctx context.Context, name string) (jetstream.KeyValue, error) {
	s.mu.Lock()
	kv := s.buckets[name]
	s.mu.Unlock()
	if kv != nil {
		return kv, nil
	}
	kv, err := s.js.KeyValue(ctx, name)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("bucket %s: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", name, err)
	}
	s.mu.Lock()
	s.buckets[name] = kv
	s.mu.Unlock()
	return kv, nil
}

// createControl makes the control bucket (controlShape then takes its roll-ups away): StepCreated,
// or StepExists if another made it first.
func (s *Store) createControl(ctx context.Context, replicas int) (string, error) {
	cfg := jetstream.KeyValueConfig{Bucket: store.ControlBucket, History: 1, LimitMarkerTTL: time.Second,
		Storage: s.opts.Storage, Replicas: replicas}
	state := StepCreated
	kv, err := s.js.CreateKeyValue(ctx, cfg)
	if errors.Is(err, jetstream.ErrBucketExists) {
		state = StepExists // made by another at the same moment, or by an attempt whose answer was lost
		kv, err = s.bindMade(ctx, cfg.Bucket)
	}
	if err != nil {
		return "", fmt.Errorf("create bucket %s: %w", cfg.Bucket, err)
	}
	s.mu.Lock()
	s.buckets[cfg.Bucket] = kv
	s.mu.Unlock()
	return state, nil
}

// Bootstrap implements store.Store. Data buckets are created before the cluster record names
// their epoch, and never for an epoch the record already holds. A new cluster's buckets get
// want.Replicas (if 0, Options.Replicas, recorded as such when set); its data buckets allow atomic
// batch publishes, and with replicas their stream leaders are spread over the servers
// (SpreadLeaders) before the record exists, so no write meets a leader change made on purpose.
//
// A cluster that has just formed may answer "no responders" while a new bucket's interest has not
// crossed the routes yet (nothing was done): Bootstrap tries again for up to 15 s.
func (s *Store) Bootstrap(ctx context.Context, want store.Cluster) (store.Cluster, error) {
	for deadline := time.Now().Add(15 * time.Second); ; {
		c, err := s.bootstrap(ctx, want)
		if !errors.Is(err, nats.ErrNoResponders) || time.Now().After(deadline) {
			return c, err
		}
		select {
		case <-ctx.Done():
			return c, err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (s *Store) bootstrap(ctx context.Context, want store.Cluster) (store.Cluster, error) {
	if s.opts.OpenOnly {
		return s.open(ctx)
	}
	if want.Replicas == 0 && s.opts.Replicas > 0 {
		want.Replicas = uint32(s.opts.Replicas)
	}
	if err := want.Validate(); err != nil {
		return store.Cluster{}, err
	}
	replicas := int(want.ReplicasOr1())
	// The control bucket keeps the leases of nodes and the leader as per-message TTLs, and takes
	// no roll-up (controlShape). It exists already unless this is a new cluster: then it gets the
	// new cluster's replicas.
	state, note := StepExists, ""
	if _, err := s.kv(ctx, store.ControlBucket); errors.Is(err, store.ErrNotFound) {
		if state, err = s.createControl(ctx, replicas); err != nil {
			return store.Cluster{}, err
		}
		note = fmt.Sprintf("%d replicas, per-message TTL, no roll-ups", replicas)
	} else if err != nil {
		return store.Cluster{}, err
	}
	if updated, err := s.controlShape(ctx); err != nil {
		return store.Cluster{}, err
	} else if updated && state == StepExists {
		state, note = StepUpdated, "roll-ups refused (one Nats-Rollup publish could empty it); leases expire without delete markers"
	}
	s.step("control bucket", store.ControlBucket, state, note)
	c, err := s.Cluster(ctx)
	if err == nil {
		s.step("cluster record", store.ClusterKey, StepExists, clusterNote(c))
		return c, s.bindData(ctx, c)
	}
	if !errors.Is(err, store.ErrNotFound) {
		return store.Cluster{}, err
	}
	if err := s.strayData(ctx, want); err != nil {
		return store.Cluster{}, err
	}
	for p := uint32(0); p < want.Partitions; p++ {
		if err := s.createDataBucket(ctx, store.DataBucket(want.Epoch, p), s.opts.History, replicas); err != nil {
			return store.Cluster{}, err
		}
	}
	s.spreadLeaders(ctx, want.Epoch, want.Partitions, replicas)
	ctl, err := s.kv(ctx, store.ControlBucket)
	if err != nil {
		return store.Cluster{}, err
	}
	v, _ := json.Marshal(want)
	state = StepCreated
	if _, err := ctl.Create(ctx, store.ClusterKey, v); errors.Is(err, jetstream.ErrKeyExists) {
		state = StepExists // another node or admin won the Create
	} else if err != nil {
		return store.Cluster{}, fmt.Errorf("create cluster record: %w", err)
	}
	// From the stream leader: a replica serving a direct get may not have the record yet (ours,
	// or the one another node's Create wrote a moment ago).
	if c, err = s.leaderCluster(ctx); err != nil {
		return store.Cluster{}, err
	}
	s.step("cluster record", store.ClusterKey, state, clusterNote(c))
	return c, s.bindData(ctx, c)
}

func clusterNote(c store.Cluster) string {
	return fmt.Sprintf("%d shards, %d partitions, %d replicas, epoch %d", c.Shards, c.Partitions, c.ReplicasOr1(), c.Epoch)
}

// open is Bootstrap of an OpenOnly store: the cluster there is, never a new one.
func (s *Store) open(ctx context.Context) (store.Cluster, error) {
	if _, err := s.kv(ctx, store.ControlBucket); errors.Is(err, store.ErrNotFound) {
		return store.Cluster{}, fmt.Errorf("no control bucket (%s): %w", store.ControlBucket, ErrNotInitialised)
	} else if err != nil {
		return store.Cluster{}, err
	}
	c, err := s.Cluster(ctx)
	if errors.Is(err, store.ErrNotFound) {
		return store.Cluster{}, fmt.Errorf("no cluster record (%s %s): %w", store.ControlBucket, store.ClusterKey, ErrNotInitialised)
	}
	if err != nil {
		return store.Cluster{}, err
	}
	return c, s.bindData(ctx, c)
}

func (s *Store) bindData(ctx context.Context, c store.Cluster) error {
	for p := uint32(0); p < c.Partitions; p++ {
		if _, err := s.kv(ctx, store.DataBucket(c.Epoch, p)); err != nil {
			return fmt.Errorf("epoch %d is recorded but its data bucket is unusable (never recreated, "+
				"a new bucket would restart revisions at 1): %w", c.Epoch, err)
		}
	}
	return nil
}

// Cluster implements store.Store.
func (s *Store) Cluster(ctx context.Context) (store.Cluster, error) {
	ctl, err := s.kv(ctx, store.ControlBucket)
	if err != nil {
		return store.Cluster{}, err
	}
	c, err := readCluster(ctx, ctl)
	if err != nil {
		return store.Cluster{}, err
	}
	s.mu.Lock()
	s.cluster = &c
	s.mu.Unlock()
	return c, nil
}

// leaderCluster is Cluster read through the control bucket's stream leader.
func (s *Store) leaderCluster(ctx context.Context) (store.Cluster, error) {
	e, err := s.LatestControl(ctx, store.ClusterKey)
	if err != nil {
		return store.Cluster{}, fmt.Errorf("cluster record: %w", err)
	}
	var c store.Cluster
	if err := json.Unmarshal(e.Value, &c); err != nil {
		return store.Cluster{}, fmt.Errorf("cluster record: %w", err)
	}
	s.mu.Lock()
	s.cluster = &c
	s.mu.Unlock()
	return c, nil
}

// ReadCluster reads the cluster record (DESIGN 3: the cluster key of the control bucket) on nc
// without opening a Store: what a client needs to learn the cluster's shape (package client). It
// reads as Store.Cluster does — a missing bucket or record is store.ErrNotFound — and needs a
// credential that may read the control bucket (node, operator, observer, admin; any user of a
// server without roles). A gateway's or player's may not: their account has no JetStream.
func ReadCluster(ctx context.Context, nc *nats.Conn) (store.Cluster, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return store.Cluster{}, err
	}
	ctl, err := js.KeyValue(ctx, store.ControlBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return store.Cluster{}, fmt.Errorf("bucket %s: %w", store.ControlBucket, store.ErrNotFound)
	}
	if err != nil {
		return store.Cluster{}, fmt.Errorf("bucket %s: %w", store.ControlBucket, err)
	}
	return readCluster(ctx, ctl)
}

// readCluster reads and decodes the cluster record of the control bucket ctl.
func readCluster(ctx context.Context, ctl jetstream.KeyValue) (store.Cluster, error) {
	e, err := ctl.Get(ctx, store.ClusterKey)
	if err != nil {
		return store.Cluster{}, classifyRead("cluster record", err)
	}
	var c store.Cluster
	if err := json.Unmarshal(e.Value(), &c); err != nil {
		return store.Cluster{}, fmt.Errorf("cluster record: %w", err)
	}
	return c, nil
}

func (s *Store) dataKV(ctx context.Context, epoch uint64, shard uint32) (jetstream.KeyValue, string, error) {
	s.mu.Lock()
	c := s.cluster
	s.mu.Unlock()
	if c == nil {
		cc, err := s.Cluster(ctx)
		if err != nil {
			return nil, "", err
		}
		c = &cc
	}
	name := store.DataBucket(epoch, shard%c.Partitions)
	kv, err := s.kv(ctx, name)
	return kv, name, err
}

// Assignment implements store.Store.
func (s *Store) Assignment(ctx context.Context, epoch uint64, shard uint32) (store.Assignment, uint64, error) {
	kv, _, err := s.dataKV(ctx, epoch, shard)
	if err != nil {
		return store.Assignment{}, 0, err
	}
	e, err := kv.Get(ctx, store.ShardKey(shard))
	if err != nil {
		return store.Assignment{}, 0, classifyRead(fmt.Sprintf("shard %d", shard), err)
	}
	var a store.Assignment
	if err := json.Unmarshal(e.Value(), &a); err != nil {
		return store.Assignment{}, 0, fmt.Errorf("shard %d: %w", shard, err)
	}
	return a, e.Revision(), nil
}

// LatestAssignment implements store.Store: a message get through the stream API, which the
// stream leader answers (a KV Get is a direct get that any replica may answer, possibly lagging).
func (s *Store) LatestAssignment(ctx context.Context, epoch uint64, shard uint32) (store.Assignment, uint64, error) {
	_, bucket, err := s.dataKV(ctx, epoch, shard)
	if err != nil {
		return store.Assignment{}, 0, err
	}
	m, err := s.leaderGet(ctx, bucket, store.ShardKey(shard))
	if err != nil {
		return store.Assignment{}, 0, fmt.Errorf("shard %d: %w", shard, err)
	}
	if m.deleted {
		return store.Assignment{}, 0, fmt.Errorf("shard %d: %w", shard, store.ErrNotFound)
	}
	var a store.Assignment
	if err := json.Unmarshal(m.data, &a); err != nil {
		return store.Assignment{}, 0, fmt.Errorf("shard %d: %w", shard, err)
	}
	return a, m.seq, nil
}

// ListAssignments implements store.Store.
func (s *Store) ListAssignments(ctx context.Context, epoch uint64) ([]store.AssignmentEvent, error) {
	c, err := s.Cluster(ctx)
	if err != nil {
		return nil, err
	}
	var out []store.AssignmentEvent
	for p := uint32(0); p < c.Partitions; p++ {
		kv, err := s.kv(ctx, store.DataBucket(epoch, p))
		if err != nil {
			return nil, err
		}
		w, err := kv.Watch(ctx, "shard.*")
		if err != nil {
			return nil, fmt.Errorf("list assignments: %w", err)
		}
		if err := initialValues(ctx, w, "list assignments", func(e jetstream.KeyValueEntry) error {
			if ev, ok := assignmentEvent(e); ok {
				out = append(out, ev)
			}
			return nil
		}); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func assignmentEvent(e jetstream.KeyValueEntry) (store.AssignmentEvent, bool) {
	var sh uint32
	if _, err := fmt.Sscanf(e.Key(), "shard.%d", &sh); err != nil {
		return store.AssignmentEvent{}, false
	}
	ev := store.AssignmentEvent{Shard: sh, Revision: e.Revision(), Deleted: e.Operation() != jetstream.KeyValuePut}
	if !ev.Deleted && json.Unmarshal(e.Value(), &ev.Assignment) != nil {
		return store.AssignmentEvent{}, false
	}
	return ev, true
}

// Assign implements store.Store.
func (s *Store) Assign(ctx context.Context, epoch uint64, shard uint32, a store.Assignment, expect uint64) (uint64, error) {
	kv, _, err := s.dataKV(ctx, epoch, shard)
	if err != nil {
		return 0, err
	}
	v, _ := json.Marshal(a)
	var rev uint64
	if expect == 0 {
		rev, err = kv.Create(ctx, store.ShardKey(shard), v)
	} else {
		rev, err = kv.Update(ctx, store.ShardKey(shard), v, expect)
	}
	return rev, classify(fmt.Sprintf("assign shard %d", shard), err)
}

// WatchAssignments implements store.Store.
func (s *Store) WatchAssignments(ctx context.Context, epoch uint64) (<-chan store.AssignmentEvent, error) {
	c, err := s.Cluster(ctx)
	if err != nil {
		return nil, err
	}
	out := make(chan store.AssignmentEvent, 256)
	var watchers []jetstream.KeyWatcher
	for p := uint32(0); p < c.Partitions; p++ {
		kv, err := s.kv(ctx, store.DataBucket(epoch, p))
		if err != nil {
			return nil, err
		}
		w, err := kv.Watch(ctx, "shard.*")
		if err != nil {
			return nil, fmt.Errorf("watch assignments: %w", err)
		}
		watchers = append(watchers, w)
	}
	// One partition's watch ending ends the whole watch: the caller sees the channel close and
	// opens a new one, instead of silently missing one partition's grants.
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, w := range watchers {
		wg.Add(1)
		go func(w jetstream.KeyWatcher) {
			defer wg.Done()
			defer cancel()
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
						continue // end of the initial values
					}
					ev, ok := assignmentEvent(e)
					if !ok {
						continue
					}
					select {
					case out <- ev:
					case <-ctx.Done():
						return
					}
				}
			}
		}(w)
	}
	go func() { wg.Wait(); cancel(); close(out) }()
	return out, nil
}

// Rotate implements store.Store.
func (s *Store) Rotate(ctx context.Context, g store.Grant) (store.Grant, error) {
	kv, _, err := s.dataKV(ctx, g.Epoch, g.Shard)
	if err != nil {
		return store.Grant{}, err
	}
	v, _ := json.Marshal(g.Assignment)
	rev, err := kv.Update(ctx, store.ShardKey(g.Shard), v, g.Token)
	if err != nil {
		err = classify("rotate "+g.String(), err)
		if errors.Is(err, store.ErrConflict) {
			return store.Grant{}, fmt.Errorf("rotate %s: %w", g, store.ErrStaleOwner)
		}
		return store.Grant{}, err
	}
	g.Token = rev
	return g, nil
}

// ReleaseShard implements store.Store.
func (s *Store) ReleaseShard(ctx context.Context, g store.Grant) error {
	kv, _, err := s.dataKV(ctx, g.Epoch, g.Shard)
	if err != nil {
		return err
	}
	err = kv.Delete(ctx, store.ShardKey(g.Shard), jetstream.LastRevision(g.Token))
	if err != nil {
		err = classify("release "+g.String(), err)
		if errors.Is(err, store.ErrConflict) {
			return fmt.Errorf("release %s: %w", g, store.ErrStaleOwner)
		}
	}
	return err
}

// Instances implements store.Store. The keys come from an ordered consumer, which a replica may
// serve; the listing counts only once it has seen the last message the stream leader holds on
// inst.<S>.* (delete markers included), so a just-created instance is never missed.
func (s *Store) Instances(ctx context.Context, epoch uint64, shard uint32) ([]string, error) {
	kv, bucket, err := s.dataKV(ctx, epoch, shard)
	if err != nil {
		return nil, err
	}
	prefix := fmt.Sprintf("inst.%d.", shard)
	var latest uint64
	switch m, err := s.leaderGet(ctx, bucket, prefix+"*"); {
	case err == nil:
		latest = m.seq
	case !errors.Is(err, store.ErrNotFound):
		return nil, fmt.Errorf("list shard %d: %w", shard, err)
	}
	for backoff := time.Millisecond; ; backoff = min(2*backoff, 100*time.Millisecond) {
		ids, seen, err := s.listOnce(ctx, kv, prefix)
		if err != nil {
			return nil, err
		}
		if seen >= latest {
			return ids, nil
		}
		select { // a replica that has not caught up with the leader: list again
		case <-ctx.Done():
			return nil, fmt.Errorf("list shard %d: replica behind the leader (%d < %d): %w", shard, seen, latest, ctx.Err())
		case <-time.After(backoff):
		}
	}
}

// listOnce lists the live keys under prefix and the highest revision it saw (markers included).
func (s *Store) listOnce(ctx context.Context, kv jetstream.KeyValue, prefix string) ([]string, uint64, error) {
	w, err := kv.Watch(ctx, prefix+"*", jetstream.MetaOnly())
	if err != nil {
		return nil, 0, fmt.Errorf("list %s: %w", prefix, err)
	}
	var ids []string
	var seen uint64
	err = initialValues(ctx, w, "list "+prefix, func(e jetstream.KeyValueEntry) error {
		seen = max(seen, e.Revision())
		if e.Operation() == jetstream.KeyValuePut {
			ids = append(ids, e.Key()[len(prefix):])
		}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	return ids, seen, nil
}

// initialValues passes fn every value a new watch delivers before the end of its initial
// values, then stops the watch.
func initialValues(ctx context.Context, w jetstream.KeyWatcher, what string, fn func(jetstream.KeyValueEntry) error) error {
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New(what + ": watcher closed")
			}
			if e == nil {
				return nil
			}
			if err := fn(e); err != nil {
				return err
			}
		}
	}
}

// Load implements store.Store.
func (s *Store) Load(ctx context.Context, epoch uint64, shard uint32, id string) (store.Record, uint64, error) {
	if err := store.ValidID(id); err != nil {
		return store.Record{}, 0, err
	}
	_, bucket, err := s.dataKV(ctx, epoch, shard)
	if err != nil {
		return store.Record{}, 0, err
	}
	// From the stream leader, not a direct get: any current replica may answer a direct get,
	// picked at random, and one on a hung server never does — a third of the loads of a rebuild
	// or a takeover would wait out their deadline while one server of three hangs
	// (TestR3LoadWithAFrozenReplica). Loads happen when a shard starts, not on the tick path.
	m, err := s.leaderGet(ctx, bucket, store.InstanceKey(shard, id))
	if err == nil && m.deleted {
		err = fmt.Errorf("load %s: deleted at revision %d: %w", id, m.seq, store.ErrNotFound)
	}
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return store.Record{}, 0, fmt.Errorf("load %s: %w", id, err)
		}
		return store.Record{}, 0, fmt.Errorf("load %s: %w", id, err)
	}
	r, err := store.DecodeRecord(m.data)
	if err == nil {
		err = store.StateFromBlob(&r, id, blobs{ctx: ctx, s: s})
	}
	if err != nil {
		return store.Record{}, 0, fmt.Errorf("instance %s at revision %d: %w", id, m.seq, err)
	}
	return r, m.seq, nil
}

// Register implements store.Store.
func (s *Store) Register(ctx context.Context, g store.Grant, id string, rec store.Record, loadedRev uint64) (uint64, error) {
	if err := store.ValidID(id); err != nil {
		return 0, err
	}
	rec.Token = g.Token
	store.KeepBlobPointer(&rec)
	v, err := store.EncodeRecord(rec)
	if err != nil {
		return 0, err
	}
	kv, _, err := s.dataKV(ctx, g.Epoch, g.Shard)
	if err != nil {
		return 0, err
	}
	rev, err := kv.Update(ctx, store.InstanceKey(g.Shard, id), v, loadedRev)
	if err == nil {
		s.blobWriter.Registered(g, id, rev, rec.Blob)
	}
	return rev, classify("register "+id, err)
}

// Create implements store.Store.
func (s *Store) Create(ctx context.Context, g store.Grant, id string, rec store.Record) (uint64, error) {
	if err := store.ValidID(id); err != nil {
		return 0, err
	}
	rec.Token, rec.State = g.Token, nil
	v, err := store.EncodeRecord(rec)
	if err != nil {
		return 0, err
	}
	s.blobWriter.Forget(g, id)
	kv, _, err := s.dataKV(ctx, g.Epoch, g.Shard)
	if err != nil {
		return 0, err
	}
	rev, err := kv.Create(ctx, store.InstanceKey(g.Shard, id), v)
	return rev, classify("create "+id, err)
}

// fencedMsg builds the publish of DESIGN 4: stored only if shard.<S> is still at the token. A
// record's large state goes to a blob first, uploaded only if it changed (store.BlobWriter);
// settle takes the publish's outcome (never nil).
func (s *Store) fencedMsg(ctx context.Context, g store.Grant, id string, rec *store.Record) (_ *nats.Msg, settle func(uint64, error), err error) {
	settle = func(uint64, error) {}
	if err := store.ValidID(id); err != nil {
		return nil, settle, err
	}
	_, bucket, err := s.dataKV(ctx, g.Epoch, g.Shard)
	if err != nil {
		return nil, settle, err
	}
	tok := []string{strconv.FormatUint(g.Token, 10)}
	// The header names are canonical already: fill the map directly (Set would re-canonicalise
	// every name on every write).
	m := &nats.Msg{Subject: "$KV." + bucket + "." + store.InstanceKey(g.Shard, id), Header: nats.Header{
		jetstream.ExpectedLastSubjSeqHeader:     tok,
		jetstream.ExpectedLastSubjSeqSubjHeader: {"$KV." + bucket + "." + store.ShardKey(g.Shard)},
		HeaderToken:                             tok,
	}}
	if rec == nil {
		s.blobWriter.Forget(g, id)
		m.Header[headerKVOp] = []string{"DEL"}
		return m, settle, nil
	}
	r := *rec
	r.Token = g.Token
	if settle, err = s.blobWriter.Prepare(&r, g, id, blobs{ctx: ctx, s: s}); err != nil {
		return nil, func(uint64, error) {}, err
	}
	// A buffer of an earlier write the store has acknowledged (settle returns them), or a new one.
	buf := (*recordBufs.Get().(*[]byte))[:0]
	if m.Data, err = store.AppendRecord(buf, r); err != nil {
		settle(0, err)
		return nil, func(uint64, error) {}, err
	}
	return m, settle, nil
}

// recordBufs holds encoded records' buffers (*[]byte) for reuse once their write is acknowledged:
// nats.go copies a message's bytes into its write buffer as it publishes, so after the
// acknowledgement only the settled PubAckFuture still points at them, and nothing reads them.
var recordBufs = sync.Pool{New: func() any { return new([]byte) }}

// reuseRecordBuf gives an acknowledged write's record buffer back to recordBufs. Large ones go to
// the collector: a pool of rare large buffers would hold memory for the common small writes.
func reuseRecordBuf(m *nats.Msg) {
	if m == nil || cap(m.Data) == 0 || cap(m.Data) > 64<<10 {
		return
	}
	b := m.Data[:0]
	m.Data = nil
	recordBufs.Put(&b)
}

// noneTook reports a publish that no server took: no responders (jetstream's ErrNoStreamResponse,
// after its own retries), the moment of a stream leadership transfer when neither the old leader
// nor the new one takes the stream's subjects (a graceful server stop moves every leadership), or
// a stream whose interest has not crossed the routes yet. Nothing was stored.
func noneTook(err error) bool {
	return errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders)
}

// publishFenced publishes and waits, resending on 10164 (subject busy on a replicated stream) and
// on a publish nobody took (noneTook), until ctx ends.
func (s *Store) publishFenced(ctx context.Context, m *nats.Msg, g store.Grant, id string) (uint64, error) {
	for backoff := time.Millisecond; ; backoff = min(2*backoff, 50*time.Millisecond) {
		ack, err := s.js.PublishMsg(ctx, m)
		if err == nil {
			return ack.Sequence, nil
		}
		if apiCode(err) != codeSubjectBusy && !noneTook(err) {
			return 0, s.metHolder(ctx, classifyFenced("write "+id, g, err))
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("write %s: %w: %v", id, store.ErrUnknownOutcome, ctx.Err())
		case <-time.After(backoff):
		}
	}
}

type heldWrite struct {
	s  *Store
	g  store.Grant
	id string
	m  *nats.Msg
}

func (h heldWrite) Instance() string { return h.id }
func (h heldWrite) Deliver(ctx context.Context) error {
	_, err := h.s.publishFenced(ctx, h.m, h.g, h.id)
	return err
}

func (s *Store) holdBack(g store.Grant, id string, m *nats.Msg) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hold == nil || !s.hold(id) {
		return false
	}
	s.held = append(s.held, heldWrite{s: s, g: g, id: id, m: m})
	return true
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

// Write implements store.Store.
func (s *Store) Write(ctx context.Context, g store.Grant, id string, rec store.Record) (uint64, error) {
	m, settle, err := s.fencedMsg(ctx, g, id, &rec)
	if err != nil {
		return 0, err
	}
	if s.holdBack(g, id, m) {
		err := fmt.Errorf("write %s: held by fault injection: %w", id, store.ErrUnknownOutcome)
		settle(0, err)
		return 0, err
	}
	rev, err := s.publishFenced(ctx, m, g, id)
	settle(rev, err)
	return rev, err
}

// WriteAsync implements store.Store: the publish is pipelined; settle reports its outcome.
func (s *Store) WriteAsync(g store.Grant, id string, rec store.Record, done func(uint64, error)) {
	m, settle, err := s.fencedMsg(context.Background(), g, id, &rec)
	if err != nil {
		done(0, err)
		return
	}
	caller := done
	done = func(rev uint64, err error) { settle(rev, err); caller(rev, err) }
	if s.holdBack(g, id, m) {
		done(0, fmt.Errorf("write %s: held by fault injection: %w", id, store.ErrUnknownOutcome))
		return
	}
	fut, err := s.js.PublishMsgAsync(m)
	if err != nil {
		done(0, classifyFenced("write "+id, g, err))
		return
	}
	select {
	case <-s.quit:
		done(0, fmt.Errorf("write %s: store closed: %w", id, store.ErrUnknownOutcome))
		return
	default:
	}
	s.ackMu.Lock()
	s.acks = append(s.acks, pending{fut: fut, g: g, id: id, done: done})
	s.ackMu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// End implements store.Store: a fenced delete marker.
func (s *Store) End(ctx context.Context, g store.Grant, id string) (uint64, error) {
	m, _, err := s.fencedMsg(ctx, g, id, nil)
	if err != nil {
		return 0, err
	}
	if s.holdBack(g, id, m) {
		return 0, fmt.Errorf("end %s: held by fault injection: %w", id, store.ErrUnknownOutcome)
	}
	return s.publishFenced(ctx, m, g, id)
}

// PutRaw stores bytes as an instance record with no checks (a plain KV put): for tests that plant
// bad data, and to show what an unfenced write would let through.
func (s *Store) PutRaw(ctx context.Context, epoch uint64, shard uint32, id string, data []byte) error {
	kv, _, err := s.dataKV(ctx, epoch, shard)
	if err != nil {
		return err
	}
	_, err = kv.Put(ctx, store.InstanceKey(shard, id), data)
	return err
}
