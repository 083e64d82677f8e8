// Package shard is the node-side host of tickfence: it runs the shards granted to this node's
// session. On a grant it loads the shard's instances, registers each under the grant's token
// (DESIGN.md section 4), ticks them on the engine and persists them with fenced writes; it applies
// commands at the next tick and answers them once the write holding their effect is stored. A
// write rejected as stale owner stops the shard at once; a write with an unknown outcome rotates
// the token and rebuilds the shard from the store.
package shard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/internal/metrics"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
)

// Command is one decoded command delivered to the owner of its shard.
type Command struct {
	wire.Request
	Received time.Time
	// Reply sends the encoded (msgpack) reply. The host calls it exactly once.
	Reply func(reply []byte)
}

// Commands connects the host to the command subjects of the shards it runs.
type Commands interface {
	// Serve delivers the commands of one shard to handle until stop is called.
	Serve(shard uint32, handle func(Command)) (stop func(), err error)
}

// Config of a Host.
type Config struct {
	Node    string
	Session string
	Store   store.Store
	// Commands may be nil: then commands only arrive through Host.Submit.
	Commands Commands
	Kinds    *actor.Kinds
	Engine   *actor.Engine
	// CheckpointEvery: an instance with no command is still written every this many ticks.
	CheckpointEvery uint64
	Logger          *slog.Logger
	Metrics         *metrics.Node
	// LoadParallelism bounds concurrent instance loads while a shard starts (default 16).
	LoadParallelism int
	// BeforeWrite, if set, runs just before every fenced state write, in the goroutine that makes
	// it. Fault tests use it to freeze an owner exactly before its save.
	BeforeWrite func(shard uint32, id string)
}

// Host runs the shards granted to one node session.
type Host struct {
	cfg     Config
	log     *slog.Logger
	cluster store.Cluster

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	shards map[uint32]*shardRun
	closed bool
}

// New validates the config and reads the cluster record.
func New(ctx context.Context, cfg Config) (*Host, error) {
	switch {
	case cfg.Node == "" || cfg.Session == "":
		return nil, errors.New("shard host: node and session are required")
	case cfg.Store == nil || cfg.Kinds == nil || cfg.Engine == nil || cfg.Metrics == nil:
		return nil, errors.New("shard host: store, kinds, engine and metrics are required")
	}
	if cfg.CheckpointEvery == 0 {
		cfg.CheckpointEvery = 20
	}
	if cfg.LoadParallelism <= 0 {
		cfg.LoadParallelism = 16
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cl, err := cfg.Store.Cluster(ctx)
	if err != nil {
		return nil, fmt.Errorf("shard host: %w", err)
	}
	hctx, cancel := context.WithCancel(context.Background())
	return &Host{cfg: cfg, log: cfg.Logger.With("session", cfg.Session), cluster: cl,
		ctx: hctx, cancel: cancel, shards: map[uint32]*shardRun{}}, nil
}

// Cluster is the cluster record the host runs under.
func (h *Host) Cluster() store.Cluster { return h.cluster }

// Watch follows the assignments of the cluster's epoch and applies them until ctx ends.
func (h *Host) Watch(ctx context.Context) error {
	ch, err := h.cfg.Store.WatchAssignments(ctx, h.cluster.Epoch)
	if err != nil {
		return err
	}
	for ev := range ch {
		h.Apply(ev)
	}
	return ctx.Err()
}

// Apply acts on one observed value of shard.<S>: a grant to this session starts (or, at a newer
// revision it did not make itself, rebuilds) the shard; anything else stops it.
func (h *Host) Apply(ev store.AssignmentEvent) {
	mine := !ev.Deleted && ev.Owner == h.cfg.Node && ev.Session == h.cfg.Session
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	sh := h.shards[ev.Shard]
	switch {
	case mine && sh == nil:
		g := store.Grant{Epoch: h.cluster.Epoch, Shard: ev.Shard, Token: ev.Revision, Assignment: ev.Assignment}
		sh = newShardRun(h, g)
		h.shards[ev.Shard] = sh
		h.mu.Unlock()
		h.cfg.Metrics.ShardsOwned.Inc()
		h.spawn(func() { sh.load(g) })
	case mine:
		h.mu.Unlock()
		sh.observe(ev.Revision)
	case sh != nil:
		h.mu.Unlock()
		sh.stop("reassigned", slog.Uint64("revision", ev.Revision), slog.String("new_owner", ev.Owner),
			slog.String("new_session", ev.Session), slog.Bool("released", ev.Deleted))
	default:
		h.mu.Unlock()
	}
}

func (h *Host) spawn(f func()) {
	h.wg.Add(1)
	go func() { defer h.wg.Done(); f() }()
}

func (h *Host) forget(sh *shardRun) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.shards[sh.id] == sh {
		delete(h.shards, sh.id)
		h.cfg.Metrics.ShardsOwned.Dec()
	}
}

// Submit hands a command to the owner of its shard, as the command transport does.
func (h *Host) Submit(c Command) {
	h.mu.Lock()
	sh := h.shards[c.Shard]
	h.mu.Unlock()
	if sh == nil {
		h.answer(c, wire.EncodeReply(wire.Reply{Error: wire.Errorf(wire.CodeNotOwner,
			"node %s does not own shard %d", h.cfg.Node, c.Shard)}), wire.CodeNotOwner)
		return
	}
	sh.submit(c)
}

// answer sends a reply and counts it.
func (h *Host) answer(c Command, reply []byte, result string) {
	h.cfg.Metrics.Commands.WithLabelValues(result).Inc()
	h.cfg.Metrics.CommandSeconds.Observe(time.Since(c.Received).Seconds())
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
	h.wg.Wait()
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
