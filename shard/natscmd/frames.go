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
	// One message and one header map, reused: PublishMsg copies them into the connection's buffer.
	epoch, token, tick, index := []string{""}, []string{""}, []string{""}, []string{""}
	m := &nats.Msg{Header: nats.Header{wire.HeaderEpoch: epoch, wire.HeaderToken: token, wire.HeaderTick: tick,
		wire.HeaderFrame: index}}
	var num []byte
	for {
		var f shard.Frame
		select {
		case f = <-p.q:
		case <-p.quit:
			return
		}
		m.Subject = wire.FrameSubject(f.Shard, f.Instance, f.Topic)
		m.Data = f.Payload
		num = strconv.AppendUint(num[:0], f.Epoch, 10)
		epoch[0] = string(num)
		num = strconv.AppendUint(num[:0], f.Token, 10)
		token[0] = string(num)
		num = strconv.AppendUint(num[:0], f.Tick, 10)
		tick[0] = string(num)
		num = strconv.AppendUint(num[:0], f.Index, 10)
		index[0] = string(num)
		if err := p.nc.PublishMsg(m); err != nil {
			p.metrics.FramesDropped.Inc()
			continue
		}
		p.metrics.FramesPublished.Inc()
	}
}

// Close stops publishing; frames still queued are dropped (they are not durable).
func (p *FramePublisher) Close() {
	p.once.Do(func() { close(p.quit) })
	<-p.done
}

// Frame is a frame as a watcher receives it.
type Frame struct {
	Instance string
	Topic    string // "" for the instance's main subject
	wire.FrameStamp
	Payload []byte
}

// Watch delivers the frames of one instance until ctx ends (then the channel closes): every
// topic, or with topics only those ("" names the main subject, tickfence.out.<S>.<id>). It
// subscribes the chosen topics' own subjects, so the server sends this connection nothing else:
// a player's client watching its own HUD topic does not receive everyone's. It applies the
// watcher's rule (wire.FrameFilter) to what it subscribed: a frame under an older grant than one
// already seen — a zombie's — is dropped, and under the same grant one that is not after the last
// shown on its subject (by tick and frame number), so what arrives goes forward in time. It
// survives moves: the subject names the instance, not its owner. A consumer slower than the
// frames loses the ones its buffer (256) cannot hold; Dropped on the returned Watch counts them.
//
// ctx needs no deadline (a signal.NotifyContext is fine): Watch waits up to watchFlush for the
// server to confirm the subscriptions before it returns.
func (c *Client) Watch(ctx context.Context, instance string, topics ...string) (*Watch, error) {
	if err := store.ValidID(instance); err != nil {
		return nil, err
	}
	s := store.ShardOf(instance, c.shards)
	base := wire.FrameSubject(s, instance, "")
	subjects := []string{base, base + ".*"} // every topic
	var want map[string]bool                // the subjects subscribed, with topics
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
	closed := false
	handle := func(m *nats.Msg) {
		// A frame is published on its own subject. A message delivered here under another — what a
		// push consumer delivers keeps its stored subject: someone aimed a stream's consumer at
		// this watch's subject (no permission checks a deliver subject) — is no frame.
		if want != nil && !want[m.Subject] || want == nil && m.Subject != base && !strings.HasPrefix(m.Subject, base+".") {
			w.invalid.Add(1)
			return
		}
		st, err := wire.ParseFrameStamp(m.Header.Get)
		if err != nil {
			w.invalid.Add(1)
			return
		}
		f := Frame{Instance: instance, Topic: strings.TrimPrefix(strings.TrimPrefix(m.Subject, base), "."), FrameStamp: st, Payload: m.Data}
		mu.Lock()
		defer mu.Unlock()
		if closed || !filter.Pass(f.Topic, st) {
			if !closed {
				w.stale.Add(1)
			}
			return
		}
		select {
		case ch <- f:
		default:
			w.dropped.Add(1)
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

	stale, dropped, invalid atomic.Uint64
}

// Stale counts frames dropped by the rule (an older grant, or a tick already shown).
func (w *Watch) Stale() uint64 { return w.stale.Load() }

// Dropped counts frames that passed the rule but found the buffer full.
func (w *Watch) Dropped() uint64 { return w.dropped.Load() }

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
