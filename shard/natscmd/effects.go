package natscmd

import (
	"context"
	"errors"
	"fmt"
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

// EnsureEffectsStream creates the effects stream if it is missing (EffectsStreamConfig) and
// returns it. Creating it takes a right to create streams: with the roles enforced, only admin
// has it (tickctl cluster init makes it), and anyone else finds it there.
func EnsureEffectsStream(ctx context.Context, js jetstream.JetStream, replicas int) (jetstream.Stream, error) {
	s, err := js.Stream(ctx, EffectsStream)
	if err == nil {
		return s, nil
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, err
	}
	s, err = js.CreateStream(ctx, EffectsStreamConfig(replicas))
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return js.Stream(ctx, EffectsStream)
	}
	return s, err
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

// NewEffectPublisher starts a publisher on nc (the effects stream must exist: EnsureEffectsStream).
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
func ConsumeEffects(ctx context.Context, nc *nats.Conn, name string, kinds []string, handle func(context.Context, EffectMsg) error) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if _, err := EnsureEffectsStream(ctx, js, 1); err != nil {
		return fmt.Errorf("effects stream: %w", err)
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
