// Package natscmd carries commands over NATS with the wire format of package wire: Server
// subscribes the shards a node owns, Client sends commands and retries them with the same request
// ID until an owner answers. Games, gateways and tools use it through package client, which
// connects, learns the shard count and decodes results into Go values.
package natscmd

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/internal/logkey"
	"github.com/tickfence/tickfence/internal/metrics"
	"github.com/tickfence/tickfence/internal/session"
	"github.com/tickfence/tickfence/shard"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
)

// Server implements shard.Commands on a NATS connection.
type Server struct {
	nc      *nats.Conn
	shards  uint32
	metrics *metrics.Node
	// Shedding, if set, is asked before a command is decoded: true refuses it with busy at once
	// (the node's admission control is refusing everything anyway; decoding would only cost).
	Shedding func() bool
	// MaxQueueWait, if positive, refuses with busy at once, before decoding, a command that waited
	// longer than this in its subscription's queue before its handler got it (estimated: see
	// intake). Such a queue stands only when the node can neither answer nor refuse as fast as
	// commands arrive; what waits in it is answered late, often after its client gave up, so it is
	// refused instead, which drains the queue. Whatever the setting, a command's Received is when it
	// arrived by that estimate, so the time it waited there counts towards its answer's.
	MaxQueueWait time.Duration
	// Logger, if set, receives the commands refused here, before they reach their shard (busy
	// while shedding: debug; malformed or too large: warn), with the keys of package logkey.
	Logger *slog.Logger
	// Quota bounds each untrusted sender's commands and creates on this node (NewServer:
	// DefaultQuota; the zero Quota: no limit).
	Quota    Quota
	limit    logkey.Limiter
	deputies every // the last log line of a dropped reply
	quotas   quotas
}

var busyReply = wire.EncodeReply(wire.Reply{Error: wire.Errorf(wire.CodeBusy,
	"the node is past its capacity; retry with the same request after a backoff")})

var queuedReply = wire.EncodeReply(wire.Reply{Error: wire.Errorf(wire.CodeBusy,
	"the node is past its capacity: the command waited too long in its queue; retry with the same request after a backoff")})

// queued returns the messages of sub delivered to its handler (the one being handled included)
// and those still queued behind it; false if sub is closed (being stopped).
func queued(sub *nats.Subscription) (delivered, behind uint64, ok bool) {
	d, err := sub.Delivered()
	if err != nil {
		return 0, 0, false
	}
	p, _, err := sub.Pending() // the one being handled leaves the count when its handler returns
	if err != nil {
		return 0, 0, false
	}
	return uint64(d), uint64(max(p-1, 0)), true
}

var _ shard.Commands = (*Server)(nil)

// NewServer serves commands for a cluster of the given shard count; its metrics go to reg (shared
// with the node configured with the same registerer), nil: none.
func NewServer(nc *nats.Conn, shards uint32, reg prometheus.Registerer) *Server {
	return &Server{nc: nc, shards: shards, metrics: metrics.For(reg), Quota: DefaultQuota}
}

// origin is who may publish on the subjects a subscription serves (DESIGN 9).
type origin int

const (
	fromTrusted  origin = iota // tickfence.cmd: trusted senders
	fromPlayer                 // tickfence.play: players, named by the subject's last token
	fromOperator               // tickfence.op: operators' requests to the owner (not the game's)
)

// Serve implements shard.Commands: it subscribes tickfence.cmd.<S>.> (trusted senders),
// tickfence.play.<S>.> (players, named by the subject's last token: DESIGN 9) and
// tickfence.op.<S>.> (operators' requests, such as reloading a failed instance).
func (s *Server) Serve(sh uint32, handle func(shard.Command)) (func(), error) {
	var subs []*nats.Subscription
	stop := func() {
		for _, sub := range subs {
			_ = sub.Unsubscribe()
		}
	}
	for _, from := range []origin{fromTrusted, fromPlayer, fromOperator} {
		subj := wire.ShardSubject(sh)
		switch from {
		case fromPlayer:
			subj = wire.PlayerShardSubject(sh)
		case fromOperator:
			subj = wire.OperatorShardSubject(sh)
		}
		queue := new(intake) // the handler's own (the client calls it one message at a time)
		sub, err := s.nc.Subscribe(subj, func(m *nats.Msg) { s.serve(m, queue, from, handle) })
		if err != nil {
			stop()
			return nil, fmt.Errorf("subscribe %s: %w", subj, err)
		}
		subs = append(subs, sub)
		if err := sub.SetPendingLimits(65536, 64<<20); err != nil {
			stop()
			return nil, err
		}
	}
	return stop, nil
}

// serve takes one command off a shard's subscription (from: which).
func (s *Server) serve(m *nats.Msg, queue *intake, from origin, handle func(shard.Command)) {
	player, operator := from == fromPlayer, from == fromOperator
	delivered, behind, ok := queued(m.Sub)
	now := time.Now() // after counting: an arrival counted must not look older than it is
	var waited time.Duration
	if ok {
		waited = queue.wait(now, delivered, behind)
	}
	received := now.Add(-waited)
	if s.metrics != nil {
		s.metrics.CommandQueueSeconds.Observe(waited.Seconds())
	}
	ids := wire.Headers{RequestID: m.Header.Get(wire.HeaderRequestID), Client: m.Header.Get(wire.HeaderClient),
		Seq: m.Header.Get(wire.HeaderSeq), Ack: m.Header.Get(wire.HeaderAck), ContentType: m.Header.Get(wire.HeaderContent)}
	ackOnly := wire.AckAlone(ids, m.Data)
	if wire.InterestAlone(m.Header.Get(wire.HeaderWatch), m.Reply, m.Data) && !operator {
		s.interest(m, from, received, handle)
		return
	}
	heartbeat := isHeartbeat(m) // no command: counts and costs like an acknowledgement alone
	ackOnly = ackOnly || heartbeat
	if m.Reply == "" && !ackOnly {
		return // a publish, not a request: there is no one to answer
	}
	if m.Reply != "" && !InboxReply(m.Reply) {
		s.refuseReply(m) // never publish where a requester aims (DESIGN 9: confused deputy)
		return
	}
	asJSON := strings.HasPrefix(ids.ContentType, wire.ContentJSON)
	reply := func(b []byte) {
		if m.Reply == "" {
			return // an acknowledgement alone: no one waits for an answer
		}
		out := nats.NewMsg(m.Reply)
		out.Data = wire.ForClient(b, asJSON)
		if asJSON {
			out.Header.Set(wire.HeaderContent, wire.ContentJSON)
		}
		_ = s.nc.PublishMsg(out) // the requester retries if this is lost
	}
	// The queue first: a command refused for its wait must not draw on admission's share. An
	// operator's request is never shed: it is how an overloaded node is looked after.
	if s.MaxQueueWait > 0 && waited > s.MaxQueueWait && !ackOnly && !operator {
		s.refuse(m, reply, slog.LevelDebug, wire.CodeBusy, "the command waited too long in the node's queue", 0, queuedReply)
		return
	}
	if s.Shedding != nil && s.Shedding() && !ackOnly && !operator {
		s.refuse(m, reply, slog.LevelDebug, wire.CodeBusy, "the node is shedding load", 0, busyReply)
		return
	}
	subject := m.Subject
	var who actor.Sender
	var err error
	switch from {
	case fromPlayer:
		var name string
		if subject, name, err = wire.ParsePlayerSubject(m.Subject); err == nil {
			who, err = playerSender(name)
		}
	case fromOperator:
		// Only an operator's credential may publish on tickfence.op (package auth): the subject,
		// which the server authorises, says so.
		subject, err = wire.ParseOperatorSubject(m.Subject)
		who = actor.Sender{Trusted: true}
	default:
		who, err = trustedSender(m.Header)
	}
	if err != nil {
		werr := err.(*wire.Error)
		s.refuse(m, reply, slog.LevelWarn, werr.Code, werr.Message, 0, wire.EncodeReply(wire.Reply{Error: werr}))
		return
	}
	// A player's command counts against its quota before it is decoded: a malformed one costs
	// the node a decode, and must cost its sender as much as a good one.
	if player && !s.playerAllowed(m, reply, who, true, false) {
		return
	}
	if heartbeat {
		s.heartbeat(subject, who, handle)
		return
	}
	req, err := wire.DecodeCommand(subject, ids, m.Data, s.shards)
	if err != nil {
		werr := &wire.Error{}
		if !errors.As(err, &werr) {
			werr = wire.Errorf(wire.CodeBadRequest, "%v", err)
		}
		s.refuse(m, reply, slog.LevelWarn, werr.Code, werr.Message, req.Fingerprint, wire.EncodeReply(wire.Reply{Error: werr}))
		return
	}
	if player && req.Type == "create" && !s.playerAllowed(m, reply, who, false, true) {
		return
	}
	c := shard.Command{Request: req, Received: received, Reply: reply, Screened: s.Shedding != nil, Operator: operator}
	c.SetSender(who)
	handle(c)
}

// interest hands a watcher's interest (wire.HeaderWatch) to its shard: nothing is answered. A
// player's counts against its command quota (it may wake an instance, which costs a load); none
// is taken while the node sheds load.
func (s *Server) interest(m *nats.Msg, from origin, received time.Time, handle func(shard.Command)) {
	if s.Shedding != nil && s.Shedding() {
		return
	}
	subject := m.Subject
	var who actor.Sender
	var err error
	if from == fromPlayer {
		var name string
		if subject, name, err = wire.ParsePlayerSubject(m.Subject); err == nil {
			who, err = playerSender(name)
		}
		if err == nil {
			if ok, _ := s.quotas.allow(s.Quota, shard.SenderKey(who), true, false, time.Now()); !ok { // as commands are: now
				return
			}
		}
	} else {
		who, err = trustedSender(m.Header)
	}
	if err != nil {
		return
	}
	sh, id, err := wire.ParseSubject(subject, s.shards)
	if err != nil {
		return
	}
	c := shard.Command{Request: wire.Request{Shard: sh, Instance: id}, Received: received, Interest: true}
	c.SetSender(who)
	handle(c)
}

// Interest tells the owner of instance that this client watches it (wire.HeaderWatch): a
// passivated instance is woken, a loaded one is not passivated for its kind's Passivate. Watch
// sends it every InterestEvery by itself; a gateway watching on its own (its subscriptions, not
// Watch) calls it as often.
func (c *Client) Interest(instance string) error {
	if err := store.ValidID(instance); err != nil {
		return err
	}
	s := store.ShardOf(instance, c.shards)
	subj := wire.Subject(s, instance)
	if c.Player != "" {
		subj = wire.PlayerSubject(s, instance, c.Player)
	}
	m := nats.NewMsg(subj)
	m.Header.Set(wire.HeaderWatch, "1")
	return c.nc.PublishMsg(m)
}

// playerAllowed takes a command (cmd) or a create from the player's quota; false: refused
// rate_limited, answered.
func (s *Server) playerAllowed(m *nats.Msg, reply func([]byte), who actor.Sender, cmd, create bool) bool {
	ok, wait := s.quotas.allow(s.Quota, shard.SenderKey(who), cmd, create, time.Now())
	if !ok {
		werr := wire.Errorf(wire.CodeRateLimited, "player %s is past its quota on this node (%s); nothing was applied: retry the same request in %s",
			who.Player, s.Quota, wait.Round(time.Millisecond))
		s.refuse(m, reply, slog.LevelDebug, werr.Code, werr.Message, 0, wire.EncodeReply(wire.Reply{Error: werr}))
	}
	return ok
}

// InboxReply reports whether a node may answer on reply: an inbox (_INBOX.…, the prefix of
// every NATS client's replies and of tickfence's per-user ones) or a response subject the server
// made for a request that crossed accounts (_R_.…). Any other reply subject names something the
// requester wants written with the node's rights — a KV key, a stream's subject, the JetStream
// API — and is never answered (DESIGN 9).
func InboxReply(reply string) bool {
	if !strings.HasPrefix(reply, "_INBOX.") && !strings.HasPrefix(reply, "_R_.") {
		return false
	}
	return !strings.ContainsAny(reply, "*> \t\r\n")
}

// refuseReply drops a command whose reply subject is not an inbox: counted, and logged at most
// once every 10 s with how many were dropped since (nothing in such a request says reliably who
// sent it, so a flood cannot flood the log either).
func (s *Server) refuseReply(m *nats.Msg) {
	if s.metrics != nil {
		s.metrics.RepliesRefused.Inc()
	}
	if s.Logger == nil {
		return
	}
	emit, suppressed := s.deputies.allow(time.Now())
	if !emit {
		return
	}
	attrs := []slog.Attr{slog.String("subject", m.Subject), slog.String("reply", m.Reply)}
	if sh, inst, err := wire.ParseSubject(m.Subject, s.shards); err == nil {
		attrs = append(attrs, slog.Any(logkey.Shard, sh), slog.String(logkey.Instance, inst))
	}
	if suppressed > 0 {
		attrs = append(attrs, slog.Int(logkey.Suppressed, suppressed))
	}
	s.Logger.LogAttrs(context.Background(), slog.LevelWarn,
		"command dropped: its reply subject is not an inbox (a node never writes where a requester aims it); more are only counted for 10 s (tickfence_command_reply_refused_total)", attrs...)
}

// refuse answers a command before it reaches its shard with body, counting and logging it.
func (s *Server) refuse(m *nats.Msg, reply func([]byte), level slog.Level, code, msg string, fingerprint uint64, body []byte) {
	if s.metrics != nil {
		s.metrics.Commands.WithLabelValues(code).Inc()
	}
	s.logRefusal(level, m, code, msg, fingerprint)
	reply(body)
}

// logRefusal logs a command refused before it reached its shard: no token applies, no
// conditional update decided it (rate-limited per code).
func (s *Server) logRefusal(level slog.Level, m *nats.Msg, code, msg string, fingerprint uint64) {
	if s.Logger == nil || !s.Logger.Enabled(context.Background(), level) {
		return
	}
	emit, suppressed := s.limit.Allow(code, time.Now())
	if !emit {
		return
	}
	id := m.Header.Get(wire.HeaderRequestID)
	if c := m.Header.Get(wire.HeaderClient); c != "" {
		id = c + "/" + m.Header.Get(wire.HeaderSeq)
	}
	attrs := []slog.Attr{slog.String("subject", m.Subject)}
	if sh, inst, err := wire.ParseSubject(m.Subject, s.shards); err == nil {
		attrs = append(attrs, slog.Any(logkey.Shard, sh), slog.String(logkey.Instance, inst))
	}
	attrs = append(attrs, slog.String(logkey.RequestID, id),
		slog.String(logkey.Fingerprint, logkey.FormatFingerprint(fingerprint)), slog.String(logkey.CASResult, logkey.CASNone),
		slog.String(logkey.Code, code), slog.String(logkey.Err, msg))
	if suppressed > 0 {
		attrs = append(attrs, slog.Int(logkey.Suppressed, suppressed))
	}
	s.Logger.LogAttrs(context.Background(), level, "command refused", attrs...)
}

// Client sends commands to instances. A command with an empty request ID uses the compact form
// (DESIGN 5, client sessions): the client numbers its commands to each instance and tells the
// owner up to which number it has every answer, so the owner remembers only what is in flight.
type Client struct {
	nc     *nats.Conn
	shards uint32
	// Attempt bounds one request/reply round trip (default 2s).
	Attempt time.Duration
	// GiveUp, if positive, bounds how long Send and Exec try one command, as a deadline on their
	// context would, without the cost of a context per command (a sender of thousands of commands
	// per second that gives each the same time).
	GiveUp time.Duration
	// Player, if set, sends as that player, on its own subjects (wire.PlayerSubject): what a
	// player's credential (the players' account, not trusted) must do, and may do only with its
	// own name. Empty: a trusted sender's subjects (tickfence.cmd).
	Player string
	// GrantOf, if set, returns the current grant (epoch, token) of a shard; Watch then drops a
	// frame stamped with a newer grant than the shard has given (wire.FrameFilter.Verify: a
	// forgery). GrantReader makes one from a store.
	GrantOf func(ctx context.Context, shard uint32) (epoch, token uint64, err error)
	// ID names this client's session in the compact form: unique to this run of the process
	// (NewClient draws a random one). Two clients must never share it.
	ID string

	// InterestEvery is how often Watch says the watcher's interest (Interest) while it runs
	// (0: wire.InterestEvery; negative: never, and a passivated instance is not woken by the watch).
	InterestEvery time.Duration

	// NoIdleAck: do not acknowledge alone when nothing is left in flight to an instance. By
	// default the client does (one more message per quiet spell), so that its session with the
	// instance holds no answer and can give its place to another client (store.MaxClientSessions).
	// A client that keeps sending to the same instances (bots, load generators: its next command
	// carries the acknowledgement anyway) may turn it off and spare the owner that message.
	NoIdleAck bool
	// Heartbeat is how often a watch of a player's frames (Watch of a player's client,
	// WatchPlayer) tells the instance that the player is there: 0, DefaultHeartbeat; negative,
	// never (the player's commands alone then keep it in).
	Heartbeat time.Duration

	last    atomic.Uint64 // the highest sequence number assigned, to any instance
	stripes [clientStripes]clientStripe
	replies replies
}

// clientStripes spread the sessions' bookkeeping over locks: a client shared by thousands of
// goroutines (a gateway, tickd's demo players) does not serialise them on one.
const clientStripes = 32

type clientStripe struct {
	mu   sync.Mutex
	inst map[string]*session.Window // instances of this stripe with commands not settled yet
}

func (c *Client) stripe(instance string) *clientStripe {
	h := uint32(2166136261) // FNV-1a
	for i := 0; i < len(instance); i++ {
		h = (h ^ uint32(instance[i])) * 16777619
	}
	return &c.stripes[h%clientStripes]
}

// NewClient makes a client for a cluster with the given shard count (the cluster record's).
func NewClient(nc *nats.Conn, shards uint32) *Client {
	var b [8]byte
	_, _ = crand.Read(b[:])
	c := &Client{nc: nc, shards: shards, Attempt: 2 * time.Second, ID: "go-" + hex.EncodeToString(b[:])}
	for i := range c.stripes {
		c.stripes[i].inst = map[string]*session.Window{}
	}
	return c
}

// windows are the idle instances' session windows, for reuse: a client whose commands to an
// instance rarely overlap (a player's, one at a time) would otherwise make one per command.
var windows = sync.Pool{New: func() any { return new(session.Window) }}

// Retryable reports the error codes after which the same request should be sent again.
func Retryable(code string) bool {
	return code == wire.CodeRetry || code == wire.CodeNotOwner || code == wire.CodeBusy || code == wire.CodeRateLimited ||
		code == wire.CodeUnknownOutcome
}

// ErrOutcomeUnknown is wrapped by the error of a command the client gave up on after an attempt
// whose outcome it cannot know (no answer in time, an answer unknown_outcome, or the caller's
// context ended while one was out): the command may have been applied. It is no failure to
// report to a player as "nothing happened". An error that does not wrap it, from a command that
// was sent, means every attempt was certainly refused without effect.
var ErrOutcomeUnknown = errors.New("the command may or may not have been applied")

// uncertainAfter reports whether an attempt that ended with last may have been applied.
func uncertainAfter(last error) bool {
	var we *wire.Error
	return errors.Is(last, nats.ErrTimeout) || (errors.As(last, &we) && we.Code == wire.CodeUnknownOutcome)
}

// assign numbers a new command to instance. One counter numbers the commands to every instance
// (an instance sees increasing numbers with gaps), so the client keeps state only for instances
// with commands in flight. The owner keeps at most store.MaxClientInFlight answers above the
// ack: while that many are unacknowledged (an older command still waits), assign waits.
func (c *Client) assign(ctx context.Context, instance string, giveUp time.Time) (uint64, error) {
	st := c.stripe(instance)
	for {
		st.mu.Lock()
		q := st.inst[instance]
		if q == nil {
			q = windows.Get().(*session.Window)
			st.inst[instance] = q
		}
		// Numbered under the instance's lock: no ack of this instance can cover the number
		// before it is open. A number not opened (the owner would refuse it) is a gap.
		seq := c.last.Add(1)
		if _, ok := q.Open(seq); ok {
			st.mu.Unlock()
			return seq, nil
		}
		st.mu.Unlock()
		if !giveUp.IsZero() && time.Now().After(giveUp) {
			return 0, fmt.Errorf("command to %s: gave up: %d commands to it unacknowledged: %w", instance, store.MaxClientInFlight, context.DeadlineExceeded)
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("command to %s: %d commands to it unacknowledged: %w", instance, store.MaxClientInFlight, ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// settle: the command has its final answer or was given up; it is never sent again.
func (c *Client) settle(instance string, seq uint64) {
	st := c.stripe(instance)
	st.mu.Lock()
	var ack uint64
	if q := st.inst[instance]; q.Settle(seq) {
		delete(st.inst, instance) // the ack is then the last number: it covers everything sent
		if q.Holding() && !c.NoIdleAck {
			// Read under the lock that numbers this instance's commands: no number it covers
			// can be one opened after.
			ack = c.last.Load()
		}
		q.Reset()
		windows.Put(q)
	}
	st.mu.Unlock()
	if ack > 0 {
		c.acknowledge(instance, ack)
	}
}

// acknowledge tells the owner of instance that the client has every answer up to ack and nothing
// in flight (an acknowledgement alone, published: no answer), so that its session there holds no
// answer and can give its place to another client (store.MaxClientSessions). A lost one costs
// nothing: the next command carries the ack too.
func (c *Client) acknowledge(instance string, ack uint64) {
	subj := wire.Subject(store.ShardOf(instance, c.shards), instance)
	if c.Player != "" {
		subj = wire.PlayerSubject(store.ShardOf(instance, c.shards), instance, c.Player)
	}
	m := nats.NewMsg(subj)
	m.Header.Set(wire.HeaderClient, c.ID)
	m.Header.Set(wire.HeaderAck, strconv.FormatUint(ack, 10))
	_ = c.nc.PublishMsg(m)
}

// ack is the highest number up to which every command to instance is settled.
func (c *Client) ack(instance string) uint64 {
	st := c.stripe(instance)
	st.mu.Lock()
	defer st.mu.Unlock()
	if q := st.inst[instance]; q != nil {
		return q.Ack(c.last.Load())
	}
	return c.last.Load()
}

// message makes one attempt of a command: the request ID, or (seq != 0) the session headers
// with the current ack; op: an operator's request (tickfence.op).
func (c *Client) message(instance, requestID string, seq uint64, body []byte, asJSON, op bool) *nats.Msg {
	subj := wire.Subject(store.ShardOf(instance, c.shards), instance)
	switch {
	case op:
		subj = wire.OperatorSubject(store.ShardOf(instance, c.shards), instance)
	case c.Player != "":
		subj = wire.PlayerSubject(store.ShardOf(instance, c.shards), instance, c.Player)
	}
	m := nats.NewMsg(subj)
	m.Data = body
	if seq == 0 {
		m.Header.Set(wire.HeaderRequestID, requestID)
	} else {
		m.Header.Set(wire.HeaderClient, c.ID)
		m.Header.Set(wire.HeaderSeq, strconv.FormatUint(seq, 10))
		if ack := c.ack(instance); ack > 0 {
			m.Header.Set(wire.HeaderAck, strconv.FormatUint(ack, 10))
		}
	}
	if asJSON {
		m.Header.Set(wire.HeaderContent, wire.ContentJSON)
	}
	return m
}

// testHookAttempt, if set (by tests), is called as Exec decides to send an attempt.
var testHookAttempt func()

// Once sends a command exactly once — no retry on busy, retry or a timeout — and returns the
// reply: for load tests that count every answer, and callers that schedule retries themselves.
// An empty requestID uses the compact form (then a retry of it would be a new command).
func (c *Client) Once(ctx context.Context, instance, requestID string, cmd map[string]any) (wire.Reply, error) {
	if err := store.ValidID(instance); err != nil {
		return wire.Reply{}, err
	}
	body, err := wire.Canonical(cmd)
	if err != nil {
		return wire.Reply{}, err
	}
	var seq uint64
	if requestID == "" {
		if seq, err = c.assign(ctx, instance, time.Time{}); err != nil {
			return wire.Reply{}, err
		}
		defer c.settle(instance, seq)
	}
	// Through the command inbox, as Exec: within the trusted account a node may answer there
	// only (package auth), not on the connection's own request inbox.
	if err := c.replies.start(c.nc); err != nil {
		return wire.Reply{}, fmt.Errorf("subscribe the replies' inbox: %w", err)
	}
	out := make(chan answer, 1)
	tok := c.replies.send(c.message(instance, requestID, seq, body, false, false), func(a answer) { out <- a })
	select {
	case a := <-out:
		switch {
		case a.err != nil:
			return wire.Reply{}, a.err
		case noResponders(a.m):
			return wire.Reply{}, nats.ErrNoResponders
		}
		return wire.DecodeReply(a.m.Data, false)
	case <-ctx.Done():
		c.replies.forget(tok)
		return wire.Reply{}, ctx.Err()
	}
}

// Send sends one command (a msgpack or JSON map) and waits for its answer, retrying with the same
// request ID (or sequence number, if requestID is empty) while no owner answers or the owner says
// retry or busy, with exponential backoff and jitter, until ctx ends. It returns the final reply
// as sent by the owner (msgpack, or JSON if asJSON) and decoded.
func (c *Client) Send(ctx context.Context, instance, requestID string, body []byte, asJSON bool) ([]byte, wire.Reply, error) {
	raw, _, err := c.Exec(ctx, instance, requestID, body, asJSON)
	if raw == nil {
		return nil, wire.Reply{}, err
	}
	r, derr := wire.DecodeReply(raw, asJSON)
	if derr != nil {
		return raw, r, derr
	}
	return raw, r, err
}

// Exec is Send without decoding the result: it returns the final reply as sent by the owner and
// its status (for senders that do not read results, such as load generators).
func (c *Client) Exec(ctx context.Context, instance, requestID string, body []byte, asJSON bool) ([]byte, wire.Status, error) {
	return c.exec(ctx, instance, requestID, body, asJSON, false)
}

// Reload asks the owner of a failed instance (one answering instance_failed) to load it again
// from its stored state, once the game is fixed: an operator's request (tickfence.op, which only
// an operator's credential may publish), retried like a command while the shard moves. The reply
// is ok ({"reloaded": true, "tick": …}; "reloaded": false if it had not failed), or
// instance_failed with why it failed again.
func (c *Client) Reload(ctx context.Context, instance string) (wire.Reply, error) {
	body, err := wire.Canonical(map[string]any{"type": "reload"})
	if err != nil {
		return wire.Reply{}, err
	}
	var b [8]byte
	_, _ = crand.Read(b[:])
	raw, _, err := c.exec(ctx, instance, "reload-"+hex.EncodeToString(b[:]), body, false, true)
	if raw == nil {
		return wire.Reply{}, err
	}
	r, derr := wire.DecodeReply(raw, false)
	if derr != nil {
		return r, derr
	}
	return r, err
}

func (c *Client) exec(ctx context.Context, instance, requestID string, body []byte, asJSON, op bool) ([]byte, wire.Status, error) {
	if err := store.ValidID(instance); err != nil {
		return nil, wire.Status{}, err
	}
	var giveUp time.Time
	if c.GiveUp > 0 {
		giveUp = time.Now().Add(c.GiveUp)
	}
	var seq uint64
	if requestID == "" {
		var err error
		if seq, err = c.assign(ctx, instance, giveUp); err != nil {
			return nil, wire.Status{}, err
		}
		defer c.settle(instance, seq) // answered or given up: never sent again
	}
	if err := c.replies.start(c.nc); err != nil {
		return nil, wire.Status{}, fmt.Errorf("subscribe the replies' inbox: %w", err)
	}
	// The body goes out from the queue, perhaps after Exec returned: the caller may reuse its own.
	body = bytes.Clone(body)
	uncertain := false // an attempt may have been applied (uncertainAfter), or one was out when ctx ended
	gaveUp := func(cause error, last error) error {
		return c.gaveUp(instance, requestID, seq, cause, last, uncertain || uncertainAfter(last))
	}
	// One timer for every attempt and backoff of this command, not a context per attempt.
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	// wait bounds d by the give-up time; false: that time has come.
	wait := func(d time.Duration) bool {
		if !giveUp.IsZero() {
			left := time.Until(giveUp)
			if left <= 0 {
				return false
			}
			d = min(d, left)
		}
		timer.Reset(d)
		return true
	}
	backoff := 20 * time.Millisecond
	var last error
	for {
		// Nothing is sent once the caller gave up, nor after a backoff that reached the give-up.
		if err := ctx.Err(); err != nil {
			return nil, wire.Status{}, gaveUp(err, last)
		}
		if !giveUp.IsZero() && !time.Now().Before(giveUp) {
			return nil, wire.Status{}, gaveUp(context.DeadlineExceeded, last)
		}
		m := c.message(instance, requestID, seq, body, asJSON, op)
		if testHookAttempt != nil {
			testHookAttempt()
		}
		outcome := make(chan answer, 1)
		tok := c.replies.send(m, func(a answer) { outcome <- a }) // buffered for the one answer
		if !wait(c.Attempt) {
			c.replies.forget(tok)
			return nil, wire.Status{}, gaveUp(context.DeadlineExceeded, last)
		}
		select {
		case a := <-outcome:
			var final bool
			var raw []byte
			var st wire.Status
			var err error
			if final, raw, st, err, last = judge(a, asJSON); final {
				return raw, st, err
			}
		case <-timer.C:
			c.replies.forget(tok)
			last = nats.ErrTimeout
		case <-ctx.Done():
			c.replies.forget(tok)
			uncertain = true // the attempt was out
			return nil, wire.Status{}, gaveUp(ctx.Err(), last)
		}
		uncertain = uncertain || uncertainAfter(last)
		// Full jitter: clients refused together do not come back together.
		if !wait(time.Duration(rand.Int64N(int64(backoff))) + time.Millisecond) {
			return nil, wire.Status{}, gaveUp(context.DeadlineExceeded, last)
		}
		select {
		case <-ctx.Done():
			return nil, wire.Status{}, gaveUp(ctx.Err(), last)
		case <-timer.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}

// judge reads an attempt's outcome: final, with what Exec returns, or to retry after last.
func judge(a answer, asJSON bool) (final bool, raw []byte, st wire.Status, err, last error) {
	switch {
	case a.err != nil:
		return false, nil, st, nil, a.err
	case noResponders(a.m):
		return false, nil, st, nil, nats.ErrNoResponders
	}
	st, err = wire.DecodeStatus(a.m.Data, asJSON)
	if err != nil || st.OK || !Retryable(st.Error.Code) {
		return true, a.m.Data, st, err, nil
	}
	return false, nil, st, nil, st.Error
}

func (c *Client) gaveUp(instance, requestID string, seq uint64, cause, last error, uncertain bool) error {
	name := requestID
	if seq != 0 {
		name = fmt.Sprintf("%s/%d", c.ID, seq)
	}
	if uncertain {
		return fmt.Errorf("command %s to %s: gave up: %w: %w (last: %v)", name, instance, ErrOutcomeUnknown, cause, last)
	}
	return fmt.Errorf("command %s to %s: gave up: %w (last: %v)", name, instance, cause, last)
}

// SendMap encodes cmd as msgpack and sends it.
func (c *Client) SendMap(ctx context.Context, instance, requestID string, cmd map[string]any) (wire.Reply, error) {
	body, err := wire.Canonical(cmd)
	if err != nil {
		return wire.Reply{}, err
	}
	_, r, err := c.Send(ctx, instance, requestID, body, false)
	return r, err
}
