// Package tickfence runs a game's instances — dungeons, raids, arenas — as single-owner actors
// ticking at a fixed rate on a cluster of nodes, with every state write fenced by the store so a
// node that slept through losing its shards cannot overwrite its successor (DESIGN.md).
//
// A game's main registers its kinds of instance and runs a node:
//
//	func main() {
//		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
//		defer stop()
//		err := tickfence.Run(ctx, tickfence.Options{
//			Kinds: []actor.Kind{arena.Kind{}}, // the game's code: see package actor
//			NATS:  os.Getenv("NATS_URL"),      // "": an embedded JetStream server
//		})
//		if err != nil {
//			log.Fatal(err)
//		}
//	}
//
// Run joins the cluster (creating it on first use when it runs its own embedded server or
// connects without credentials; on a server enforcing the roles an admin creates it first with
// tickctl cluster init), serves commands for the shards the coordinator gives this node, stands as a coordinator candidate, and, when ctx ends, hands its
// shards off and leaves. Start does the same and returns a *Node, for a program that also does
// something else (tickd drives demo players and prints a summary). Clients send commands over
// NATS (package client, or any NATS client: the wire format is DESIGN 5).
package tickfence

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/auth"
	"github.com/tickfence/tickfence/clusterinit"
	"github.com/tickfence/tickfence/coordinator"
	"github.com/tickfence/tickfence/internal/hdr"
	"github.com/tickfence/tickfence/internal/metrics"
	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/shard"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/shard/node"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/natskv"
)

// Options of a node. Every field's zero value means the default written beside it; no default
// hides a legitimate zero (a field where zero is meaningful says how to ask for it).
type Options struct {
	// Kinds are the game's kinds of instance (at least one). Every node of a cluster should
	// register the same kinds: an instance of a kind a node lacks cannot be loaded there.
	Kinds []actor.Kind

	// NodeID names this node in the cluster (default: the host name). Two live nodes must not
	// share one.
	NodeID string
	// NATS is the URL of a NATS server with JetStream. "" starts an embedded server in this
	// process, storing its files in DataDir.
	NATS string
	// NATSOptions are added to every connection to NATS (credentials, TLS, names).
	NATSOptions []nats.Option
	// Creds is a credentials file (package auth: node.creds from tickctl auth init) every
	// connection to NATS authenticates with, with the user's own inbox prefix. Default: none, or
	// the auth directory's node.creds with Auth.
	Creds string
	// Auth is an auth directory (tickctl auth init) whose roles the embedded server enforces
	// (DESIGN 9); with an external server, configure it there (its server.conf).
	Auth string
	// Insecure lets the embedded server listen on an address other than loopback without Auth.
	Insecure bool
	// TLSCA makes every connection to an external server TLS, verifying the server's
	// certificate against this CA file (tickctl auth init --tls writes a dev one: ca.pem).
	TLSCA string
	// TLSCert and TLSKey are the client certificate (PEM) every connection to an external
	// server presents, for a server that requires them (tickd server --tls-verify; a dev one:
	// auth.NewClientCert). They need TLSCA.
	TLSCert, TLSKey string
	// DataDir of the embedded server (default "tickfence-data"); reused on restart.
	DataDir string
	// Listen makes the embedded server accept clients on HOST:PORT (default: in-process only,
	// so only this program's own clients reach it).
	Listen string
	// WebSocket makes the embedded server accept NATS clients over WebSocket on HOST:PORT (browsers,
	// e.g. tickd's player demo page); WebSocketOrigins are the page origins allowed to (see
	// natsserver.Config; required without Auth).
	WebSocket        string
	WebSocketOrigins []string
	// Sync makes the embedded server fsync every write (default off: faster, and a power loss
	// can lose the last writes of the embedded server).
	Sync bool

	// Shards is the number of shards when this node creates the cluster (default 256); a cluster
	// that exists keeps its own. RequireShards makes a different count an error instead. A node
	// creates the cluster (package clusterinit) only when it runs the embedded server or connects
	// without credentials; a node on credentials opens the cluster an admin made (tickctl cluster
	// init: DESIGN 9, only admin shapes storage) and fails, naming the command, if there is none.
	Shards        uint32
	RequireShards bool
	// Partitions is the number of data buckets per epoch when this node creates the cluster
	// (default 1, at most Shards; shard S lives in partition S mod Partitions): on a JetStream
	// cluster their stream leaders, and so the write load, spread over the servers. Replicas is
	// the replicas of every bucket and stream of a new cluster (default 1; 3 or 5 on a cluster of
	// at least as many JetStream servers). Both are recorded in the cluster record and fixed: a
	// cluster that exists keeps its own, and RequirePartitions / RequireReplicas make a different
	// value an error instead (DESIGN 10).
	Partitions        uint32
	RequirePartitions bool
	Replicas          uint32
	RequireReplicas   bool
	// TickRate is ticks per second of every instance whose kind sets no rate of its own
	// (actor.KindOptions.TickRate; default 20).
	TickRate float64
	// TickWorkers is the number of goroutines that tick the instances (default
	// actor.DefaultWorkers: 16 per GOMAXPROCS, 16 to 64; more than the cores hold the tick
	// schedule better beside the command path and an embedded server).
	TickWorkers int
	// MaxCatchUp is how far behind its schedule the tick engine may fall and still run every
	// tick, late; beyond it, it skips to the present and counts the ticks it skipped (default
	// actor.DefaultCatchUp, 250 ms, at least 2 periods). A game that would rather drop ticks
	// than run them late gives less.
	MaxCatchUp time.Duration
	// CheckpointEvery writes an instance at least every this many ticks without commands
	// (default 20), unless its kind sets its own (actor.KindOptions.CheckpointEvery).
	CheckpointEvery uint64
	// LeaseTTL of the node and coordinator leases, whole seconds (default 2s): a dead node's
	// shards move after about this long.
	LeaseTTL time.Duration
	// RideThrough: how long a node whose lease cannot be renewed keeps ticking on the fence
	// before it pauses its shards (0, the default: at once; node.DefaultRideThrough is 15 s).
	RideThrough time.Duration
	// DataHistory is the revisions kept per instance key (default 1).
	DataHistory int64

	// NoCoordinator keeps this node out of the coordinator election (default: a candidate).
	NoCoordinator bool
	// Coordinator tuning, for candidates; see coordinator.Config (zero: its defaults).
	MaxMoves       int
	RebalanceEvery time.Duration
	HandOffTimeout time.Duration
	// BlobGCEvery is the interval between the coordinator leader's collections of unreferenced
	// large-state blobs (default coordinator.DefaultBlobGCEvery, 10 min; negative: none). They
	// run only where this node's own connection may delete blobs — the embedded server without
	// Auth, or a server without credentials; with the roles enforced (DESIGN 9) a node's
	// credential may not, and an admin runs tickctl gc instead. BlobGCGrace keeps an
	// unreferenced blob younger than it (default store.DefaultBlobGrace, 1 h): a write on its way
	// has uploaded its blob and not yet stored the record that points at it.
	BlobGCEvery time.Duration
	BlobGCGrace time.Duration

	// MaxCommandDelay is the admission target: past it, new commands are refused with busy
	// (default 250ms; negative: no admission control). MaxPendingCommands bounds the admitted,
	// unanswered commands (default 50 000).
	MaxCommandDelay    time.Duration
	MaxPendingCommands int
	// PlayerQuota bounds what each untrusted sender (a player: actor.Sender) may ask of this
	// node; nil: natscmd.DefaultQuota, a zero Quota: no limit. Trusted senders are bounded only
	// by admission control.
	PlayerQuota *natscmd.Quota
	// WriteStrategy: single fenced writes or one atomic batch per shard in flight (DESIGN 10).
	// Default (shard.WriteAuto): batches when the cluster's buckets are replicated.
	WriteStrategy shard.WriteStrategy

	// Registerer receives the node's Prometheus metrics (default: none).
	Registerer prometheus.Registerer
	// Logger receives structured logs (default: none).
	Logger *slog.Logger

	// BeforeWrite and BeforeRelease are fault-test hooks (see shard.Config, node.Config);
	// leave them nil.
	BeforeWrite, BeforeRelease func(shard uint32, id string)
}

// Node is a running tickfence node. Stop it with Stop.
type Node struct {
	opt Options
	log *slog.Logger
	srv *natsserver.Server
	// srvMetrics: the embedded server's collector, registered on Options.Registerer (nil: none).
	srvMetrics prometheus.Collector
	frames     *natscmd.FramePublisher
	effects    *natscmd.EffectPublisher
	connsMu    sync.Mutex
	conns      []*nats.Conn // every connection opened, closed by Close
	st         *natskv.Store
	storeConn  *nats.Conn // st's connection: whether the store is reachable at all
	cluster    store.Cluster
	engine     *actor.Engine
	node       *node.Node
	connect    func(purpose string) (*nats.Conn, error)                      // a connection as this node, closed by Close
	dial       func(purpose string, creds []nats.Option) (*nats.Conn, error) // a connection as creds' user, the caller's to close

	// selfInit: this node makes the cluster's storage itself (clusterinit.Init) before opening it:
	// it runs the embedded server, or connects without credentials. initCreds, if set, is the
	// credentials file it does that with (the auth directory's admin.creds, embedded server).
	selfInit  bool
	initCreds string

	stopRun context.CancelFunc
	wg      sync.WaitGroup
	runErr  chan error
	stopped sync.Once

	// noPlayerFrames: the node's credential may not publish frames for one player (an auth
	// directory made before them): its frame publisher drops them.
	noPlayerFrames bool
}

func (o *Options) defaults() error {
	if len(o.Kinds) == 0 {
		return errors.New("tickfence: Options.Kinds: register at least one kind of instance")
	}
	if o.NodeID == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("tickfence: Options.NodeID is empty and the host name is unknown: %w", err)
		}
		o.NodeID = h
	}
	if err := store.ValidID(o.NodeID); err != nil {
		return fmt.Errorf("tickfence: Options.NodeID: %w", err)
	}
	if o.DataDir == "" {
		o.DataDir = "tickfence-data"
	}
	if o.Shards == 0 {
		o.Shards = store.DefaultCluster().Shards
	}
	if o.Partitions == 0 {
		o.Partitions = store.DefaultCluster().Partitions
	}
	if o.Replicas == 0 {
		o.Replicas = store.DefaultCluster().Replicas
	}
	if err := (store.Cluster{Shards: o.Shards, Partitions: o.Partitions, Replicas: o.Replicas, Epoch: 1}).Validate(); err != nil {
		return fmt.Errorf("tickfence: Options: %w", err)
	}
	if o.TickRate == 0 {
		o.TickRate = 20
	}
	if o.CheckpointEvery == 0 {
		o.CheckpointEvery = 20
	}
	if o.LeaseTTL == 0 {
		o.LeaseTTL = 2 * time.Second
	}
	if err := store.ValidTTL(o.LeaseTTL); err != nil {
		return fmt.Errorf("tickfence: Options.LeaseTTL: %w", err)
	}
	if o.DataHistory == 0 {
		o.DataHistory = 1
	}
	if o.DataHistory < 1 {
		return fmt.Errorf("tickfence: Options.DataHistory must be at least 1, got %d", o.DataHistory)
	}
	if _, err := shard.ParseWriteStrategy(string(o.WriteStrategy)); err != nil {
		return fmt.Errorf("tickfence: Options.WriteStrategy: %w", err)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.BlobGCGrace == 0 {
		o.BlobGCGrace = store.DefaultBlobGrace
	}
	if o.BlobGCGrace < 0 {
		return fmt.Errorf("tickfence: Options.BlobGCGrace must not be negative, got %v", o.BlobGCGrace)
	}
	return nil
}

// Run starts a node, runs it until ctx ends, then hands its shards off and leaves the cluster
// (for at most 30 s).
func Run(ctx context.Context, opt Options) error {
	n, err := Start(ctx, opt)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case err := <-n.runErr:
		n.Close()
		return err
	}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return n.Stop(sctx)
}

// Start connects to NATS (or starts the embedded server), joins the cluster, and returns once the
// node holds its lease and serves commands. ctx bounds the start only.
//
// Who makes the cluster's storage (DESIGN 9: only admin shapes it): a node that runs the embedded
// server makes it itself — with the auth directory's admin.creds when Auth is set, a connection
// it closes at once — and so does a node that connects without credentials (nothing stops anyone
// there). A node on credentials only opens what exists: an admin runs tickctl cluster init first,
// and without it Start fails naming that command.
func Start(ctx context.Context, opt Options) (_ *Node, err error) {
	if err := opt.defaults(); err != nil {
		return nil, err
	}
	n := &Node{opt: opt, log: opt.Logger, runErr: make(chan error, 1)}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	if err := n.openNATS(); err != nil {
		return nil, err
	}
	nc, err := n.connectWait(ctx, "store")
	if err != nil {
		return nil, err
	}
	n.storeConn = nc
	cmdConn, err := n.connect("commands")
	if err != nil {
		return nil, err
	}
	frameConn, err := n.connect("frames")
	if err != nil {
		return nil, err
	}
	n.frames = natscmd.NewFramePublisher(frameConn, 0, opt.Registerer)
	n.frames.DropPrivate.Store(n.noPlayerFrames)
	want := store.DefaultCluster()
	want.Shards, want.Partitions, want.Replicas = opt.Shards, opt.Partitions, opt.Replicas
	req := coordinator.Require{Shards: opt.RequireShards, Partitions: opt.RequirePartitions, Replicas: opt.RequireReplicas}
	if n.selfInit {
		if err := n.initCluster(ctx, nc, want, req); err != nil {
			return nil, err
		}
	}
	// The node opens what exists and makes nothing (natskv.Options.OpenOnly): every bucket and
	// stream it needs was made above or by an admin.
	if n.st, err = natskv.Open(nc, natskv.Options{History: opt.DataHistory, OpenOnly: true}); err != nil {
		return nil, err
	}
	if n.cluster, err = coordinator.BootstrapWith(ctx, n.st, want, req, n.log); err != nil {
		return nil, n.notInitialised(err, want)
	}
	n.logPartitions(ctx)
	fxConn, err := n.connect("effects")
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(fxConn)
	if err != nil {
		return nil, err
	}
	// The effects stream (and the audit stream, which a node never uses) came with the cluster, shaped
	// for it: effects leave their records once it acknowledges them, so a node publishes none to a
	// stream with fewer replicas than the cluster's, a short duplicate window, or one that is not
	// tickfence's. It repairs nothing (with the roles it may not): initCluster did, if it may.
	_, err = natscmd.OpenEffectsStream(ctx, js, int(n.cluster.ReplicasOr1()))
	var shape *natscmd.EffectsShapeError
	switch {
	case errors.Is(err, natscmd.ErrNoEffectsStream):
		return nil, n.notInitialised(fmt.Errorf("no effects stream (%s): %w", natscmd.EffectsStream, natskv.ErrNotInitialised), want)
	case errors.As(err, &shape):
		shape.Init = "tickctl --nats " + n.urlOr() + " --creds DIR/admin.creds cluster init"
		return nil, fmt.Errorf("tickfence: refusing to start, publishing no effect: %w", err)
	case err != nil:
		return nil, fmt.Errorf("tickfence: effects stream: %w", err)
	}
	if n.effects, err = natscmd.NewEffectPublisher(fxConn); err != nil {
		return nil, err
	}
	// The lease reports the p99 tick lateness since its last renewal (operators' tools show it).
	late := hdr.NewWindow(7)
	if n.engine, err = actor.NewEngine(actor.EngineConfig{Rate: opt.TickRate, Workers: opt.TickWorkers, Registerer: opt.Registerer,
		MaxCatchUp: actor.CatchUpPeriods(opt.MaxCatchUp, opt.TickRate),
		Observe:    func(lateness, _ time.Duration) { late.Record(lateness) }}); err != nil {
		return nil, fmt.Errorf("tickfence: Options.TickRate: %w", err)
	}
	kinds, err := actor.NewKinds(opt.Kinds...)
	if err != nil {
		return nil, fmt.Errorf("tickfence: Options.Kinds: %w", err)
	}
	cmds := natscmd.NewServer(cmdConn, n.cluster.Shards, opt.Registerer)
	n.node, err = node.New(node.Config{Config: shard.Config{Node: opt.NodeID, Store: n.st,
		Commands: cmds, Frames: n.frames, Effects: n.effects, Kinds: kinds, Engine: n.engine, CheckpointEvery: opt.CheckpointEvery, Logger: n.log,
		Registerer: opt.Registerer, BeforeWrite: opt.BeforeWrite, MaxCommandDelay: opt.MaxCommandDelay,
		MaxPendingCommands: opt.MaxPendingCommands, WriteStrategy: opt.WriteStrategy},
		BeforeRelease: opt.BeforeRelease, LeaseTTL: opt.LeaseTTL, RideThrough: opt.RideThrough,
		P99Lateness: func() time.Duration { return late.Take().Quantile(0.99) }})
	if err != nil {
		return nil, err
	}
	cmds.Shedding = func() bool { h := n.node.Host(); return h != nil && h.Shedding() }
	// A command that waited the whole admission target in the node's queue, before its shard even
	// saw it, is refused at once: answering it would take longer still (none with admission off).
	if opt.PlayerQuota != nil {
		cmds.Quota = *opt.PlayerQuota
	}
	if cmds.MaxQueueWait = opt.MaxCommandDelay; opt.MaxCommandDelay == 0 {
		cmds.MaxQueueWait = shard.DefaultMaxCommandDelay
	}
	cmds.Logger = n.log
	runCtx, stopRun := context.WithCancel(context.Background())
	n.stopRun = stopRun
	n.wg.Add(1)
	go func() { defer n.wg.Done(); n.runErr <- n.node.Run(runCtx) }()
	if opt.Registerer != nil {
		metrics.For(opt.Registerer).CountBlobs(n.st.BlobStats)
	}
	if !opt.NoCoordinator {
		gc := n.blobCollector()
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			if err := coordinator.Run(runCtx, coordinator.Config{Store: n.st, Node: opt.NodeID, Session: newSession(),
				TTL: opt.LeaseTTL, MaxMoves: opt.MaxMoves, RebalanceEvery: opt.RebalanceEvery,
				HandOffTimeout: opt.HandOffTimeout, Logger: n.log, Registerer: opt.Registerer,
				CollectBlobs: gc, BlobGCEvery: opt.BlobGCEvery}); err != nil {
				n.log.Error("coordinator", "err", err)
			}
		}()
	}
	select {
	case <-n.node.Ready():
		return n, nil
	case err := <-n.runErr:
		return nil, err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// blobCollector is the collection of unreferenced blobs this node runs while it leads the
// coordinators, or nil: turned off (Options.BlobGCEvery negative), or this node's connection may
// not delete blobs (DESIGN 9: a node's credential may not purge; an admin runs tickctl gc).
func (n *Node) blobCollector() func(context.Context) (store.GCResult, error) {
	switch {
	case n.opt.BlobGCEvery < 0:
		return nil
	case !n.selfInit || n.initCreds != "":
		n.log.Info("blob collection: not on this node's credentials (a node may not delete blobs); run tickctl gc as admin, e.g. from cron")
		return nil
	}
	grace := n.opt.BlobGCGrace
	return func(ctx context.Context) (store.GCResult, error) { return n.st.CollectBlobs(ctx, grace, false) }
}

// connectWait is connect for the node's first connection: servers started at the same moment as
// the node (a new cluster brought up at once) may not listen yet, so a connection that finds no
// server is tried again, with backoff, for up to startConnectWait (or until ctx ends).
func (n *Node) connectWait(ctx context.Context, purpose string) (*nats.Conn, error) {
	start, backoff := time.Now(), 100*time.Millisecond
	for {
		nc, err := n.connect(purpose)
		if err == nil || !errors.Is(err, nats.ErrNoServers) || time.Since(start)+backoff > startConnectWait {
			return nc, err
		}
		n.log.Info("no NATS server reachable yet; trying again", "nats", n.opt.NATS, "err", err, "waited", time.Since(start).Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// startConnectWait bounds connectWait.
const startConnectWait = 30 * time.Second

// initCluster makes (or checks) the cluster's storage as clusterinit.Init does for tickctl cluster
// init: on nc, or on a connection of its own as the user of initCreds, closed when done. Without
// initCreds' file (admin.creds kept offline, as the README advises) it makes nothing, and the
// cluster must have been made already.
func (n *Node) initCluster(ctx context.Context, nc *nats.Conn, want store.Cluster, req coordinator.Require) error {
	if n.initCreds != "" {
		if _, err := os.Stat(n.initCreds); err != nil {
			n.log.Info("the auth directory holds no admin credentials: the cluster must have been initialised (tickctl cluster init)", "creds", n.initCreds)
			return nil
		}
		copts, err := auth.ClientOptions(n.initCreds, func(w string) { n.log.Warn(w) })
		if err != nil {
			return err
		}
		anc, err := n.dial("init", copts)
		if err != nil {
			return err
		}
		defer anc.Close()
		nc = anc
	}
	_, err := clusterinit.Init(ctx, nc, clusterinit.Options{Shards: want.Shards, Partitions: want.Partitions, Replicas: want.Replicas,
		Require: req, History: n.opt.DataHistory,
		Waiting: func(err error, waited time.Duration) {
			n.log.Info("the JetStream cluster is still forming; trying again", "err", err, "waited", waited.Round(time.Millisecond))
		},
		Progress: func(s natskv.Step) {
			switch s.State {
			case natskv.StepExists:
			case natskv.StepUpdated: // found wrongly shaped (a hand-made stream, an older cluster): say so loudly
				n.log.Warn("cluster storage was wrongly shaped and is repaired", "what", s.What, "name", s.Name, "repair", s.Note)
			default:
				n.log.Info("cluster storage "+s.State, "what", s.What, "name", s.Name, "note", s.Note)
			}
		}})
	if err != nil {
		return fmt.Errorf("tickfence: initialise the cluster: %w", err)
	}
	return nil
}

// notInitialised adds to an error of a cluster that was never made the command that makes it.
func (n *Node) notInitialised(err error, want store.Cluster) error {
	if !errors.Is(err, natskv.ErrNotInitialised) {
		return err
	}
	return fmt.Errorf("tickfence: %w: tickctl --nats %s --creds DIR/admin.creds cluster init --shards %d --partitions %d --replicas %d",
		err, n.urlOr(), want.Shards, want.Partitions, want.ReplicasOr1())
}

// urlOr is the NATS URL the node was given, for a command it names ("URL" with the embedded server).
func (n *Node) urlOr() string {
	if n.opt.NATS == "" {
		return "URL"
	}
	return n.opt.NATS
}

func (n *Node) openNATS() error {
	o := n.opt
	url, where := o.NATS, "at "+o.NATS
	var base []nats.Option
	creds := o.Creds
	if o.NATS != "" {
		if o.Sync {
			n.log.Warn("Options.Sync applies to the embedded server only; configure sync on the external server")
		}
		if o.Auth != "" {
			n.log.Warn("Options.Auth applies to the embedded server only; give an external server the auth directory's server.conf")
		}
		if o.WebSocket != "" {
			n.log.Warn("Options.WebSocket applies to the embedded server only; give an external one a websocket listener (tickd server --websocket)")
		}
	} else {
		if creds == "" && o.Auth != "" {
			creds = auth.CredsFile(o.Auth, string(auth.Node))
		}
		// This process runs the server, and with Auth holds its whole auth directory (every key
		// that signs a user): making the storage with the directory's admin.creds gives it nothing
		// it does not have. An in-process connection is no way around that: the server asks every
		// client, in-process ones too, for a user of its accounts.
		n.selfInit = true
		if o.Auth != "" {
			n.initCreds = auth.CredsFile(o.Auth, string(auth.Admin))
		}
		dir, _ := filepath.Abs(o.DataDir)
		srv, err := natsserver.Start(natsserver.Config{DataDir: dir, Listen: o.Listen, Sync: o.Sync, Name: o.NodeID,
			AuthDir: o.Auth, Insecure: o.Insecure, WebSocket: o.WebSocket, WebSocketOrigins: o.WebSocketOrigins})
		if err != nil {
			return err
		}
		n.srv = srv
		if o.Registerer != nil {
			// The server's own counters (tickfence_nats_*). A second node with an embedded server on
			// the same registry keeps the first's (and has none once the first closes): one node per
			// registry, as in tickd.
			if c := srv.Collector(); o.Registerer.Register(c) != nil {
				n.log.Warn("the embedded server's metrics are not registered: the registry has them from another server")
			} else {
				n.srvMetrics = c
			}
		}
		attrs := []any{"data", dir, "sync_every_write", o.Sync}
		if o.Listen != "" {
			attrs = append(attrs, "listen", srv.ClientURL())
		}
		if o.WebSocket != "" {
			attrs = append(attrs, "websocket", srv.WebSocketURL())
		}
		if o.Auth != "" {
			attrs = append(attrs, "auth", o.Auth)
		}
		n.log.Info("embedded NATS JetStream server started", attrs...)
		url, where = "", "(embedded)"
		base = []nats.Option{srv.ConnectOption()}
	}
	if o.TLSCA != "" {
		topts, err := auth.TLSClientOptions(o.TLSCA, o.TLSCert, o.TLSKey)
		if err != nil {
			return err
		}
		base = append(base, topts...)
	} else if o.TLSCert != "" || o.TLSKey != "" {
		return errors.New("tickfence: a client certificate (TLSCert, TLSKey) needs TLSCA: the CA that signed the server's certificate")
	}
	var nodeCreds []nats.Option
	if creds != "" {
		if err := auth.CheckNode(creds, o.NodeID); err != nil {
			return err
		}
		if w := auth.PlayerFramesWarning(creds); w != "" {
			n.log.Warn(w)
			n.noPlayerFrames = true
		}
		copts, err := auth.ClientOptions(creds, func(w string) { n.log.Warn(w) })
		if err != nil {
			return err
		}
		nodeCreds = copts
	} else {
		n.selfInit = true // nothing checks who shapes storage here
	}
	n.dial = func(purpose string, as []nats.Option) (*nats.Conn, error) {
		opts := append(append(append(base[:len(base):len(base)], as...), nats.Name("tickfence "+o.NodeID+" "+purpose),
			nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
				if err != nil {
					n.log.Warn("NATS disconnected", "connection", purpose, "err", err)
				}
			}),
			nats.ReconnectHandler(func(c *nats.Conn) {
				n.log.Info("NATS reconnected", "connection", purpose, "url", c.ConnectedUrl())
			})), o.NATSOptions...)
		nc, err := natskv.Connect(url, opts...)
		if err != nil {
			return nil, fmt.Errorf("connect to NATS %s: %w", where, auth.ExplainTLS(err, o.TLSCert != ""))
		}
		return nc, nil
	}
	n.connect = func(purpose string) (*nats.Conn, error) {
		nc, err := n.dial(purpose, nodeCreds)
		if err != nil {
			return nil, err
		}
		n.keep(nc)
		return nc, nil
	}
	return nil
}

// logPartitions logs each data bucket's stream: replicas and, on a JetStream cluster, its leader.
func (n *Node) logPartitions(ctx context.Context) {
	ps, err := n.st.PartitionStreams(ctx, n.cluster.Epoch, n.cluster.Partitions)
	if err != nil {
		n.log.Warn("data buckets' stream info", "err", err)
		return
	}
	for _, p := range ps {
		n.log.Info("data partition", "bucket", p.Bucket, "replicas", p.Replicas, "leader", p.Leader, "peers", p.Peers)
	}
}

// keep records a connection for Close (Client may be called from any goroutine).
func (n *Node) keep(nc *nats.Conn) {
	n.connsMu.Lock()
	n.conns = append(n.conns, nc)
	n.connsMu.Unlock()
}

// Client returns a command client on a connection of its own (closed by Close): the program's
// own players, bots or tests. Its commands go through NATS like anyone's.
func (n *Node) Client() (*natscmd.Client, error) {
	nc, err := n.connect("client")
	if err != nil {
		return nil, err
	}
	return natscmd.NewClient(nc, n.cluster.Shards), nil
}

// ClientURL is the embedded server's client URL ("" with an external server or no Listen).
func (n *Node) ClientURL() string {
	if n.srv == nil || n.opt.Listen == "" {
		return ""
	}
	return n.srv.ClientURL()
}

// WebSocketURL is the embedded server's WebSocket URL ("" with an external server or no WebSocket).
func (n *Node) WebSocketURL() string {
	if n.srv == nil {
		return ""
	}
	return n.srv.WebSocketURL()
}

// Cluster is the cluster record as this node joined it (shard count, partitions, replicas, epoch).
func (n *Node) Cluster() store.Cluster { return n.cluster }

// Engine is the tick engine of this node (its statistics: Skipped, Lag).
func (n *Node) Engine() *actor.Engine { return n.engine }

// Shard is the node runtime (its current host: instances, shards, admission).
func (n *Node) Shard() *node.Node { return n.node }

// Session is the node's current lease session.
func (n *Node) Session() string { return n.node.Session() }

// Err delivers the node's error if it stops by itself (its store gone for good).
func (n *Node) Err() <-chan error { return n.runErr }

// Stop hands every shard off to another node (or flushes and releases it), leaves the cluster
// and closes everything Start opened. ctx bounds the hand-off and the flush: with a deadline,
// Stop returns by it (plus the moment closing takes), handing off what it can. Shards it could
// neither hand off nor flush and release come back as a *node.LeaveError (errors.As) whose Cause
// says why, e.g. that no NATS server was reachable; they move to other nodes once this node's
// lease expires.
func (n *Node) Stop(ctx context.Context) error {
	err := n.node.Leave(ctx)
	var le *node.LeaveError
	if errors.As(err, &le) && le.Cause == "" {
		le.Cause = n.unreachable()
	}
	n.Close()
	if err != nil {
		return fmt.Errorf("leave: %w", err)
	}
	return nil
}

// unreachable says why the store cannot be reached (its connection is not connected to any
// server), or "" when it is connected.
func (n *Node) unreachable() string {
	nc := n.storeConn
	if nc == nil || nc.Status() == nats.CONNECTED {
		return ""
	}
	why := fmt.Sprintf("no NATS server reachable (the store's connection is %s", strings.ToLower(nc.Status().String()))
	if err := nc.LastError(); err != nil {
		why += "; last error: " + err.Error()
	}
	return why + ")"
}

// Close stops at once, without handing off: the shards move after a lease's time.
func (n *Node) Close() {
	n.stopped.Do(func() {
		if n.stopRun != nil {
			n.stopRun()
		}
		n.wg.Wait()
		if n.engine != nil {
			n.engine.Stop()
		}
		if n.frames != nil {
			n.frames.Close() // no tick runs any more
		}
		if n.effects != nil {
			n.effects.Close()
		}
		if n.st != nil {
			n.st.Close()
		}
		n.connsMu.Lock()
		for i := len(n.conns) - 1; i >= 0; i-- {
			n.conns[i].Close()
		}
		n.connsMu.Unlock()
		if n.srv != nil {
			n.srv.Stop()
		}
		if n.srvMetrics != nil {
			n.opt.Registerer.Unregister(n.srvMetrics)
		}
	})
}

func newSession() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
