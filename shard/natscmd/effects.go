package natscmd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickfence/tickfence/shard"
	"github.com/tickfence/tickfence/store"
)

// The effects stream (DESIGN 8).
const (
	EffectsStream = "tickfence-effects"
	EffectsPrefix = "tickfence.fx"
	// EffectsDuplicates is the stream's duplicate window: a republish of an effect within it (a
	// new owner sending what its record still holds) is stored once. Consumers key on the effect
	// key for repeats older than that.
	EffectsDuplicates = 10 * time.Minute
)

// EffectSubject is where an effect is published: tickfence.fx.<kind>.<id>.
func EffectSubject(kind, id string) string { return EffectsPrefix + "." + kind + "." + id }

// EffectsStreamConfig is the effects stream's configuration with the given replicas: File
// storage, the duplicate window EffectsDuplicates, effects kept 7 days.
func EffectsStreamConfig(replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{Name: EffectsStream, Subjects: []string{EffectsPrefix + ".>"},
		Storage: jetstream.FileStorage, Duplicates: EffectsDuplicates, MaxAge: 7 * 24 * time.Hour, Replicas: max(replicas, 1)}
}

// ErrNoEffectsStream: the effects stream does not exist. Only who shapes storage makes it (DESIGN
// 9): an admin's tickctl cluster init (clusterinit.Init), or a node that makes its own storage
// (tickd with its embedded server, or on a server without credentials) as it starts. A consumer
// never does, and neither does a node on credentials: a stream made by either would have its
// shape, not the cluster's (one replica on a 3-server cluster).
var ErrNoEffectsStream = errors.New("no effects stream " + EffectsStream +
	": an admin makes it (tickctl --creds DIR/admin.creds cluster init), or the first node of a cluster that makes its own storage; consumers never do")

// EffectsShapeError is an effects stream that exists but is not shaped as tickfence needs it
// (CheckEffectsStream). Effects leave their records once the stream acknowledges them, so the
// stream must keep them as well as the records would.
type EffectsShapeError struct {
	// Repairable: what an update of the stream corrects in place, keeping its effects (tickctl
	// cluster init does it): fewer replicas than the cluster's, a shorter duplicate window.
	Repairable []string
	// Unrepairable: what no update changes (its subjects, storage, retention): the stream must be
	// made again.
	Unrepairable []string
	// Init is the command Error names to shape the stream ("": tickctl --creds DIR/admin.creds
	// cluster init); a node sets its own URL in it.
	Init string
}

func (e *EffectsShapeError) Error() string {
	what := strings.Join(append(slices.Clone(e.Unrepairable), e.Repairable...), "; ")
	cmd := e.Init
	if cmd == "" {
		cmd = "tickctl --creds DIR/admin.creds cluster init"
	}
	if len(e.Unrepairable) > 0 {
		return fmt.Sprintf("effects stream %s is not shaped as tickfence needs it: %s. No update can change that: once its consumers "+
			"have read every effect it holds, delete it as admin (nats stream rm %s) and run %s, which makes it anew",
			EffectsStream, what, EffectsStream, cmd)
	}
	return fmt.Sprintf("effects stream %s is not shaped as tickfence needs it: %s. Run %s (as admin): "+
		"it updates the stream in place, keeping its effects", EffectsStream, what, cmd)
}

// CheckEffectsStream compares got, the effects stream's configuration as the server holds it, with
// what tickfence makes for a cluster of replicas (EffectsStreamConfig): nil if tickfence can rely on
// it, or an *EffectsShapeError saying what is wrong. More replicas than the cluster's and a longer
// duplicate window are accepted (an admin's choice, and no weaker).
func CheckEffectsStream(got jetstream.StreamConfig, replicas int) error {
	e, _, _ := effectsShape(got, replicas)
	if len(e.Repairable) == 0 && len(e.Unrepairable) == 0 {
		return nil
	}
	return &e
}

// minEffectsAge is the shortest MaxAge the effects stream may have (0 is none): effects wait
// there for consumers that may be down for a while.
const minEffectsAge = 24 * time.Hour

// effectsShape judges an effects stream's configuration: what is wrong with it, the configuration
// an update would repair it to, and what that update changes.
func effectsShape(got jetstream.StreamConfig, replicas int) (e EffectsShapeError, fixed jetstream.StreamConfig, repaired []string) {
	want := EffectsStreamConfig(replicas)
	fixed = got
	bad := func(why string) { e.Unrepairable = append(e.Unrepairable, why) }
	fix := func(why, change string, apply func(*jetstream.StreamConfig)) {
		e.Repairable = append(e.Repairable, why)
		repaired = append(repaired, change)
		apply(&fixed)
	}
	if !slices.Equal(got.Subjects, want.Subjects) {
		bad(fmt.Sprintf("it captures %v, want %v (not made by tickfence)", got.Subjects, want.Subjects))
	}
	if got.Storage != want.Storage {
		bad(fmt.Sprintf("its storage is %s, want %s (effects must outlive a server's restart)", got.Storage, want.Storage))
	}
	if got.Retention != want.Retention {
		bad(fmt.Sprintf("its retention is %s, want %s (effects must wait for consumers that are not there yet)", got.Retention, want.Retention))
	}
	if got.AllowMsgTTL {
		bad("it takes per-message TTLs (a publisher's Nats-TTL would expire an effect; a stream cannot give them up)")
	}
	if got.Sealed {
		bad("it is sealed (it takes no effect)")
	}
	if r := max(got.Replicas, 1); r < want.Replicas {
		fix(fmt.Sprintf("it has %s, want %d (the cluster's): effects leave their records once the stream acknowledges them, "+
			"so losing a server of a smaller stream loses acknowledged effects", replicasOf(r), want.Replicas),
			fmt.Sprintf("replicas %d → %d", r, want.Replicas), func(c *jetstream.StreamConfig) { c.Replicas = want.Replicas })
	}
	if got.Duplicates < want.Duplicates {
		fix(fmt.Sprintf("its duplicate window is %v, want at least %v (a republish by a new owner within it is stored once)", got.Duplicates, want.Duplicates),
			fmt.Sprintf("duplicate window %v → %v", got.Duplicates, want.Duplicates), func(c *jetstream.StreamConfig) { c.Duplicates = want.Duplicates })
	}
	if got.AllowRollup {
		fix("it takes roll-ups (one publish with Nats-Rollup: all, by anyone who may publish an effect, would purge it)",
			"roll-ups refused", func(c *jetstream.StreamConfig) { c.AllowRollup = false })
	}
	if got.NoAck {
		fix("it does not acknowledge publishes (an effect would leave its record unconfirmed)",
			"publishes acknowledged", func(c *jetstream.StreamConfig) { c.NoAck = false })
	}
	if got.MaxAge > 0 && got.MaxAge < minEffectsAge {
		fix(fmt.Sprintf("it keeps effects %v, want at least %v (effects wait for consumers that are down)", got.MaxAge, minEffectsAge),
			fmt.Sprintf("max age %v → %v", got.MaxAge, want.MaxAge), func(c *jetstream.StreamConfig) { c.MaxAge = want.MaxAge })
	}
	if got.MaxMsgsPerSubject > 0 {
		fix(fmt.Sprintf("it keeps %d effects per subject (an instance's older effects of a kind would be dropped)", got.MaxMsgsPerSubject),
			"no limit of effects per subject", func(c *jetstream.StreamConfig) { c.MaxMsgsPerSubject = -1 })
	}
	if (got.MaxMsgs > 0 || got.MaxBytes > 0) && got.Discard == jetstream.DiscardOld {
		fix(fmt.Sprintf("it drops its oldest effects past %d messages or %d bytes (undelivered effects lost)", got.MaxMsgs, got.MaxBytes),
			"no limit of messages or bytes", func(c *jetstream.StreamConfig) { c.MaxMsgs, c.MaxBytes = -1, -1 })
	}
	if got.MaxMsgSize > 0 && got.MaxMsgSize < store.MaxOutboxBytes {
		fix(fmt.Sprintf("it takes messages of at most %d bytes, want at least %d (an effect's payload)", got.MaxMsgSize, store.MaxOutboxBytes),
			"no message size limit", func(c *jetstream.StreamConfig) { c.MaxMsgSize = -1 })
	}
	return e, fixed, repaired
}

func replicasOf(r int) string {
	if r == 1 {
		return "1 replica"
	}
	return fmt.Sprintf("%d replicas", r)
}

// OpenEffectsStream opens the effects stream and checks its shape for a cluster of replicas
// (CheckEffectsStream), changing nothing: ErrNoEffectsStream if it is missing, an
// *EffectsShapeError if it is wrongly shaped. A node on credentials, which may not shape storage,
// opens it so before it publishes any effect.
func OpenEffectsStream(ctx context.Context, js jetstream.JetStream, replicas int) (jetstream.Stream, error) {
	s, err := js.Stream(ctx, EffectsStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, ErrNoEffectsStream
	}
	if err != nil {
		return nil, fmt.Errorf("effects stream %s: %w", EffectsStream, err)
	}
	if err := CheckEffectsStream(s.CachedInfo().Config, replicas); err != nil {
		return nil, err
	}
	return s, nil
}

// EffectsStreamChange is what EnsureEffectsStream did: created the stream, or repaired it (what
// it changed), or neither (it was there, well shaped).
type EffectsStreamChange struct {
	Created  bool
	Repaired []string // e.g. "replicas 1 → 3"
}

// EnsureEffectsStream makes the effects stream as its admin does (tickctl cluster init,
// clusterinit.Init; DESIGN 9: only admin shapes storage): it creates it if it is missing
// (EffectsStreamConfig), updates in place what an update repairs (replicas below the cluster's, a
// shorter duplicate window: the effects it holds stay), and refuses, changing nothing, a stream
// that no update can repair (an *EffectsShapeError). Consumers and nodes on credentials never call
// it: they open the stream (ConsumeEffects, OpenEffectsStream).
func EnsureEffectsStream(ctx context.Context, js jetstream.JetStream, replicas int) (jetstream.Stream, EffectsStreamChange, error) {
	s, err := js.Stream(ctx, EffectsStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		s, err = js.CreateStream(ctx, EffectsStreamConfig(replicas))
		if err == nil {
			return s, EffectsStreamChange{Created: true}, nil
		}
		if !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return nil, EffectsStreamChange{}, fmt.Errorf("create effects stream %s: %w", EffectsStream, err)
		}
		s, err = js.Stream(ctx, EffectsStream) // made meanwhile: check it
	}
	if err != nil {
		return nil, EffectsStreamChange{}, fmt.Errorf("effects stream %s: %w", EffectsStream, err)
	}
	got := s.CachedInfo().Config
	var shape *EffectsShapeError
	if err := CheckEffectsStream(got, replicas); err == nil {
		return s, EffectsStreamChange{}, nil
	} else if !errors.As(err, &shape) || len(shape.Unrepairable) > 0 {
		return nil, EffectsStreamChange{}, err
	}
	_, fixed, repaired := effectsShape(got, replicas)
	ch := EffectsStreamChange{Repaired: repaired}
	if s, err = js.UpdateStream(ctx, fixed); err != nil {
		return nil, EffectsStreamChange{}, fmt.Errorf("effects stream %s: repair (%s): %w", EffectsStream, strings.Join(ch.Repaired, ", "), err)
	}
	return s, ch, nil
}

// EffectPublisher implements shard.EffectPublisher on JetStream: effects wait in a bounded queue
// and a few goroutines publish them with Nats-Msg-Id = the effect key. A full queue or a failed
// publish is reported to the instance, which sends the effect again later.
type EffectPublisher struct {
	js      jetstream.JetStream
	q       chan effectJob
	timeout time.Duration
	quit    chan struct{}
	done    chan struct{}

	mu     sync.RWMutex // Publish's enqueue against Close: nothing is queued after Close drains
	closed bool
}

type effectJob struct {
	id   string
	e    store.Effect
	done func(error)
}

var _ shard.EffectPublisher = (*EffectPublisher)(nil)

// ErrEffectsQueueFull: the publisher's queue was full; the instance sends the effect later.
var ErrEffectsQueueFull = errors.New("effects queue full")

// NewEffectPublisher starts a publisher on nc (the effects stream must exist, well shaped:
// OpenEffectsStream).
func NewEffectPublisher(nc *nats.Conn) (*EffectPublisher, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	p := &EffectPublisher{js: js, q: make(chan effectJob, 4096), timeout: 5 * time.Second,
		quit: make(chan struct{}), done: make(chan struct{})}
	const workers = 4
	fin := make(chan struct{}, workers)
	for range workers {
		go func() { defer func() { fin <- struct{}{} }(); p.run() }()
	}
	go func() {
		for range workers {
			<-fin
		}
		close(p.done)
	}()
	return p, nil
}

// Publish implements shard.EffectPublisher; it never blocks.
func (p *EffectPublisher) Publish(instance string, e store.Effect, done func(error)) {
	p.mu.RLock()
	if p.closed {
		p.mu.RUnlock()
		done(errors.New("effects publisher closed"))
		return
	}
	select {
	case p.q <- effectJob{id: instance, e: e, done: done}:
		p.mu.RUnlock()
	default:
		p.mu.RUnlock()
		done(ErrEffectsQueueFull)
	}
}

func (p *EffectPublisher) run() {
	for {
		var j effectJob
		select {
		case j = <-p.q:
		case <-p.quit:
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
		_, err := p.js.Publish(ctx, EffectSubject(j.e.Kind, j.id), j.e.Payload, jetstream.WithMsgID(j.e.Key))
		cancel()
		j.done(err)
	}
}

// Close stops publishing; queued effects are answered as failed (they stay in their records).
func (p *EffectPublisher) Close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.quit)
	}
	p.mu.Unlock()
	<-p.done
	for {
		select {
		case j := <-p.q:
			j.done(errors.New("effects publisher closed"))
		default:
			return
		}
	}
}

// EffectMsg is an effect as a consumer receives it.
type EffectMsg struct {
	Key      string // <id>:<epoch>:<seq>: apply each key once
	Kind     string
	Instance string
	Payload  []byte
}

// ConsumeEffects delivers the effects of the given kinds ("" or none: all) to handle through the
// durable consumer name, until ctx ends. An effect is acknowledged once handle returns nil, and
// delivered again (after a second) if it returns an error: handle must be idempotent by Key —
// a repeat can come from the stream keeping an old duplicate or from a redelivery after a crash.
// It opens the effects stream and never makes it: without one it returns ErrNoEffectsStream at
// once (start consumers after tickctl cluster init, or retry).
func ConsumeEffects(ctx context.Context, nc *nats.Conn, name string, kinds []string, handle func(context.Context, EffectMsg) error) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	// The stream is opened, never made: a consumer started before the cluster's storage would
	// make it with its own shape (one replica), and the nodes would publish there.
	if _, err := js.Stream(ctx, EffectsStream); errors.Is(err, jetstream.ErrStreamNotFound) {
		return ErrNoEffectsStream
	} else if err != nil {
		return fmt.Errorf("effects stream %s: %w", EffectsStream, err)
	}
	cfg := jetstream.ConsumerConfig{Durable: name, AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second}
	for _, k := range kinds {
		if k != "" {
			cfg.FilterSubjects = append(cfg.FilterSubjects, EffectsPrefix+"."+k+".*")
		}
	}
	c, err := js.CreateOrUpdateConsumer(ctx, EffectsStream, cfg)
	if err != nil {
		return fmt.Errorf("effects consumer %s: %w", name, err)
	}
	it, err := c.Messages()
	if err != nil {
		return err
	}
	go func() { <-ctx.Done(); it.Stop() }()
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return ctx.Err()
			}
			return err
		}
		parts := strings.SplitN(strings.TrimPrefix(m.Subject(), EffectsPrefix+"."), ".", 2)
		if len(parts) != 2 {
			_ = m.Term()
			continue
		}
		em := EffectMsg{Key: m.Headers().Get(jetstream.MsgIDHeader), Kind: parts[0], Instance: parts[1], Payload: m.Data()}
		if err := handle(ctx, em); err != nil {
			_ = m.NakWithDelay(time.Second)
			continue
		}
		_ = m.DoubleAck(ctx)
	}
}
