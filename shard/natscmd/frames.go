package natscmd

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/internal/metrics"
	"github.com/tickfence/tickfence/shard"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
)

// FramePublisher implements shard.FramePublisher on a NATS connection: frames wait in a bounded
// queue and one goroutine publishes them, so a tick never waits on the connection. A frame that
// finds the queue full is dropped and counted (tickfence_frames_dropped_total): frames are for
// display, and the next tick's frame supersedes it.
type FramePublisher struct {
	// DropPrivate drops (and counts as dropped) the frames for one player (shard.Frame.To): a
	// node whose credential predates them may not publish on their subjects (tickfence.to.>).
	DropPrivate atomic.Bool

	nc      *nats.Conn
	q       chan shard.Frame
	metrics *metrics.Node
	quit    chan struct{}
	done    chan struct{}
	once    sync.Once
}

var _ shard.FramePublisher = (*FramePublisher)(nil)

// NewFramePublisher starts a publisher with room for queue frames (0: 16384). Close stops it.
func NewFramePublisher(nc *nats.Conn, queue int, reg prometheus.Registerer) *FramePublisher {
	if queue <= 0 {
		queue = 16384
	}
	p := &FramePublisher{nc: nc, q: make(chan shard.Frame, queue), metrics: metrics.For(reg),
		quit: make(chan struct{}), done: make(chan struct{})}
	go p.run()
	return p
}

// Publish implements shard.FramePublisher; it never blocks. After Close it drops.
func (p *FramePublisher) Publish(f shard.Frame) {
	select {
	case <-p.quit:
		p.metrics.FramesDropped.Inc()
		return
	default:
	}
	select {
	case p.q <- f:
	default:
		p.metrics.FramesDropped.Inc()
	}
}

func (p *FramePublisher) run() {
	defer close(p.done)
	// Messages and header maps reused: PublishMsg copies them into the connection's buffer. A
	// stored notice has no tick, frame number or payload (wire.StoredToken).
	epoch, token, tick, index, stored, reverts := []string{""}, []string{""}, []string{""}, []string{""}, []string{""}, []string{""}
	m := &nats.Msg{Header: nats.Header{wire.HeaderEpoch: epoch, wire.HeaderToken: token, wire.HeaderTick: tick,
		wire.HeaderFrame: index, wire.HeaderStored: stored}}
	notice := &nats.Msg{Header: nats.Header{wire.HeaderEpoch: epoch, wire.HeaderToken: token, wire.HeaderStored: stored}}
	var num []byte
	for {
		var f shard.Frame
		select {
		case f = <-p.q:
		case <-p.quit:
			return
		}
		msg := m
		if f.Notice {
			msg = notice
			msg.Subject = wire.StoredSubject(f.Shard, f.Instance)
		} else {
			m.Subject = wire.FrameSubject(f.Shard, f.Instance, f.Topic)
			if f.To != "" {
				if p.DropPrivate.Load() {
					p.metrics.FramesDropped.Inc()
					continue
				}
				m.Subject = wire.PrivateFrameSubject(f.Shard, f.Instance, f.To, f.Topic)
			}
			m.Data = f.Payload
			num = strconv.AppendUint(num[:0], f.Tick, 10)
			tick[0] = string(num)
			num = strconv.AppendUint(num[:0], f.Index, 10)
			index[0] = string(num)
		}
		num = strconv.AppendUint(num[:0], f.Epoch, 10)
		epoch[0] = string(num)
		num = strconv.AppendUint(num[:0], f.Token, 10)
		token[0] = string(num)
		num = strconv.AppendUint(num[:0], f.Stored, 10)
		stored[0] = string(num)
		if f.Reverts > 0 { // absent means 0: the usual frame carries no such header
			num = strconv.AppendUint(num[:0], f.Reverts, 10)
			reverts[0] = string(num)
			msg.Header[wire.HeaderReverts] = reverts
		} else {
			delete(msg.Header, wire.HeaderReverts)
		}
		if err := p.nc.PublishMsg(msg); err != nil {
			p.metrics.FramesDropped.Inc()
			continue
		}
		if f.Notice {
			p.metrics.FrameNotices.Inc()
		} else {
			p.metrics.FramesPublished.Inc()
		}
	}
}

// Close stops publishing; frames still queued are dropped (they are not durable).
func (p *FramePublisher) Close() {
	p.once.Do(func() { close(p.quit) })
	<-p.done
}

// Frame is a frame as a watcher receives it. Its stamp's Stored says which ticks of the instance
// were stored when it left: a frame whose Tick is above it may yet be undone by a failover.
type Frame struct {
	Instance string
	Topic    string // "" for the instance's main subject
	// To is the player a private frame is for (actor.Frames.PublishTo: it came on
	// tickfence.to.<S>.<id>.<To>[.<Topic>]); "" for the instance's public frames.
	To string
	wire.FrameStamp
	Payload []byte
	// Rewound: frames this watch received before this one were undone. It is under a new line
	// (wire.Line: a new owner's, which restarted from its stored tick, or its owner went back to
	// its stored state), and the line before had gone past this frame's Stored: what a watch
	// that shows every frame (Watch) showed after Stored is gone, and this frame's tick may be
	// lower than theirs; a durable watch (WatchDurable) never showed those frames, and dropped
	// the ones it held. A game re-syncs what it shows from this frame.
	Rewound bool
}

// Watch delivers the frames of one instance until ctx ends (then the channel closes): every
// topic, or with topics only those ("" names the main subject, tickfence.out.<S>.<id>). A client
// that sends as a player (Client.Player) also receives that player's own frames (WatchPlayer).
// It subscribes the chosen topics' own subjects, so the server sends this connection nothing
// else: a player's client watching its own HUD topic does not receive everyone's. It applies the
// watcher's rule (wire.FrameFilter) to what it subscribed: a frame under an older grant than one
// already seen — a zombie's — is dropped, and under the same grant one that is not after the last
// shown on its subject (by tick and frame number), so what arrives goes forward in time, but for
// a rewind: frames leave before their tick is stored, and after a failover the new owner may go
// on from a tick below ones shown, undoing them; its first frame then says Rewound (wire.Rewinds).
// WatchDurable shows only frames whose tick is stored. It survives moves: the subject names the
// instance, not its owner. A consumer slower than the frames loses the ones its buffer (256)
// cannot hold; Dropped on the returned Watch counts them.
//
// ctx needs no deadline (a signal.NotifyContext is fine): Watch waits up to watchFlush for the
// server to confirm the subscriptions before it returns.
func (c *Client) Watch(ctx context.Context, instance string, topics ...string) (*Watch, error) {
	return c.watch(ctx, instance, c.Player, false, topics)
}

// WatchPlayer is Watch for player: the instance's public frames and, on the player's own
// subjects (wire.PrivateFrameSubject), the frames the game made for that player only
// (Frame.To), the same topics of both. While it runs it tells the instance that the player is
// there, with a heartbeat every Client.Heartbeat (SendHeartbeat). player "" watches the public
// frames only, and sends none. A client that sends as a player watches that player only
// (ErrOtherPlayer); a trusted one (a gateway relaying for its players) any.
func (c *Client) WatchPlayer(ctx context.Context, instance, player string, topics ...string) (*Watch, error) {
	return c.watch(ctx, instance, player, false, topics)
}

// WatchDurable is Watch delivering only durable frames: it holds each frame until a later
// message of its owner — a frame saying its tick is stored, or a stored notice (wire.StoredSubject,
// which it subscribes besides the topics) — says so, then delivers it, in order (wire.Holdback).
// No failover undoes what it delivers. A frame whose owner changes, or goes back to its stored
// state, before its tick is said stored is dropped (Unconfirmed counts them), and if it had been
// undone the next frame delivered says Rewound. The cost is latency: a frame comes once the write
// after it is acknowledged (a command's write at once; without commands the instance's next
// checkpoint, every CheckpointEvery ticks), plus the wait for a message saying so: its topic's
// next frame if the topic is framed at least every 5 ticks, else a stored notice a tick after.
func (c *Client) WatchDurable(ctx context.Context, instance string, topics ...string) (*Watch, error) {
	return c.watch(ctx, instance, c.Player, true, topics)
}

func (c *Client) watch(ctx context.Context, instance, player string, durable bool, topics []string) (*Watch, error) {
	if err := store.ValidID(instance); err != nil {
		return nil, err
	}
	if player != "" && !actor.ValidPlayer(player) {
		return nil, fmt.Errorf("watch %s: player %q: want 1-64 of A-Z a-z 0-9 _ -", instance, player)
	}
	if player != "" && c.Player != "" && player != c.Player {
		return nil, fmt.Errorf("watch %s for %s as player %s: %w", instance, player, c.Player, ErrOtherPlayer)
	}
	s := store.ShardOf(instance, c.shards)
	base := wire.FrameSubject(s, instance, "")
	notices := wire.StoredSubject(s, instance)
	subjects := []string{base, base + ".*"} // every topic, and the stored notices
	var priv string                         // the player's own frames' base subject
	if player != "" {
		priv = wire.PrivateFrameSubject(s, instance, player, "")
		subjects = append(subjects, priv, priv+".*")
	}
	var want map[string]bool // the subjects subscribed, with topics
	if len(topics) > 0 {
		subjects, want = nil, map[string]bool{}
		for _, t := range topics {
			if err := actor.ValidFrame(actor.Frame{Topic: t}); err != nil {
				return nil, fmt.Errorf("watch %s: %w", instance, err)
			}
			subj := wire.FrameSubject(s, instance, t)
			if !want[subj] {
				want[subj] = true
				subjects = append(subjects, subj)
			}
			if player != "" {
				if subj = wire.PrivateFrameSubject(s, instance, player, t); !want[subj] {
					want[subj] = true
					subjects = append(subjects, subj)
				}
			}
		}
		if durable {
			want[notices] = true
			subjects = append(subjects, notices)
		}
	}
	ch := make(chan Frame, 256)
	w := &Watch{C: ch}
	var mu sync.Mutex
	var filter wire.FrameFilter
	if c.GrantOf != nil {
		filter.Verify = func() (uint64, uint64, error) {
			vctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			return c.GrantOf(vctx, s)
		}
	}
	var rewinds wire.Rewinds
	var hold wire.Holdback[Frame]
	closed, owed := false, false // owed: a rewind not yet said (its frame found the buffer full)
	deliver := func(fs []Frame, rewound bool) {
		for i, f := range fs {
			f.Rewound = i == 0 && rewound || owed
			select {
			case ch <- f:
				owed = false
				if f.Rewound {
					w.rewinds.Add(1)
				}
			default:
				owed = f.Rewound
				w.dropped.Add(1)
			}
		}
		w.unconfirmed.Store(hold.Unconfirmed())
		w.overflowed.Store(hold.Overflowed())
	}
	handle := func(m *nats.Msg) {
		// A frame is published on its own subject. A message delivered here under another — what a
		// push consumer delivers keeps its stored subject: someone aimed a stream's consumer at
		// this watch's subject (no permission checks a deliver subject) — is no frame.
		mine := priv != "" && (m.Subject == priv || strings.HasPrefix(m.Subject, priv+"."))
		public := m.Subject == base || strings.HasPrefix(m.Subject, base+".")
		if want != nil && !want[m.Subject] || want == nil && !public && !mine {
			w.invalid.Add(1)
			return
		}
		if m.Subject == notices {
			if !durable {
				return // a watch of every topic receives them; only a durable one needs them
			}
			n, err := wire.ParseStoredNotice(m.Header.Get)
			if err != nil {
				w.invalid.Add(1)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if !closed {
				deliver(hold.Notice(n))
			}
			return
		}
		st, err := wire.ParseFrameStamp(m.Header.Get)
		if err != nil {
			w.invalid.Add(1)
			return
		}
		f := Frame{Instance: instance, Topic: strings.TrimPrefix(strings.TrimPrefix(m.Subject, base), "."), FrameStamp: st, Payload: m.Data}
		key := f.Topic // the filter orders each subject on its own
		if mine {
			f.To, f.Topic = player, strings.TrimPrefix(strings.TrimPrefix(m.Subject, priv), ".")
			key = "@" + f.Topic // no public topic holds an @
		}
		mu.Lock()
		defer mu.Unlock()
		if closed || !filter.Pass(key, st) {
			if !closed {
				w.stale.Add(1)
			}
			return
		}
		if durable {
			deliver(hold.Frame(st, f))
		} else {
			deliver([]Frame{f}, rewinds.Shown(st))
		}
	}
	var subs []*nats.Subscription
	unsubscribe := func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}
	for _, subj := range subjects {
		sub, err := c.nc.Subscribe(subj, handle)
		if err != nil {
			unsubscribe()
			return nil, fmt.Errorf("watch %s: %w", instance, err)
		}
		subs = append(subs, sub)
	}
	// The subscriptions are in place on return. FlushWithContext refuses a context without a
	// deadline ("nats: context requires a deadline"): bound it here, the caller's ctx may have none.
	fctx, cancel := context.WithTimeout(ctx, watchFlush)
	defer cancel()
	if err := c.nc.FlushWithContext(fctx); err != nil {
		unsubscribe()
		return nil, fmt.Errorf("watch %s: %w", instance, err)
	}
	if player != "" && c.Heartbeat >= 0 {
		every := c.Heartbeat
		if every == 0 {
			every = DefaultHeartbeat
		}
		go c.heartbeats(ctx, instance, player, every)
	}
	go func() {
		<-ctx.Done()
		unsubscribe()
		mu.Lock()
		closed = true
		close(ch)
		mu.Unlock()
	}()
	if every := c.interestEvery(); every > 0 {
		// The watcher's interest: it wakes a passivated instance and keeps it loaded (its frames
		// flow only while it ticks).
		_ = c.Interest(instance)
		go func() {
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					_ = c.Interest(instance)
				}
			}
		}()
	}
	return w, nil
}

func (c *Client) interestEvery() time.Duration {
	if c.InterestEvery == 0 {
		return wire.InterestEvery
	}
	return c.InterestEvery
}

// watchFlush bounds Watch's wait for the server to confirm its subscriptions.
const watchFlush = 5 * time.Second

// Watch is a running watch of one instance's frames.
type Watch struct {
	// C receives the frames that pass the rule; it closes when the watch's context ends.
	C <-chan Frame

	stale, dropped, invalid, rewinds, unconfirmed, overflowed atomic.Uint64
}

// Rewinds counts the frames delivered saying Rewound.
func (w *Watch) Rewinds() uint64 { return w.rewinds.Load() }

// Unconfirmed counts, for a durable watch, the frames held and dropped because their owner
// changed, or went back to its stored state, before a message said their tick was stored.
func (w *Watch) Unconfirmed() uint64 { return w.unconfirmed.Load() }

// Stale counts frames dropped by the rule (an older grant, or a tick already shown).
func (w *Watch) Stale() uint64 { return w.stale.Load() }

// Dropped counts frames that passed the rule but found the buffer full, and, for a durable
// watch, those dropped because 1024 waited for their tick to be stored.
func (w *Watch) Dropped() uint64 { return w.dropped.Load() + w.overflowed.Load() }

// Invalid counts messages without valid stamp headers, or not on the instance's frame subjects
// (not from a tickfence node).
func (w *Watch) Invalid() uint64 { return w.invalid.Load() }

// GrantReader returns, for Client.GrantOf, the current grant of a shard read from st: the
// cluster's live epoch and the revision of its shard.<S> there (through the stream leader). A
// watcher with read access to the store (an operator's tickctl, the console) sets it, and never
// follows a frame stamped with a grant the shard has not given.
func GrantReader(st store.Store) func(ctx context.Context, shard uint32) (epoch, token uint64, err error) {
	return func(ctx context.Context, shard uint32) (uint64, uint64, error) {
		cl, err := st.Cluster(ctx)
		if err != nil {
			return 0, 0, err
		}
		_, rev, err := st.LatestAssignment(ctx, cl.Epoch, shard)
		return cl.Epoch, rev, err
	}
}
