// Package client is what games, gateways and tools use to reach a tickfence cluster: it connects
// to NATS, learns the cluster's shape, sends commands to instances — a Go value in, the result
// decoded into a Go value out — and watches their frames.
//
//	c, err := client.Dial(ctx, "nats://127.0.0.1:4222")
//	if err != nil { … }
//	defer c.Close()
//	var joined struct{ Players int `msgpack:"players"` }
//	err = c.Send(ctx, "dungeon-7", map[string]any{"type": "join", "player": "ada"}, &joined)
//
// # The shard count
//
// A command goes to tickfence.cmd.<S>.<instance>, where S = FNV-1a-32(instance) mod the cluster's
// shard count, which is fixed when the cluster is made (default 256). Dial reads it from the
// cluster record, the cluster key of the control bucket (natskv.ReadCluster, the reader nodes and
// tickctl use), which any credential of the trusted account may read: a node's, an operator's, an
// observer's — and any client of a server without roles.
//
// A gateway's or a player's credential cannot (package auth: the players' account has no
// JetStream at all, only the command services and the frames it imports). For those, pass the
// count with Shards: the game knows it the way it knows the server's URL, from its own
// configuration (tickd's player page gets it from the serving node's config.json). That needs no
// new permission and no new service on the nodes: a permission to read the cluster record would
// mean exporting a piece of the trusted account's JetStream API to every player, and a discovery
// request answered by the nodes would be a new wire contract — both to gain one number that
// never changes. With a gateway's credential and no Shards, Dial fails at once saying so. A wrong
// count cannot go unnoticed either: a command then reaches no owner (no responders, retried until
// the caller gives up), or one that answers bad_request naming the instance's right shard.
//
// # Credentials
//
// Creds connects as the user of a credentials file (what tickctl auth init and tickctl auth user
// write), with that user's own inbox prefix, as every role requires. A player's file (an
// untrusted gateway's, named after the player) also makes the client send as that player, on
// tickfence.play.<S>.<instance>.<player>, the only command subject it may publish on. TLS
// verifies the server (and presents a client certificate); anything else NATS offers — user and
// password (also in the URL: nats://user:pass@host:4222), a token, an NKey — goes in NATSOptions.
//
// # Exactly once
//
// Send numbers each command in the client's session with the instance (DESIGN 5), and SendID
// names it with a request ID of the caller's: either way a command is retransmitted, unchanged,
// after a timeout, busy, retry, not_owner or no responders, until the owner answers, and applied
// once. When the client gives up (ctx ended, GiveUp passed) after an attempt whose outcome it
// cannot know, the error wraps ErrOutcomeUnknown: the command may have been applied — do not
// tell a player "nothing happened". A command given up without it was not applied. A refusal by
// the owner or the game is an *Error with its code (Code): final, and (but for internal, a bug
// or a panic in the game's code) certain, as the README's table of codes says.
//
// # Results and frames
//
// Results and frame payloads are msgpack. Decoded into a struct, they fill its fields whatever
// integer width was on the wire; decoded into an any (Reply.Result, or any inside out), every
// integer is an int64 (uint64 only above math.MaxInt64) and every float a float64 — never
// msgpack's int8 or uint16 (see wire.Normalize).
//
// # Players
//
// A player's client (Creds of a player's file) sends as that player, and its Watch also
// receives the frames the game made for that player only (Frame.To; actor.Frames.PublishTo),
// which no other player's credential may subscribe. While a watch runs it sends a heartbeat
// every 5 s (Heartbeat), so that a game tracking its players (actor.PlayerLeaver) does not
// disconnect a player who only watches. A trusted gateway relays a player's with WatchPlayer.
//
// Frames leave before the write that stores their tick: Watch shows each at once, and after a
// failover that undid some (the new owner went on from its stored tick) says Rewound on the new
// owner's first frame; WatchDurable shows a frame only once its tick is stored, never one a
// failover undoes (README: "Rewinds after a failover").
package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/tickfence/tickfence/auth"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/natskv"
)

// Client sends commands to a cluster's instances and watches their frames. It is safe for
// concurrent use by any number of goroutines (a gateway shares one among its players).
type Client struct {
	nc      *nats.Conn
	ownConn bool // Dial made nc: Close closes it
	cmd     *natscmd.Client
	cluster store.Cluster
	read    bool          // cluster was read from the cluster record
	st      *natskv.Store // VerifyGrants' reader of the shards' grants
	list    listing       // Instances' reader of the records (instances.go)
}

// Option configures Dial or New.
type Option func(*options)

type options struct {
	creds                  string
	tlsCA, tlsCert, tlsKey string
	nats                   []nats.Option
	dialOnly               []string // options given that only Dial can apply
	shards                 uint32
	player                 *string
	verify                 bool
	noInterest             bool
	attempt, giveUp        time.Duration
	heartbeat              time.Duration
}

// Creds connects as the user of a NATS credentials file (tickctl auth init, tickctl auth user):
// its JWT, and its own inbox prefix. A player's file also sets Player. Dial only.
func Creds(file string) Option {
	return func(o *options) { o.creds = file; o.dialOnly = append(o.dialOnly, "Creds") }
}

// TLS makes the connection TLS, verifying the server's certificate against the CA in caFile, and
// presents certFile and keyFile if given (for a server that requires client certificates: tickd
// server --tls-verify). Dial only.
func TLS(caFile, certFile, keyFile string) Option {
	return func(o *options) {
		o.tlsCA, o.tlsCert, o.tlsKey = caFile, certFile, keyFile
		o.dialOnly = append(o.dialOnly, "TLS")
	}
}

// NATSOptions are passed to nats.Connect after the client's own (they win): a name, user and
// password, a token, an NKey, handlers. Dial only.
func NATSOptions(opts ...nats.Option) Option {
	return func(o *options) { o.nats = append(o.nats, opts...); o.dialOnly = append(o.dialOnly, "NATSOptions") }
}

// Shards gives the cluster's shard count instead of reading it from the cluster record: for a
// credential that may not read it (a gateway's, a player's; see the package doc). It must be the
// cluster's own count (tickctl status shows it).
func Shards(n uint32) Option { return func(o *options) { o.shards = n } }

// Player sends commands as this player, on its own subjects (tickfence.play.<S>.<id>.<player>):
// what a player's credential must do, with its own name. Creds sets it from a player's file;
// Player("") sends on the trusted subjects (tickfence.cmd) whatever the file.
func Player(name string) Option { return func(o *options) { o.player = &name } }

// VerifyGrants makes Watch check a frame that would make it follow another grant against the
// shard's current grant in the store, so a forged frame is never followed (wire.FrameFilter's
// Verify). It needs a credential that reads the data buckets (operator, observer, node) and a
// connection without a reconnect buffer (Dial's).
func VerifyGrants() Option { return func(o *options) { o.verify = true } }

// NoInterest makes Watch watch without saying the watcher's interest (natscmd.Client.Interest):
// a passivated instance is then not woken by the watch, nor kept loaded. For a credential that may
// not publish on the command subjects: Dial sets it itself for an observer's.
func NoInterest() Option { return func(o *options) { o.noInterest = true } }

// Attempt bounds one round trip of a command (default 2 s); past it the command is sent again.
func Attempt(d time.Duration) Option { return func(o *options) { o.attempt = d } }

// Heartbeat is how often a watch of a player's frames (Watch of a player's client,
// WatchPlayer) tells the instance that the player is there (default 5 s; negative: never, the
// player's commands alone then keep it in). A game that tracks players disconnects one it has
// not heard from for its actor.PresenceTimeout ticks (README: Players).
func Heartbeat(d time.Duration) Option { return func(o *options) { o.heartbeat = d } }

// GiveUp bounds how long a command is tried when its context has no earlier deadline (default:
// until the context ends).
func GiveUp(d time.Duration) Option { return func(o *options) { o.giveUp = d } }

// Dial connects to the NATS server at url (a comma-separated list of a cluster's servers; ""
// nats.DefaultURL) and learns the cluster's shape (see the package doc). The connection
// reconnects for ever, and does not buffer while disconnected: a command sent then fails its
// attempt at once and is retried. Close closes it.
func Dial(ctx context.Context, url string, opts ...Option) (*Client, error) {
	o := collect(opts)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	copts := []nats.Option{nats.Name("tickfence-client")}
	if o.tlsCA != "" || o.tlsCert != "" || o.tlsKey != "" {
		to, err := auth.TLSClientOptions(o.tlsCA, o.tlsCert, o.tlsKey)
		if err != nil {
			return nil, err
		}
		copts = append(copts, to...)
	}
	if o.creds != "" {
		u, err := auth.ReadCreds(o.creds)
		if err != nil {
			return nil, err
		}
		if u.Role == auth.Gateway && o.shards == 0 {
			return nil, fmt.Errorf("credentials %s are a gateway's (user %s, players' account), which cannot read the cluster record: "+
				"give the cluster's shard count with client.Shards(n) (tickctl status shows it)", o.creds, u.Name)
		}
		if u.Role == auth.Gateway && !u.Trusted && o.player == nil {
			o.player = &u.Name // a player may send on its own subjects only
		}
		if u.Role == auth.Observer {
			o.noInterest = true // it may not publish on the command subjects
		}
		ao, err := auth.ClientOptions(o.creds, nil)
		if err != nil {
			return nil, err
		}
		copts = append(copts, ao...)
	}
	nc, err := natskv.Connect(url, append(copts, o.nats...)...)
	if err != nil {
		if o.tlsCA != "" {
			err = auth.ExplainTLS(err, o.tlsCert != "")
		}
		return nil, fmt.Errorf("connect to %s: %w", url, err)
	}
	c, err := open(ctx, nc, o)
	if err != nil {
		nc.Close()
		return nil, err
	}
	c.ownConn = true
	return c, nil
}

// New is Dial on a connection of the caller's, which Close leaves open. The connection-making
// options (Creds, TLS, NATSOptions) do not apply; the connection should have the user's own inbox
// prefix (auth.ClientOptions) when the server enforces roles.
func New(ctx context.Context, nc *nats.Conn, opts ...Option) (*Client, error) {
	o := collect(opts)
	if len(o.dialOnly) > 0 {
		return nil, fmt.Errorf("client.New: %v apply to Dial only (the connection is made already)", o.dialOnly)
	}
	return open(ctx, nc, o)
}

func collect(opts []Option) options {
	var o options
	for _, f := range opts {
		f(&o)
	}
	return o
}

func open(ctx context.Context, nc *nats.Conn, o options) (*Client, error) {
	c := &Client{nc: nc, cluster: store.Cluster{Shards: o.shards}}
	if o.shards == 0 {
		cl, err := natskv.ReadCluster(ctx, nc)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return nil, fmt.Errorf("read the cluster record: %w (the cluster is not made yet: a node without credentials, or tickctl cluster init, makes it)", err)
		case err != nil:
			return nil, fmt.Errorf("read the cluster record: %w (a credential that may not read it — a gateway's, a player's — must give the shard count with client.Shards)", err)
		}
		if err := cl.Validate(); err != nil {
			return nil, err
		}
		c.cluster, c.read = cl, true
	}
	c.cmd = natscmd.NewClient(nc, c.cluster.Shards)
	if o.player != nil {
		c.cmd.Player = *o.player
	}
	if o.attempt > 0 {
		c.cmd.Attempt = o.attempt
	}
	c.cmd.GiveUp = o.giveUp
	c.cmd.Heartbeat = o.heartbeat
	if o.noInterest {
		c.cmd.InterestEvery = -1
	}
	if o.verify {
		st, err := natskv.Open(nc, natskv.Options{OpenOnly: true})
		if err != nil {
			return nil, fmt.Errorf("VerifyGrants: %w", err)
		}
		c.st = st
		c.cmd.GrantOf = natscmd.GrantReader(st)
	}
	return c, nil
}

// Close releases what the client made: its connection if Dial made it.
func (c *Client) Close() {
	if c.st != nil {
		_ = c.st.Close()
	}
	c.closeLister()
	if c.ownConn {
		c.nc.Close()
	}
}

// Conn is the client's NATS connection.
func (c *Client) Conn() *nats.Conn { return c.nc }

// Shards is the cluster's shard count.
func (c *Client) Shards() uint32 { return c.cluster.Shards }

// Cluster is the cluster record as read when the client was made; false if it was not read (the
// count came from Shards).
func (c *Client) Cluster() (store.Cluster, bool) { return c.cluster, c.read }

// ShardOf is the shard of an instance in this cluster.
func (c *Client) ShardOf(instance string) uint32 { return store.ShardOf(instance, c.cluster.Shards) }

// Player is the player the client sends as ("": a trusted sender).
func (c *Client) Player() string { return c.cmd.Player }

// Commands is the command client underneath, for what this package does not wrap: Go (a
// command without a goroutine waiting for it, for senders of thousands at a time), Once, and its
// settings. It shares the client's session.
func (c *Client) Commands() *natscmd.Client { return c.cmd }

// Error is an owner's or a game's refusal of a command: its code (the Code constants, or a game's
// own) and message.
type Error = wire.Error

// Codes of an Error a caller may branch on (DESIGN 5; the README's table says what each means).
// The retryable ones (busy, retry, not_owner, rate_limited, unknown_outcome) the client retries
// itself until it gives up.
const (
	CodeBadRequest      = wire.CodeBadRequest
	CodeTooLarge        = wire.CodeTooLarge
	CodeUnknownInstance = wire.CodeUnknownInstance
	CodeRequestIDReused = wire.CodeRequestIDReused
	CodeExists          = wire.CodeExists
	CodeForbidden       = wire.CodeForbidden
	CodeRejected        = wire.CodeRejected
	CodeInternal        = wire.CodeInternal
	// CodeAnswerForgotten: a retransmission of a command that was applied, whose answer its
	// instance no longer keeps (its session was let go of while the client was silent).
	CodeAnswerForgotten = wire.CodeAnswerForgotten
	// CodeInstanceFailed: the game's code failed in the instance; nothing applied, and resending
	// will not help until an operator reloads it (tickctl instance reload).
	CodeInstanceFailed = wire.CodeInstanceFailed
)

// ErrOutcomeUnknown is wrapped by the error of a command given up after an attempt whose outcome
// the client cannot know: it may have been applied (natscmd.ErrOutcomeUnknown, the same value).
var ErrOutcomeUnknown = natscmd.ErrOutcomeUnknown

// Code is the code of the *Error in err's chain ("" if there is none).
func Code(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// JSON is a command given as JSON text, as a tool or a gateway relaying a browser has it: it is
// sent as it is, as JSON (header Content-Type: application/json), and the owner answers in JSON
// (Reply.Raw is then JSON). The node decodes it, and refuses a key given twice at any depth
// (bad_request), where a Go decoder would silently keep the last.
type JSON []byte

// Reply is an owner's final answer to a command.
type Reply struct {
	OK    bool
	Error *Error // the refusal, if not OK
	// Raw is the reply as the owner sent it: msgpack {"ok":true,"result":…} or
	// {"ok":false,"error":{"code":…,"message":…}} (JSON for a JSON command).
	Raw    []byte
	result any // normalized (wire.DecodeReply)
}

// Err is nil for an OK reply, else its Error.
func (r *Reply) Err() error {
	if r.OK {
		return nil
	}
	return r.Error
}

// Result is the reply's result (nil if none) in Go's own types, every integer an int64 (uint64
// above math.MaxInt64) and every float a float64.
func (r *Reply) Result() any { return r.result }

// Decode decodes the result into out, as Decode does.
func (r *Reply) Decode(out any) error { return decodeInto(r.result, out) }

// Exec sends cmd to instance and returns the owner's final answer, whatever it says: a refusal is
// a Reply that is not OK, not an error. requestID "" numbers the command in the client's session
// (as Send); else it is the command's request ID (as SendID). The error is for a command that got
// no final answer: given up (wrapping ErrOutcomeUnknown if it may have been applied), or never sent.
//
// cmd is a map or a struct encoded as msgpack (its fields' msgpack tags name the keys); its
// "type" key names the command. A []byte or msgpack.RawMessage is sent as it is (msgpack); JSON
// is sent as JSON text.
func (c *Client) Exec(ctx context.Context, instance, requestID string, cmd any) (*Reply, error) {
	body, asJSON := []byte(nil), false
	if j, ok := cmd.(JSON); ok {
		body, asJSON = j, true
	} else {
		var err error
		if body, err = encode(cmd); err != nil {
			return nil, fmt.Errorf("command to %s: %w", instance, err)
		}
	}
	raw, r, err := c.cmd.Send(ctx, instance, requestID, body, asJSON)
	if raw == nil || err != nil {
		return nil, err
	}
	return &Reply{OK: r.OK, Error: r.Error, Raw: raw, result: r.Result}, nil
}

// Send sends cmd to instance, numbered in the client's session (exactly once: see the package
// doc), and decodes the result into out (nil: the result is not wanted). A refusal by the owner
// or the game is an *Error.
func (c *Client) Send(ctx context.Context, instance string, cmd, out any) error {
	return c.SendID(ctx, instance, "", cmd, out)
}

// SendID is Send with a request ID of the caller's (1–64 printable characters): a retransmission
// with the same ID, even from another process, gets the first answer and applies nothing (within
// the instance's window of request IDs: the README's Commands section).
func (c *Client) SendID(ctx context.Context, instance, requestID string, cmd, out any) error {
	r, err := c.Exec(ctx, instance, requestID, cmd)
	if err != nil {
		return err
	}
	if err := r.Err(); err != nil {
		return err
	}
	return r.Decode(out)
}

// Create creates instance of kind, the create command carrying fields too (the kind's
// arguments, e.g. the demo dungeon's "boss_hp"; nil: none; "labels", a map of strings, are the
// instance's labels, which Instances filters on). An instance that exists already is an *Error
// with Code CodeExists.
func (c *Client) Create(ctx context.Context, instance, kind string, fields map[string]any) error {
	cmd := make(map[string]any, len(fields)+2)
	for k, v := range fields {
		cmd[k] = v
	}
	cmd["type"], cmd["kind"] = "create", kind
	return c.Send(ctx, instance, cmd, nil)
}

// End ends instance: its owner writes a tombstone, which answers a retransmitted end with its
// first answer until it expires (store.TombstoneTTL).
func (c *Client) End(ctx context.Context, instance string) error {
	return c.Send(ctx, instance, map[string]any{"type": "end"}, nil)
}

// Frame is a frame as a watcher receives it: its instance, topic ("" for the main subject),
// stamp (grant, tick, and Stored: the instance's stored tick when it left), payload (the game's
// bytes, msgpack by convention: Decode), and Rewound: frames received before it were undone (a
// failover went back to the new owner's stored tick; see Watch).
type Frame = natscmd.Frame

// Watch is a running watch: its channel C, and counters of what it dropped.
type Watch = natscmd.Watch

// Watch delivers the frames of instance until ctx ends (a context without a deadline is fine),
// then closes the watch's channel. With topics it subscribes those only ("" names the main
// subject): the server sends the connection no other topic's frames. It applies the watcher's
// rule (a zombie's frames, and frames older than one shown, are dropped) and survives moves of the
// instance between nodes.
//
// A player's client (Creds of a player, or Player) also receives the frames the game made for
// that player only (Frame.To is then the player: actor.Frames.PublishTo), and, while the watch
// runs, tells the instance the player is there (Heartbeat): see WatchPlayer.
//
// It is the fast watch: every frame comes as soon as it is made, before the write that stores its
// tick. A failover may undo what it showed — the new owner goes on from its stored tick, below
// ticks already shown — and the new owner's first frame then says Rewound: show what it says,
// and forget what came after its Stored. Frame.Tick > Frame.Stored marks a frame that may yet be
// undone. WatchDurable shows only what no failover undoes.
//
// While it runs it says the watcher's interest every 10 s (natscmd.Client.Interest): a
// passivated instance is woken and stays loaded while watched.
func (c *Client) Watch(ctx context.Context, instance string, topics ...string) (*Watch, error) {
	return c.cmd.Watch(ctx, instance, topics...)
}

// WatchPlayer is Watch for player: the instance's public frames, and the frames the game made
// for that player only, on the player's own subjects (tickfence.to.<S>.<id>.<player>[.<topic>],
// the same topics as the public ones); while it runs, a heartbeat every Heartbeat (5 s) tells
// the instance the player is still there. A trusted client (a gateway relaying for its players)
// may watch any player; a player's client only its own (another is an error wrapping
// natscmd.ErrOtherPlayer: the server would refuse the subscription anyway).
func (c *Client) WatchPlayer(ctx context.Context, instance, player string, topics ...string) (*Watch, error) {
	return c.cmd.WatchPlayer(ctx, instance, player, topics...)
}

// WatchDurable is Watch delivering only durable frames: each is held until its owner says its
// tick is stored (a later frame's Stored, or a stored notice), then delivered, in order. What it
// delivers is never undone; a frame its owner made past its stored tick before a failover is
// dropped, and the next frame delivered says Rewound. The cost is latency: a frame comes once
// the write after it is acknowledged — at once after a command, else at the instance's next
// checkpoint (tickfence.Options.CheckpointEvery) — and its topic's next frame (within 5 ticks)
// or a stored notice says so.
func (c *Client) WatchDurable(ctx context.Context, instance string, topics ...string) (*Watch, error) {
	return c.cmd.WatchDurable(ctx, instance, topics...)
}

// Decode decodes msgpack (a frame's payload, a result) into out: a struct, a map, a slice, or an
// any, in which every integer is an int64 (uint64 above math.MaxInt64) and every float a
// float64, whatever their width on the wire.
func Decode(b []byte, out any) error {
	return wire.Unmarshal(b, out)
}

// decodeInto stores a result, normalized, in out (wire.Assign).
func decodeInto(v any, out any) error { return wire.Assign(v, out) }

// encode is a command's body: canonical msgpack (wire.Canonical: what the node reads fastest),
// or bytes given as msgpack already.
func encode(cmd any) ([]byte, error) {
	switch b := cmd.(type) {
	case []byte:
		return b, nil
	case msgpack.RawMessage:
		return b, nil
	case nil:
		return nil, errors.New("no command")
	}
	return wire.Canonical(cmd)
}
