// Package shard is the node-side host of tickfence: it runs the shards granted to this node's
// session. On a grant it loads the shard's instances, registers each under the grant's token
// (DESIGN.md section 4), ticks them on the engine and persists them with fenced writes; it applies
// commands at the next tick and answers them once the write holding their effect is stored. A
// write rejected as stale owner stops the shard at once; a write with an unknown outcome rotates
// the token and rebuilds the shard from the store.
package shard

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/internal/logkey"
	"github.com/tickfence/tickfence/internal/metrics"
	"github.com/tickfence/tickfence/internal/watch"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
)

// Command is one decoded command delivered to the owner of its shard.
type Command struct {
	wire.Request
	Received time.Time
	// Reply sends the encoded (msgpack) reply. The host calls it exactly once.
	Reply func(reply []byte)
	// Screened: the transport asked Host.Shedding before decoding the command and was told to
	// let it in, so admission control does not draw it against the admitted share a second time
	// (it still counts it against the bound on pending commands). A command decoded only to be
	// refused afterwards would waste the decode.
	Screened bool
	// Sender is who sent it, as the transport authenticated it (actor.Sender); its request or
	// client ID is already filed under it. A command without a SenderKey (submitted within the
	// process, or by a transport without identities) is trusted.
	Sender actor.Sender
	// SenderKey is what an untrusted sender's exactly-once state and the instances it created
	// are filed under (a digest of its account and user); "" for a trusted sender.
	SenderKey string
	// Operator marks an operator's request to the owner (tickfence.op: only an operator's
	// credential may send one), not a command to the instance: Type names the request
	// ("reload"). It is answered by the node, never handed to the game.
	Operator bool
	// Heartbeat: no command but a heartbeat of Sender's player (wire.HeaderHeartbeat), which a
	// Logic that tracks players counts as hearing from it. Never answered.
	Heartbeat bool
	// Interest marks a watcher's interest in the instance (wire.HeaderWatch), not a command: it
	// keeps the instance from being passivated, or wakes it. Never answered, never handed to the game.
	Interest bool

	admitted bool   // counted by admission control until answered
	cas      string // the result of the write whose failure refused it, for the refusal's log line
}

// SenderKey is what an untrusted sender's exactly-once state and the instances it creates are
// filed under: a digest of who it is (store.SenderOf reads it back from an ID).
func SenderKey(s actor.Sender) string {
	sum := sha256.Sum256([]byte(s.Name + "/" + s.Player))
	return "s:" + hex.EncodeToString(sum[:8])
}

// SetSender makes s the command's sender, as a transport does with the identity it
// authenticated: an untrusted sender's request or client ID is filed under its SenderKey (a
// prefix ending in a space, which no ID a client writes holds), so that no sender reaches
// another's exactly-once state (DESIGN 9).
func (c *Command) SetSender(s actor.Sender) {
	c.Sender, c.SenderKey = s, ""
	if s.Trusted {
		return
	}
	c.SenderKey = SenderKey(s)
	if c.Client != "" {
		c.Client = c.SenderKey + " " + c.Client
	} else {
		c.ID = c.SenderKey + " " + c.ID
	}
}

// Commands connects the host to the command subjects of the shards it runs.
type Commands interface {
	// Serve delivers the commands of one shard to handle until stop is called.
	Serve(shard uint32, handle func(Command)) (stop func(), err error)
}

// Frame is an instance's frame on its way out, stamped with the grant it was made under and
// its tick, so watchers drop what a zombie sends (DESIGN 8).
type Frame struct {
	Shard    uint32
	Instance string
	Topic    string // "" for the instance's main subject
	To       string // "" for every watcher; else the one player it is for (wire.PrivateFrameSubject)
	Epoch    uint64
	Token    uint64
	Tick     uint64
	Index    uint64 // the frame's number among its tick's frames (0, 1, …)
	Payload  []byte
	// Stored is the instance's last tick whose write the store had acknowledged when the frame
	// was made; Reverts how often, under this grant, it went back to its stored state after the
	// store refused a write (wire.HeaderStored, wire.HeaderReverts).
	Stored, Reverts uint64
	// Notice: no frame but a stored notice (wire.StoredSubject): an acknowledged write made a
	// frame published before stored, and no frame of this tick says so. It has no topic, index
	// or payload.
	Notice bool
}

// FramePublisher sends frames to their watchers (natscmd.FramePublisher over NATS). Publish is
// called on the tick path right after a tick: it must not block (drop and count instead).
type FramePublisher interface {
	Publish(f Frame)
}

// EffectPublisher sends stored effects to the effects stream (natscmd.EffectPublisher on
// JetStream), with the effect's key as the stream's message ID. Publish must not block; done
// reports the stream's acknowledgement (nil) or a failure (the instance sends it again later).
type EffectPublisher interface {
	Publish(instance string, e store.Effect, done func(error))
}

// Config of a Host.
type Config struct {
	Node    string
	Session string
	Store   store.Store
	// Commands may be nil: then commands only arrive through Host.Submit.
	Commands Commands
	// Frames publishes the frames of instances whose Logic is an actor.Framer (nil: they are
	// taken and dropped).
	Frames FramePublisher
	// Effects publishes the effects of instances whose Logic is an actor.Emitter, once the write
	// holding them was accepted (nil: they stay in the records' outboxes, and while an outbox is
	// full its instance answers commands busy).
	Effects EffectPublisher
	Kinds   *actor.Kinds
	Engine  *actor.Engine
	// CheckpointEvery: an instance with no command is still written every this many ticks.
	CheckpointEvery uint64
	Logger          *slog.Logger
	// Registerer receives the node's metrics (DESIGN 7 names them), shared with an engine and a
	// coordinator configured with the same one. nil: none.
	Registerer prometheus.Registerer
	metrics    *metrics.Node
	// LoadParallelism bounds concurrent instance loads while a shard starts (default 16).
	LoadParallelism int
	// BeforeWrite, if set, runs just before every fenced state write, in the goroutine that makes
	// it. Fault tests use it to freeze an owner exactly before its save.
	BeforeWrite func(shard uint32, id string)
	// TombstoneTTL is how long an ended instance's tombstone keeps its request window, so a
	// retransmitted end gets its first answer (default 10m; it must exceed how long clients
	// retransmit). Then a fenced delete marker removes it.
	TombstoneTTL time.Duration
	// ReconcileEvery is how often Watch compares every shard key with what runs here, besides
	// following changes (default 5s; negative: never).
	ReconcileEvery time.Duration
	// MaxCommandDelay is the admission target: when for a whole 100 ms even the quickest
	// command took longer than this from arrival to answer, new commands are refused with busy
	// until answers are quick again (default DefaultMaxCommandDelay; negative: admit everything).
	MaxCommandDelay time.Duration
	// MaxPendingCommands bounds the commands admitted and not yet answered; more are refused
	// with busy (default 50000).
	MaxPendingCommands int
	// WriteStrategy: single fenced writes, or one atomic batch per shard in flight (DESIGN 10).
	// Default WriteAuto: batches when the cluster's data buckets have more than one replica.
	WriteStrategy WriteStrategy
}

// DefaultMaxCommandDelay is Config.MaxCommandDelay's default.
const DefaultMaxCommandDelay = 250 * time.Millisecond

// Host runs the shards granted to one node session.
type Host struct {
	cfg     Config
	log     *slog.Logger
	cluster store.Cluster

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// spawnMu orders spawn's Add before waitAll's Wait; finished: no more goroutines start.
	spawnMu sync.Mutex
	denying atomic.Int64 // unknown-instance checks running (shardRun.deny)
	// failures counts the instances that ever failed here (instance.failLocked): while it is 0,
	// counting the failed ones (a metric scrape, a lease report) walks nothing.
	failures atomic.Int64
	finished bool

	mu       sync.Mutex
	shards   map[uint32]*shardRun
	closed   bool
	paused   bool
	handoffs map[uint32]time.Time // shards arriving by a graceful move: when the old owner stopped
	lastLoad time.Time
	// seen is the highest revision of each shard.<S> applied: a watch reopened, a lagging replica
	// or a listing can replay older values, and those change nothing.
	seen map[uint32]uint64
	// released is the grant this session handed a shard on under: the key may still name it
	// (at that token or a rotation of it, which keeps the value) until the coordinator grants the
	// shard elsewhere, and reconciling must not take it back. A new grant has a new Grant field.
	released     map[uint32]handedOn
	reconcileNow chan struct{}
	adm          *admission
	busyOnce     sync.Once
	busyReply    []byte   // admission's refusal, the same for every command
	fence        sync.Map // shard → *fenceView, for the diagnostic logs (diaglog.go)
	diagLimit    logkey.Limiter

	// Writes leave the tick workers through writeQ: encoding a record and publishing it (which
	// can wait on the connection's lock) happen on the writer goroutines, so a slow store never
	// holds a tick back. Once the host is cancelled (writersDone), writes are sent in place.
	// sessionTTL and requestTTL: store.ClientSessionTTL and store.RequestTTL in ticks.
	sessionTTL, requestTTL uint64
	life                   hostLife // the kinds' options (lifecycle.go)

	// bw sends batches when batches is set (Config.WriteStrategy); batchesOff is set for good
	// when the store says a data bucket cannot take them (store.ErrBatchesOff).
	bw         store.BatchWriter
	batches    bool
	batchesOff atomic.Bool

	writeQ      chan queuedWrite
	writeMu     sync.RWMutex
	writersDone bool
	startWrites sync.Once
}

type queuedWrite struct {
	in *instance
	w  *write
}

// writers is how many goroutines send the host's writes.
const writers = 2

// enqueueWrite hands a write to the writer goroutines (in place if their queue is full or they
// have stopped).
func (h *Host) enqueueWrite(in *instance, w *write) {
	h.startWrites.Do(func() {
		for range writers {
			h.spawn(h.writer)
		}
	})
	h.writeMu.RLock()
	if !h.writersDone && h.ctx.Err() == nil { // cancelled: the writers may never have started
		select {
		case h.writeQ <- queuedWrite{in, w}:
			h.writeMu.RUnlock()
			return
		default:
		}
	}
	h.writeMu.RUnlock()
	in.send(w)
}

func (h *Host) writer() {
	for {
		select {
		case q := <-h.writeQ:
			q.in.send(q.w)
		case <-h.ctx.Done():
			h.writeMu.Lock()
			h.writersDone = true
			h.writeMu.Unlock()
			for {
				select {
				case q := <-h.writeQ:
					q.in.send(q.w)
				default:
					return
				}
			}
		}
	}
}

// New validates the config and reads the cluster record.
func New(ctx context.Context, cfg Config) (*Host, error) {
	switch {
	case cfg.Node == "" || cfg.Session == "":
		return nil, errors.New("shard host: node and session are required")
	case cfg.Store == nil || cfg.Kinds == nil || cfg.Engine == nil:
		return nil, errors.New("shard host: store, kinds and engine are required")
	}
	cfg.metrics = metrics.For(cfg.Registerer)
	if cfg.CheckpointEvery == 0 {
		cfg.CheckpointEvery = 20
	}
	if cfg.LoadParallelism <= 0 {
		cfg.LoadParallelism = 16
	}
	if cfg.TombstoneTTL == 0 {
		cfg.TombstoneTTL = 10 * time.Minute
	}
	if cfg.MaxCommandDelay == 0 {
		cfg.MaxCommandDelay = DefaultMaxCommandDelay
	}
	if cfg.MaxPendingCommands <= 0 {
		cfg.MaxPendingCommands = 50000
	}
	if cfg.ReconcileEvery == 0 {
		cfg.ReconcileEvery = 5 * time.Second
	}
	if cfg.WriteStrategy == "" {
		cfg.WriteStrategy = WriteAuto
	}
	if _, err := ParseWriteStrategy(string(cfg.WriteStrategy)); err != nil {
		return nil, fmt.Errorf("shard host: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cl, err := cfg.Store.Cluster(ctx)
	if err != nil {
		return nil, fmt.Errorf("shard host: %w", err)
	}
	hctx, cancel := context.WithCancel(context.Background())
	h := &Host{cfg: cfg, log: cfg.Logger.With("session", cfg.Session), cluster: cl, writeQ: make(chan queuedWrite, 1<<16),
		ctx: hctx, cancel: cancel, shards: map[uint32]*shardRun{}, lastLoad: time.Now(),
		seen: map[uint32]uint64{}, released: map[uint32]handedOn{},
		reconcileNow: make(chan struct{}, 1), adm: newAdmission(cfg.MaxCommandDelay, cfg.MaxPendingCommands, cfg.metrics.CommandsPending, cfg.metrics.Shedding, cfg.Logger.With("session", cfg.Session)),
		busyReply: wire.EncodeReply(wire.Reply{Error: wire.Errorf(wire.CodeBusy,
			"node %s is past its capacity: commands wait over %v to be committed or ticks run late; retry with the same request after a backoff",
			cfg.Node, cfg.MaxCommandDelay)})}
	if h.bw, h.batches, err = batching(cfg, cl); err != nil {
		cancel()
		return nil, err
	}
	h.log.Info("write strategy", "strategy", cfg.WriteStrategy, "batches", h.batches, "replicas", cl.Replicas)
	if h.batches && cl.Replicas <= 1 {
		h.log.Warn("write strategy: batches on unreplicated buckets; a NATS server stages each atomic batch of an R1 file stream in a file store of its own, "+
			"far slower than single writes (auto picks single for R1; README: Writes on a replicated stream)",
			"strategy", cfg.WriteStrategy, "replicas", cl.Replicas)
	}
	h.sessionTTL = store.TTLTicks(store.ClientSessionTTL, cfg.Engine.Period())
	h.requestTTL = store.TTLTicks(store.RequestTTL, cfg.Engine.Period())
	if err := h.initLife(); err != nil {
		cancel()
		return nil, err
	}
	if h.adm != nil && !cfg.Engine.Manual() {
		h.adm.lag, h.adm.lagLimit = cfg.Engine.Lag, cfg.Engine.Period()/2
	}
	cfg.metrics.CountPendingEffects(h.pendingEffects)
	cfg.metrics.CountFailedInstances(func() uint64 { _, n := h.Failed(0); return uint64(n) })
	return h, nil
}

// Cluster is the cluster record the host runs under.
func (h *Host) Cluster() store.Cluster { return h.cluster }

// Session is the session this host serves (Config.Session).
func (h *Host) Session() string { return h.cfg.Session }

// Watch follows the assignments of the cluster's epoch and applies them until ctx ends. A watch
// that fails to start or ends is logged and opened again after a backoff, and every
// ReconcileEvery all shard keys are compared with what runs here: a shard must never sit
// assigned to this live session without being served, since the coordinator would not fail it
// over.
func (h *Host) Watch(ctx context.Context) error {
	// Reconciling runs beside the watch, never in the loop that drains it: a slow listing must
	// not hold up grants, and a store that blocks writers on a full watch must not deadlock.
	var wg sync.WaitGroup
	defer wg.Wait()
	rctx, stopReconcile := context.WithCancel(ctx)
	defer stopReconcile()
	wg.Add(1)
	go func() { defer wg.Done(); h.reconcileLoop(rctx) }()
	// Whatever changed while no watch was open is caught by the replay and a reconcile.
	watch.Keep(ctx, h.log.With("epoch", h.cluster.Epoch), "shard assignment watch",
		func() (<-chan store.AssignmentEvent, error) {
			return h.cfg.Store.WatchAssignments(ctx, h.cluster.Epoch)
		},
		func(ev store.AssignmentEvent) bool { h.Apply(ev); return false }, h.kickReconcile)
	return ctx.Err()
}

func (h *Host) kickReconcile() {
	select {
	case h.reconcileNow <- struct{}{}:
	default:
	}
}

func (h *Host) reconcileLoop(ctx context.Context) {
	var tick <-chan time.Time
	if h.cfg.ReconcileEvery > 0 {
		t := time.NewTicker(h.cfg.ReconcileEvery)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
		case <-h.reconcileNow:
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		h.Reconcile(rctx)
		cancel()
	}
}

// Reconcile starts every shard whose key names this session (confirmed by a read through the
// stream leader) but that does not run here, rotating its token first: this session may have
// written under that token before it stopped. Shards it handed on are left to the coordinator.
func (h *Host) Reconcile(ctx context.Context) {
	if h.isPaused() {
		return
	}
	evs, err := h.cfg.Store.ListAssignments(ctx, h.cluster.Epoch)
	if err != nil {
		if ctx.Err() == nil {
			h.log.Warn("reconcile: cannot list shard assignments", "err", err)
		}
		return
	}
	for _, ev := range evs {
		if ev.Deleted || ev.Owner != h.cfg.Node || ev.Session != h.cfg.Session || h.runs(ev.Shard) {
			continue
		}
		a, rev, err := h.cfg.Store.LatestAssignment(ctx, h.cluster.Epoch, ev.Shard)
		if err != nil || a.Owner != h.cfg.Node || a.Session != h.cfg.Session {
			continue // moved on meanwhile: the watch brings that
		}
		h.mu.Lock()
		rel, ok := h.released[ev.Shard]
		// Handed on: left to the coordinator for a while; if the key still names this session
		// after that (the move was dropped), the shard is taken back rather than left unserved.
		skip := h.closed || h.paused || h.shards[ev.Shard] != nil || ok && rel.grant == a && time.Since(rel.at) < releasedHold
		if !skip {
			h.seen[ev.Shard] = max(h.seen[ev.Shard], rev)
			h.noteRevision(ev.Shard, rev)
		}
		h.mu.Unlock()
		if skip {
			continue
		}
		h.log.Warn("reconcile: shard assigned to this session was not running; taking it up under a rotated token",
			"shard", ev.Shard, "token", rev)
		h.start(store.Grant{Epoch: h.cluster.Epoch, Shard: ev.Shard, Token: rev, Assignment: a}, true)
	}
}

// handedOn is a shard this session released in a hand-off, under which grant, and when.
type handedOn struct {
	grant store.Assignment
	at    time.Time
}

// releasedHold is how long reconciling leaves a handed-on shard to the coordinator.
const releasedHold = 15 * time.Second

// Holds reports whether the shard runs here under a grant with that identifier (a move asked of
// an older grant of this session is stale: the shard was granted to it again since).
func (h *Host) Holds(shard uint32, grant string) bool {
	h.mu.Lock()
	sh := h.shards[shard]
	h.mu.Unlock()
	if sh == nil {
		return false
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.grant.Grant == grant
}

// applied raises the shard's high-water mark to a revision this session made itself (a
// rotation), so the watch event of it changes nothing.
func (h *Host) applied(shard uint32, rev uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seen[shard] = max(h.seen[shard], rev)
	h.noteRevision(shard, rev)
}

func (h *Host) runs(shard uint32) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.shards[shard] != nil
}

// start runs a shard granted at g. rotateFirst: this session may have written under g.Token
// already (DESIGN 4: never reload under a token you have written with), so rotate, then load.
func (h *Host) start(g store.Grant, rotateFirst bool) {
	h.mu.Lock()
	if h.closed || h.shards[g.Shard] != nil {
		h.mu.Unlock()
		return
	}
	delete(h.released, g.Shard)
	sh := newShardRun(h, g)
	if at, ok := h.handoffs[g.Shard]; ok {
		sh.resumeFrom = at
		delete(h.handoffs, g.Shard)
	}
	if rotateFirst {
		sh.state = rebuilding
	}
	h.shards[g.Shard] = sh
	h.noteToken(g.Shard, g.Token)
	h.mu.Unlock()
	h.cfg.metrics.ShardsOwned.Inc()
	if rotateFirst {
		h.spawn(func() { sh.rotateAndLoad(g, 0) })
	} else {
		h.spawn(func() { sh.load(g) })
	}
}

// Apply acts on one observed value of shard.<S>: a grant to this session starts (or, at a newer
// revision it did not make itself, rebuilds) the shard; anything else stops it. A revision at or
// below one already applied is dropped.
func (h *Host) Apply(ev store.AssignmentEvent) {
	mine := !ev.Deleted && ev.Owner == h.cfg.Node && ev.Session == h.cfg.Session
	h.mu.Lock()
	if h.closed || ev.Revision <= h.seen[ev.Shard] {
		h.mu.Unlock()
		return
	}
	h.seen[ev.Shard] = ev.Revision
	h.noteRevision(ev.Shard, ev.Revision)
	sh := h.shards[ev.Shard]
	switch {
	case mine && sh == nil:
		h.mu.Unlock()
		h.start(store.Grant{Epoch: h.cluster.Epoch, Shard: ev.Shard, Token: ev.Revision, Assignment: ev.Assignment}, false)
	case mine:
		h.mu.Unlock()
		sh.observe(ev.Revision)
	case sh != nil:
		h.mu.Unlock()
		sh.stop("reassigned", slog.Uint64(logkey.CurrentRevision, ev.Revision), slog.String("new_owner", ev.Owner),
			slog.String("new_session", ev.Session), slog.Bool("released", ev.Deleted))
	default:
		h.mu.Unlock()
	}
}

// spawn runs f on a goroutine the host waits for. Once the host waits for its last goroutines
// (Close, Abandon) nothing new starts: every shard is stopped by then, and an Add racing the
// Wait is a misuse of the WaitGroup; spawn then reports false.
func (h *Host) spawn(f func()) bool {
	h.spawnMu.Lock()
	defer h.spawnMu.Unlock()
	if h.finished {
		return false
	}
	h.wg.Add(1)
	go func() { defer h.wg.Done(); f() }()
	return true
}

// waitAll stops spawning and waits for every goroutine the host started.
func (h *Host) waitAll() {
	h.spawnMu.Lock()
	h.finished = true
	h.spawnMu.Unlock()
	h.wg.Wait()
}

func (h *Host) forget(sh *shardRun) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.shards[sh.id] == sh {
		delete(h.shards, sh.id)
		h.cfg.metrics.ShardsOwned.Dec()
		h.noteToken(sh.id, 0)
	}
}

// Submit hands a command to the owner of its shard, as the command transport does.
func (h *Host) Submit(c Command) {
	h.mu.Lock()
	sh := h.shards[c.Shard]
	h.mu.Unlock()
	if sh == nil && c.Heartbeat {
		return // nothing to note, no one to answer
	}
	if sh == nil {
		h.answer(c, wire.EncodeReply(wire.Reply{Error: wire.Errorf(wire.CodeNotOwner,
			"node %s does not own shard %d", h.cfg.Node, c.Shard)}), wire.CodeNotOwner)
		return
	}
	sh.submit(c)
}

// admit applies admission control to a command arriving for a running shard: false if it was
// refused (answered busy).
func (h *Host) admit(c *Command) bool {
	if c.admitted || h.adm.admit(time.Now(), c.Screened) {
		c.admitted = true
		return true
	}
	h.answer(*c, h.busyReply, wire.CodeBusy)
	return false
}

// Shedding reports whether admission control refuses new commands now: a transport may ask it
// before decoding a command, and answer busy at once (the command counts as refused).
func (h *Host) Shedding() bool { return h.adm.refusing(time.Now()) }

// answer sends a reply and counts it.
func (h *Host) answer(c Command, reply []byte, result string) {
	now := time.Now()
	took := now.Sub(c.Received)
	if c.admitted {
		h.adm.done(took, now)
	}
	h.cfg.metrics.Commands.WithLabelValues(result).Inc()
	h.cfg.metrics.CommandSeconds.Observe(took.Seconds())
	if result != "ok" && result != "duplicate" {
		h.logRefusal(c, result, reply)
	}
	if c.Reply != nil {
		c.Reply(reply)
	}
}

func (h *Host) answerErr(c Command, code, format string, args ...any) {
	h.answer(c, wire.EncodeReply(wire.Reply{Error: wire.Errorf(code, format, args...)}), code)
}

// Shards lists the shards this host is running or loading.
func (h *Host) Shards() []uint32 {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []uint32
	for id := range h.shards {
		out = append(out, id)
	}
	return out
}

// Running reports whether a shard is loaded and ticking.
func (h *Host) Running(shard uint32) bool {
	h.mu.Lock()
	sh := h.shards[shard]
	h.mu.Unlock()
	if sh == nil {
		return false
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.state == running
}

// Close stops taking commands, writes every instance's latest state under its token, releases the
// shards (compare-and-delete) and waits for the host's goroutines.
func (h *Host) Close(ctx context.Context) error {
	h.mu.Lock()
	h.closed = true
	shards := make([]*shardRun, 0, len(h.shards))
	for _, sh := range h.shards {
		shards = append(shards, sh)
	}
	h.mu.Unlock()
	var errs []error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, sh := range shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := sh.flushAndRelease(ctx); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	h.cancel()
	h.waitAll()
	return errors.Join(errs...)
}

// Instances counts the instances of running shards.
func (h *Host) Instances() int {
	h.mu.Lock()
	shards := make([]*shardRun, 0, len(h.shards))
	for _, sh := range h.shards {
		shards = append(shards, sh)
	}
	h.mu.Unlock()
	n := 0
	for _, sh := range shards {
		sh.mu.Lock()
		n += len(sh.insts)
		sh.mu.Unlock()
	}
	return n
}

func (h *Host) isPaused() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.paused
}

func (h *Host) all() []*shardRun {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*shardRun, 0, len(h.shards))
	for _, sh := range h.shards {
		out = append(out, sh)
	}
	return out
}

// Pause is the self-fence: every shard stops ticking at once and answers retry, until Resume.
func (h *Host) Pause() {
	h.mu.Lock()
	h.paused = true
	h.mu.Unlock()
	for _, sh := range h.all() {
		sh.pause()
	}
	h.log.Warn("node self-fenced: every shard paused until its token is rotated")
}

// Resume re-validates every paused shard by rotating its token (never a plain reload: its writes
// from before the pause may still land) and rebuilding it from the store.
func (h *Host) Resume() {
	h.mu.Lock()
	h.paused = false
	h.mu.Unlock()
	for _, sh := range h.all() {
		sh.rebuild("resuming after a self-fence", 0)
	}
}

// Abandon stops every shard without writing anything: the session that owned them is gone.
func (h *Host) Abandon(reason string) {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	for _, sh := range h.all() {
		sh.stop(reason)
	}
	h.cancel()
	h.waitAll()
}

// HandOff moves a shard away gracefully: it finishes the current tick, writes every instance
// under its token, and then calls release with the time it stopped ticking. If release fails the
// shard is rebuilt here (rotated, reloaded), since it was not handed on.
func (h *Host) HandOff(ctx context.Context, shard uint32, release func(stoppedAt time.Time) error) error {
	h.mu.Lock()
	sh := h.shards[shard]
	h.mu.Unlock()
	if sh == nil {
		return fmt.Errorf("shard %d is not running here", shard)
	}
	err := sh.flushThen(ctx, "handoff", func(g store.Grant, stoppedAt time.Time) error {
		if err := release(stoppedAt); err != nil {
			return err
		}
		h.mu.Lock()
		h.released[shard] = handedOn{grant: g.Assignment, at: time.Now()}
		h.mu.Unlock()
		return nil
	})
	if err != nil {
		sh.log.Error("hand-off failed; the shard will be reassigned by the coordinator", "err", err)
	}
	return err
}

// ExpectHandOff tells a shard about to be granted that its previous owner stopped ticking at
// stoppedAt, so the pause its instances saw is measured.
// If the grant arrived first (the moves and the assignments are watched apart), the running
// shard reports it instead.
func (h *Host) ExpectHandOff(shard uint32, stoppedAt time.Time) {
	h.mu.Lock()
	if sh := h.shards[shard]; sh != nil {
		h.mu.Unlock()
		sh.handedOffLate(stoppedAt)
		return
	}
	defer h.mu.Unlock()
	if h.handoffs == nil {
		h.handoffs = map[uint32]time.Time{}
	}
	h.handoffs[shard] = stoppedAt
}

// Load is what a node reports in its lease: what it runs and what ticking costs.
type Load struct {
	Shards    int `json:"shards"`
	Instances int `json:"instances"`
	// TickCPU is seconds of tick work per second, by shard, since the previous report.
	TickCPU map[uint32]float64 `json:"tick_cpu"`
	// Failed lists instances out of service here because the game's code failed in them (at most
	// store.MaxFailedReported); FailedCount counts them all.
	Failed      []store.FailedInstance `json:"failed,omitempty"`
	FailedCount int                    `json:"failed_count,omitempty"`
}

// Load measures the host's load since the previous call.
func (h *Host) Load() Load {
	now := time.Now()
	h.mu.Lock()
	elapsed := now.Sub(h.lastLoad).Seconds()
	h.lastLoad = now
	shards := make([]*shardRun, 0, len(h.shards))
	for _, sh := range h.shards {
		shards = append(shards, sh)
	}
	h.mu.Unlock()
	l := Load{TickCPU: map[uint32]float64{}}
	l.Failed, l.FailedCount = h.Failed(store.MaxFailedReported)
	for _, sh := range shards {
		ns := sh.cpu.Swap(0)
		sh.mu.Lock()
		n, st := len(sh.insts), sh.state
		sh.mu.Unlock()
		if st == stopped || st == handingOff {
			continue
		}
		l.Shards++
		l.Instances += n
		if elapsed > 0 {
			// Smoothed (EWMA over about five reports), so the planner does not chase noise.
			rate := float64(ns) / 1e9 / elapsed
			sh.mu.Lock()
			if sh.cpuAvg == 0 {
				sh.cpuAvg = rate
			} else {
				sh.cpuAvg = 0.2*rate + 0.8*sh.cpuAvg
			}
			l.TickCPU[sh.id] = sh.cpuAvg
			sh.mu.Unlock()
		}
	}
	return l
}

// Failed lists the instances out of service here because the game's code failed in them (at
// most max of them, sorted by ID; max 0: none listed) and counts them all. It takes the host's, a
// shard's and an instance's lock one at a time, never two at once.
func (h *Host) Failed(max int) ([]store.FailedInstance, int) {
	if h.failures.Load() == 0 {
		return nil, 0
	}
	var out []store.FailedInstance
	n := 0
	for _, sh := range h.all() {
		sh.mu.Lock()
		insts := make([]*instance, 0, len(sh.insts))
		for _, in := range sh.insts {
			insts = append(insts, in)
		}
		sh.mu.Unlock()
		for _, in := range insts {
			in.mu.Lock()
			if f := in.fail; f != nil {
				n++
				out = append(out, store.FailedInstance{ID: in.id, Shard: sh.id, Cause: f.cause, Reason: f.reason, Since: f.at.UnixMilli()})
			}
			in.mu.Unlock()
		}
	}
	slices.SortFunc(out, func(a, b store.FailedInstance) int { return strings.Compare(a.ID, b.ID) })
	if len(out) > max {
		out = out[:max]
	}
	if len(out) == 0 {
		out = nil
	}
	return out, n
}

// Reload loads a failed instance again from the store, as an operator's reload request does
// (tickctl instance reload): once the game is fixed, it serves the instance from its stored
// state. Nil if it runs (reloaded, or it had not failed); else a *wire.Error: instance_failed if
// it fails again (why), not_owner or retry if its shard is not running here now, unknown_instance
// if the shard holds no such instance.
func (h *Host) Reload(ctx context.Context, id string) error {
	if err := store.ValidID(id); err != nil {
		return wire.Errorf(wire.CodeBadRequest, "%v", err)
	}
	h.mu.Lock()
	sh := h.shards[store.ShardOf(id, h.cluster.Shards)]
	h.mu.Unlock()
	if sh == nil {
		return wire.Errorf(wire.CodeNotOwner, "node %s does not own shard %d", h.cfg.Node, store.ShardOf(id, h.cluster.Shards))
	}
	if _, werr := sh.reload(ctx, id); werr != nil {
		return werr
	}
	return nil
}

// operate answers an operator's request to this node (Command.Operator): "reload" an instance.
func (sh *shardRun) operate(c Command) {
	h := sh.h
	if c.AckOnly() {
		return
	}
	if c.Type != "reload" {
		h.answerErr(c, wire.CodeBadRequest, "unknown operator request %q (reload)", c.Type)
		return
	}
	if !h.spawn(func() {
		ctx, cancel := context.WithTimeout(sh.ctx, reloadTimeout)
		defer cancel()
		res, werr := sh.reload(ctx, c.Instance)
		if werr != nil {
			h.answer(c, wire.EncodeReply(wire.Reply{Error: werr}), werr.Code)
			return
		}
		h.answer(c, wire.EncodeReply(wire.Reply{OK: true, Result: res}), "ok")
	}) {
		h.answerErr(c, wire.CodeNotOwner, "node %s is closing", h.cfg.Node)
	}
}

// reloadTimeout bounds a reload (the wait for a write of the instance still in flight, the load).
const reloadTimeout = 10 * time.Second
