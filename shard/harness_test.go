package shard_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/actor/dungeon"
	"github.com/tickfence/tickfence/internal/metrics"
	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/shard"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/memstore"
	"github.com/tickfence/tickfence/store/natskv"
)

const testShards = 8

// counter is a test kind: a number, and a blob that "grow" makes as large as asked.
type counter struct{}

func (counter) Name() string { return "counter" }
func (counter) New(string, actor.Command) (actor.Logic, error) {
	return &counterState{}, nil
}
func (counter) Restore(_ string, b []byte) (actor.Logic, error) {
	s := &counterState{}
	return s, msgpack.Unmarshal(b, s)
}

type counterState struct {
	N     int64  `msgpack:"n"`
	Blob  []byte `msgpack:"blob"`
	Ticks uint64 `msgpack:"ticks"`
}

func (s *counterState) Tick(tick uint64) { s.Ticks = tick }
func (s *counterState) Handle(_ uint64, c actor.Command) (any, error) {
	var a struct {
		By int64 `msgpack:"by"`
		N  int   `msgpack:"n"`
	}
	if err := c.Decode(&a); err != nil {
		return nil, err
	}
	switch c.Type {
	case "add":
		s.N += a.By
		return map[string]any{"n": s.N}, nil
	case "grow":
		s.Blob = make([]byte, a.N)
		return map[string]any{"blob": a.N}, nil
	case "get":
		return map[string]any{"n": s.N}, nil
	}
	return nil, actor.Reject("unknown %q", c.Type)
}
func (s *counterState) MarshalState() ([]byte, error) { return msgpack.Marshal(s) }

// backend is a store under test: the in-memory one or a real embedded JetStream server.
type backend struct {
	name string
	// open returns a new client of the same store (one per node, as separate processes would have).
	open func(t *testing.T) store.Store
	// nc is a raw NATS connection to the server (nil for memory).
	nc func(t *testing.T) *nats.Conn
}

func backends(t *testing.T) []backend {
	mem := memstore.New()
	var once sync.Once
	var srv *natsserver.Server
	start := func(t *testing.T) *natsserver.Server {
		once.Do(func() {
			var err error
			srv, err = natsserver.Start(natsserver.Config{DataDir: t.TempDir()})
			if err != nil {
				t.Fatalf("embedded NATS server: %v", err)
			}
			t.Cleanup(srv.Stop)
		})
		return srv
	}
	connect := func(t *testing.T) *nats.Conn {
		nc, err := natskv.Connect("", start(t).ConnectOption())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	return []backend{
		{name: "memory", open: func(*testing.T) store.Store { return mem }},
		{name: "jetstream", open: func(t *testing.T) store.Store {
			s, err := natskv.Open(connect(t), natskv.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}, nc: connect},
	}
}

// forEachBackend runs a test against both stores.
func forEachBackend(t *testing.T, f func(t *testing.T, b backend)) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) { f(t, b) })
	}
}

// node is one tickfence node under test, fed its grants by the test (no watch: a frozen node
// must not learn of its loss except from the store).
type node struct {
	t       *testing.T
	name    string
	st      store.Store
	host    *shard.Host
	engine  *actor.Engine
	metrics *metrics.Node
	freeze  *freezer
}

type nodeOpt struct {
	commands        func(reg prometheus.Registerer) shard.Commands
	checkpointEvery uint64
	tombstoneTTL    time.Duration
	maxCmdDelay     time.Duration
	frames          func(reg prometheus.Registerer) shard.FramePublisher
	effects         func(reg prometheus.Registerer) shard.EffectPublisher
	writeStrategy   shard.WriteStrategy
	log             io.Writer    // the host's log (warnings and above) besides stderr
	kinds           []actor.Kind // the kinds the node knows (nil: every test kind)
}

func logTo(w io.Writer) io.Writer {
	if w == nil {
		return os.Stderr
	}
	return io.MultiWriter(os.Stderr, w)
}

func newNode(t *testing.T, st store.Store, name string, opt nodeOpt) *node {
	t.Helper()
	ctx := context.Background()
	if _, err := st.Bootstrap(ctx, store.Cluster{Shards: testShards, Partitions: 1, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m := metrics.For(reg)
	e, err := actor.NewEngine(actor.EngineConfig{Rate: 50, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	known := opt.kinds
	if known == nil {
		known = []actor.Kind{counter{}, dungeon.Kind{}, bomb{}, shower{}, emitter{}, fxbomb{}, tbomb{}, fragile{}, rawfx{}, vault{}}
	}
	kinds, _ := actor.NewKinds(known...)
	n := &node{t: t, name: name, st: st, engine: e, metrics: m, freeze: &freezer{}}
	cfg := shard.Config{Node: name, Session: name + "-s1", Store: st, Kinds: kinds, Engine: e, Registerer: reg,
		CheckpointEvery: opt.checkpointEvery, WriteStrategy: opt.writeStrategy, BeforeWrite: n.freeze.before, TombstoneTTL: opt.tombstoneTTL, MaxCommandDelay: opt.maxCmdDelay,
		Logger: slog.New(slog.NewTextHandler(logTo(opt.log), &slog.HandlerOptions{Level: slog.LevelWarn})).With("node", name)}
	if opt.commands != nil {
		cfg.Commands = opt.commands(reg)
	}
	if opt.frames != nil {
		cfg.Frames = opt.frames(reg)
	}
	if opt.effects != nil {
		cfg.Effects = opt.effects(reg)
	}
	if n.host, err = shard.New(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.freeze.release()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = n.host.Close(ctx)
		e.Stop()
	})
	return n
}

// withInstance starts node A on st, runs shard 1 there and creates one instance of kind in it.
func withInstance(t *testing.T, st store.Store, kind string, opt nodeOpt) (*node, string) {
	t.Helper()
	n := newNode(t, st, "A", opt)
	id := idIn(1, 0)
	n.grant(1)
	mustOK(t, n.send(id, "c", map[string]any{"type": "create", "kind": kind}), "create")
	return n, id
}

// ticked waits until the engine has run k more ticks: with one instance on the node, every
// command submitted before the call has been applied by then.
func (n *node) ticked(k uint64) {
	n.t.Helper()
	from := n.engine.Ticks()
	waitFor(n.t, fmt.Sprintf("%d ticks", k), func() bool { return n.engine.Ticks() >= from+k })
}

// grant assigns a shard to this node's session in the store and tells the host, as its watch
// would; it waits until the shard is running.
func (n *node) grant(shardID uint32) store.Grant {
	n.t.Helper()
	ctx := context.Background()
	_, rev, err := n.st.Assignment(ctx, 1, shardID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		n.t.Fatal(err)
	}
	a := store.Assignment{Owner: n.name, Session: n.name + "-s1"}
	tok, err := n.st.Assign(ctx, 1, shardID, a, rev)
	if err != nil {
		n.t.Fatalf("assign shard %d to %s: %v", shardID, n.name, err)
	}
	n.host.Apply(store.AssignmentEvent{Shard: shardID, Revision: tok, Assignment: a})
	waitFor(n.t, fmt.Sprintf("%s runs shard %d", n.name, shardID), func() bool { return n.host.Running(shardID) })
	return store.Grant{Epoch: 1, Shard: shardID, Token: tok, Assignment: a}
}

// send submits a command in-process and waits for its answer.
func (n *node) send(id, reqID string, cmd map[string]any) wire.Reply {
	n.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if r := n.sendOnce(id, reqID, cmd); !overloaded(r) || time.Now().After(deadline) {
			return r // not refused by the node's admission control (a loaded test machine)
		}
	}
}

// sendOnce is send without retrying the admission's busy (for tests of admission control).
func (n *node) sendOnce(id, reqID string, cmd map[string]any) wire.Reply {
	n.t.Helper()
	body, err := wire.Canonical(cmd)
	if err != nil {
		n.t.Fatal(err)
	}
	ch := n.submit(id, reqID, body)
	select {
	case b := <-ch:
		r, err := wire.DecodeReply(b, false)
		if err != nil {
			n.t.Fatal(err)
		}
		return r
	case <-time.After(10 * time.Second):
		n.t.Fatalf("%s: no answer to %s %v", n.name, reqID, cmd)
	}
	return wire.Reply{}
}

// sendRetryingBusy is send, retried with the same request ID while the node answers busy (as a
// client does): for tests that check what a command does, not admission control, on a machine
// that may be loaded.
func (n *node) sendRetryingBusy(id, reqID string, cmd map[string]any) wire.Reply {
	n.t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		r := n.send(id, reqID, cmd)
		if r.OK || r.Error.Code != wire.CodeBusy || time.Now().After(deadline) {
			return r
		}
	}
}

// submit submits a command and returns where its answer will arrive.
func (n *node) submit(id, reqID string, body []byte) <-chan []byte {
	n.t.Helper()
	req, err := wire.DecodeRequest(wire.Subject(store.ShardOf(id, testShards), id), reqID, "", body, testShards)
	if err != nil {
		n.t.Fatalf("bad test command: %v", err)
	}
	ch := make(chan []byte, 1)
	n.host.Submit(shard.Command{Request: req, Received: time.Now(), Reply: func(b []byte) { ch <- b }})
	return ch
}

func (n *node) writes(result string) float64 {
	return testutil.ToFloat64(n.metrics.StateWrites.WithLabelValues(result))
}

// freezer blocks a node's next fenced write of one instance, as a GC pause or SIGSTOP would.
type freezer struct {
	mu     sync.Mutex
	target string
	frozen chan struct{} // closed when the write is held
	thaw   chan struct{}
}

func (f *freezer) arm(id string) (frozen <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.target, f.frozen, f.thaw = id, make(chan struct{}), make(chan struct{})
	return f.frozen
}

func (f *freezer) before(_ uint32, id string) {
	f.mu.Lock()
	if f.target == "" || id != f.target {
		f.mu.Unlock()
		return
	}
	f.target = ""
	frozen, thaw := f.frozen, f.thaw
	f.mu.Unlock()
	close(frozen)
	<-thaw
}

func (f *freezer) release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.thaw != nil {
		select {
		case <-f.thaw:
		default:
			close(f.thaw)
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// idIn returns an instance ID of the shard.
func idIn(shardID uint32, n int) string {
	for i := 0; ; i++ {
		id := fmt.Sprintf("i%d-%d", n, i)
		if store.ShardOf(id, testShards) == shardID {
			return id
		}
	}
}

func load(t *testing.T, st store.Store, id string) (store.Record, *counterState) {
	t.Helper()
	rec, _, err := st.Load(context.Background(), 1, store.ShardOf(id, testShards), id)
	if err != nil {
		t.Fatalf("load %s: %v", id, err)
	}
	s := &counterState{}
	if err := msgpack.Unmarshal(rec.State, s); err != nil {
		t.Fatalf("state of %s: %v", id, err)
	}
	return rec, s
}

func mustOK(t *testing.T, r wire.Reply, what string) {
	t.Helper()
	if !r.OK {
		t.Fatalf("%s: got error %v, want ok", what, r.Error)
	}
}

func wantCode(t *testing.T, r wire.Reply, code, what string) {
	t.Helper()
	if r.OK || r.Error.Code != code {
		t.Fatalf("%s: got %+v, want error %s", what, r, code)
	}
}

var _ = natscmd.NewServer

func mustBody(t *testing.T, cmd map[string]any) []byte {
	t.Helper()
	b, err := wire.Canonical(cmd)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func errorsIsStale(err error) bool { return errors.Is(err, store.ErrStaleOwner) }

// bomb is a counter whose "boom" command panics in the game's code.
type bomb struct{}

func (bomb) Name() string                                   { return "bomb" }
func (bomb) New(string, actor.Command) (actor.Logic, error) { return &bombState{}, nil }
func (bomb) Restore(_ string, b []byte) (actor.Logic, error) {
	s := &bombState{}
	return s, msgpack.Unmarshal(b, &s.counterState)
}

type bombState struct{ counterState }

func (s *bombState) Handle(tick uint64, c actor.Command) (any, error) {
	if c.Type == "boom" {
		panic("boom")
	}
	return s.counterState.Handle(tick, c)
}

// gate holds the next call that passes it, once armed, until released: test stores embed it to
// stop a store call at a chosen moment.
type gate struct {
	mu               sync.Mutex
	entered, release chan struct{}
}

// arm makes the next pass block; entered closes when it does, closing release lets it go on.
func (g *gate) arm() (entered <-chan struct{}, release chan<- struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.entered, g.release = make(chan struct{}), make(chan struct{})
	return g.entered, g.release
}

func (g *gate) pass() {
	g.mu.Lock()
	entered, release := g.entered, g.release
	g.entered, g.release = nil, nil
	g.mu.Unlock()
	if entered != nil {
		close(entered)
		<-release
	}
}
