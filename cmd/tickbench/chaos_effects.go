package main

// The chaos scenario's effects check. The killable dungeons die and respawn under the attacks,
// each kill emitting one loot effect (one joined player); a consumer inside tickbench takes every
// delivery through natscmd.ConsumeEffects during the whole soak. At the end, once every outbox is
// empty and the consumer has caught up, the stored states say exactly which effect keys must
// exist, and the stream and the consumer are held against them.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/tickfence/tickfence/actor/dungeon"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/store"
)

// fxConsumerName is the durable consumer tickbench chaos reads the effects stream through.
const fxConsumerName = "tickbench-chaos"

// Bounds of the waits at the end: outboxes draining, the consumer catching up.
const (
	fxDrainFor   = 2 * time.Minute
	fxCatchUpFor = time.Minute
)

type effectsResult struct {
	Killable   int   `json:"killable_instances"`
	KillableHP int64 `json:"killable_boss_hp"`
	Kills      int   `json:"kills"` // Σ kills over every instance's stored state
	// Expected is Σ loot_given over the stored states: each run whose loot was granted emitted
	// one effect per joined player, and every instance has exactly one (see expectedKeys).
	Expected int    `json:"expected"`
	FxSeq    uint64 `json:"fx_seq_total"` // Σ (fx_seq − base): the effects the instances say they made

	StreamMessages   int `json:"stream_messages"`
	StreamKeys       int `json:"stream_distinct_keys"`
	StreamDuplicates int `json:"stream_duplicates"` // messages beyond one per key

	Deliveries    int `json:"deliveries"`
	DeliveredKeys int `json:"delivered_distinct_keys"`
	Applied       int `json:"applied"`          // keys the consumer applied: once each
	Redelivered   int `json:"keys_redelivered"` // keys delivered more than once
	Redeliveries  int `json:"redeliveries"`     // deliveries − distinct keys delivered
	NakInjected   int `json:"nak_injected"`     // first deliveries applied then refused (--fx-nak)

	Missing         int `json:"missing"`             // expected keys not in the stream
	Undelivered     int `json:"undelivered"`         // expected keys never delivered to the consumer
	Unexpected      int `json:"unexpected"`          // keys in the stream or delivered that no state explains
	PayloadMismatch int `json:"payload_mismatches"`  // a payload not the loot of the key's run
	Inconsistent    int `json:"states_inconsistent"` // fx_seq, kills, players or damage not as the runs explain
	OutboxLeft      int `json:"outboxes_not_drained"`

	Published float64 `json:"published_metric"` // tickfence_effects_published_total over lives (republishes included; a killed life's last increments are lost)
	Emitted   float64 `json:"emitted_metric"`   // tickfence_effects_emitted_total over lives (a zombie's refused ones included)
	Failed    float64 `json:"publish_failures_metric"`

	DrainSeconds   float64  `json:"drain_s"`
	CatchUpSeconds float64  `json:"catch_up_s"`
	Error          string   `json:"error,omitempty"`
	Examples       []string `json:"examples,omitempty"`
}

// fxConsumer applies every effect once by key, as a loot service would, and records every
// delivery. A share of first deliveries (nak) is applied and then answered with an error, as if
// the consumer had crashed before acknowledging: the redelivery must be recognized, not applied.
type fxConsumer struct {
	nc     *nats.Conn
	nak    float64
	rng    *mrand.Rand // the handler's only (ConsumeEffects calls it from one goroutine)
	cancel context.CancelFunc
	done   chan struct{}
	err    error

	mu         sync.Mutex
	keys       map[string]*fxDelivery
	deliveries int
	applied    int
	naks       int
}

type fxDelivery struct {
	n        int
	kind     string
	instance string
	payload  []byte
	changed  bool // delivered again with another payload or subject
}

var errFxNak = errors.New("tickbench: refused after applying (injected)")

// startFxConsumer starts the durable consumer on its own connection nc (closed by stop) and waits until the server
// has it (it delivers the stream from its first message, so nothing is missed either way).
func startFxConsumer(ctx context.Context, nc *nats.Conn, nak float64, seed uint64) (*fxConsumer, error) {
	cctx, cancel := context.WithCancel(context.Background())
	fc := &fxConsumer{nc: nc, nak: nak, rng: mrand.New(mrand.NewPCG(seed, seed^0x5deece66d)), cancel: cancel,
		done: make(chan struct{}), keys: map[string]*fxDelivery{}}
	go func() {
		defer close(fc.done)
		fc.err = natscmd.ConsumeEffects(cctx, nc, fxConsumerName, nil, fc.handle)
	}()
	js, err := jetstream.New(nc)
	if err != nil {
		fc.stop()
		return nil, err
	}
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	for {
		if _, err := js.Consumer(wctx, natscmd.EffectsStream, fxConsumerName); err == nil {
			return fc, nil
		}
		select {
		case <-fc.done:
			err := fc.err
			fc.stop()
			return nil, fmt.Errorf("effects consumer: %v", err)
		case <-wctx.Done():
			fc.stop()
			return nil, fmt.Errorf("effects consumer %s not created: %w", fxConsumerName, wctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (fc *fxConsumer) handle(_ context.Context, e natscmd.EffectMsg) error {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.deliveries++
	d := fc.keys[e.Key]
	if d != nil {
		d.n++
		if d.kind != e.Kind || d.instance != e.Instance || !bytes.Equal(d.payload, e.Payload) {
			d.changed = true
		}
		return nil // applied already: acknowledged, not applied again
	}
	fc.keys[e.Key] = &fxDelivery{n: 1, kind: e.Kind, instance: e.Instance, payload: bytes.Clone(e.Payload)}
	fc.applied++
	if fc.nak > 0 && fc.rng.Float64() < fc.nak {
		fc.naks++
		return errFxNak
	}
	return nil
}

// stop ends the consumer (its durable state stays on the server) and closes its connection.
func (fc *fxConsumer) stop() {
	fc.cancel()
	<-fc.done
	fc.nc.Close()
}

// consumerError is the consumer's error if it stopped on its own ("" while it runs).
func (fc *fxConsumer) consumerError() string {
	select {
	case <-fc.done:
		if fc.err != nil && !errors.Is(fc.err, context.Canceled) {
			return fc.err.Error()
		}
		return "stopped on its own"
	default:
		return ""
	}
}

// waitCaughtUp waits until the consumer has been delivered the whole stream and acknowledged
// everything (the refused deliveries redelivered and acknowledged too).
func (fc *fxConsumer) waitCaughtUp(ctx context.Context, p *progress, bound time.Duration) error {
	js, err := jetstream.New(fc.nc)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	last := time.Now()
	for {
		s, err := js.Stream(wctx, natscmd.EffectsStream)
		var si *jetstream.StreamInfo
		if err == nil {
			si, err = s.Info(wctx)
		}
		var ci *jetstream.ConsumerInfo
		if err == nil {
			var c jetstream.Consumer
			if c, err = js.Consumer(wctx, natscmd.EffectsStream, fxConsumerName); err == nil {
				ci, err = c.Info(wctx)
			}
		}
		if err == nil {
			if ci.NumPending == 0 && ci.NumAckPending == 0 && ci.Delivered.Stream >= si.State.LastSeq {
				return nil
			}
			if time.Since(last) >= 5*time.Second {
				last = time.Now()
				p.line("effects consumer: delivered up to %d of %d, %d pending, %d awaiting acknowledgement",
					ci.Delivered.Stream, si.State.LastSeq, ci.NumPending, ci.NumAckPending)
			}
		}
		if e := fc.consumerError(); e != "" {
			return fmt.Errorf("effects consumer: %s", e)
		}
		if serr := sleepCtx(wctx, 200*time.Millisecond); serr != nil {
			if err != nil {
				return fmt.Errorf("%w (last: %v)", serr, err)
			}
			return fmt.Errorf("consumer not caught up: delivered up to %d of %d, %d pending, %d awaiting acknowledgement: %w",
				ci.Delivered.Stream, si.State.LastSeq, ci.NumPending, ci.NumAckPending, serr)
		}
	}
}

// waitOutboxes waits until no stored record holds an effect: each was acknowledged by the
// stream and dropped by a later write. It returns how many records still hold some.
func waitOutboxes(ctx context.Context, b *benchCluster, ids []string, p *progress, bound time.Duration) (left int, err error) {
	wctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	start, last := time.Now(), time.Now()
	for {
		left, held := 0, 0
		var lerr error
		for _, id := range ids {
			r, err := b.Load(wctx, b.epoch, store.ShardOf(id, b.shards), id)
			if err != nil {
				lerr = fmt.Errorf("load %s: %w", id, err)
				left++
				continue
			}
			if len(r.Fx) > 0 {
				left++
				held += len(r.Fx)
			}
		}
		if left == 0 {
			return 0, nil
		}
		if time.Since(last) >= 5*time.Second {
			last = time.Now()
			p.line("outboxes: %d instances still hold %d effects after %.0fs", left, held, time.Since(start).Seconds())
		}
		if serr := sleepCtx(wctx, 250*time.Millisecond); serr != nil {
			if lerr != nil {
				return left, fmt.Errorf("%w (last: %v)", serr, lerr)
			}
			return left, fmt.Errorf("%d instances still hold %d effects: %w", left, held, serr)
		}
	}
}

// storedFx is one key of the effects stream.
type storedFx struct {
	n        int
	kind     string
	instance string
	payload  []byte
	changed  bool // stored again with another payload or subject
}

// readEffectsStream reads the whole effects stream in order (an ordered consumer).
func readEffectsStream(ctx context.Context, js jetstream.JetStream) (map[string]*storedFx, int, error) {
	keys := map[string]*storedFx{}
	s, err := js.Stream(ctx, natscmd.EffectsStream)
	if err != nil {
		return keys, 0, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return keys, 0, err
	}
	st := info.State
	if st.FirstSeq > 1 || st.Msgs != st.LastSeq-st.FirstSeq+1 {
		return keys, 0, fmt.Errorf("stream holds %d messages of sequences %d..%d: some were removed", st.Msgs, st.FirstSeq, st.LastSeq)
	}
	if st.Msgs == 0 {
		return keys, 0, nil
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return keys, 0, err
	}
	n := 0
	for n < int(st.Msgs) {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			return keys, n, fmt.Errorf("read message %d of %d: %w", n+1, st.Msgs, err)
		}
		n++
		parts := strings.SplitN(strings.TrimPrefix(m.Subject(), natscmd.EffectsPrefix+"."), ".", 2)
		kind, inst := "", ""
		if len(parts) == 2 {
			kind, inst = parts[0], parts[1]
		}
		key := m.Headers().Get(jetstream.MsgIDHeader)
		if k := keys[key]; k != nil {
			k.n++
			k.changed = k.changed || k.kind != kind || k.instance != inst || !bytes.Equal(k.payload, m.Data())
			continue
		}
		keys[key] = &storedFx{n: 1, kind: kind, instance: inst, payload: bytes.Clone(m.Data())}
	}
	return keys, n, nil
}

// fxState is what the effects check reads of a dungeon's state.
type fxState struct {
	Run       int              `msgpack:"run"`
	HP        int64            `msgpack:"hp"`
	MaxHP     int64            `msgpack:"max_hp"`
	Players   []dungeon.Player `msgpack:"players"`
	Loot      []dungeon.Loot   `msgpack:"loot"`
	Kills     int              `msgpack:"kills"`
	TotalDmg  int64            `msgpack:"total_damage"`
	LootGiven int              `msgpack:"loot_given"`
}

// expectedKeys derives from an instance's stored state the effects it must have made. Player
// "p" joined before the first attack and never leaves, so every kill saw exactly one player;
// die() grants loot (one effect per player) only when loot_given != run and then sets it to the
// run, and a run starts only after the previous one died, so the runs whose loot was granted are
// exactly 1..loot_given: the instance made loot_given effects, its keys
// <id>:<epoch>:base+1..base+loot_given (no restore in chaos: one epoch; base is where the
// instance's sequence started, store.FxSeqBase of its creation revision: a multiple of 2^24),
// the (base+k)-th the loot of run k. It also checks the state against that: fx_seq − base
// (every effect of the dungeon is loot) = loot_given = kills, and, each finished run having taken
// exactly max_hp damage, total_damage = run × max_hp − hp.
func expectedKeys(id string, r store.Record, st fxState) (n int, base uint64, bad []string) {
	n = st.LootGiven
	if len(st.Players) != 1 || st.Players[0].Name != "p" {
		bad = append(bad, fmt.Sprintf("%s: %d players, want only p", id, len(st.Players)))
	}
	if r.FxSeq < uint64(n) || (r.FxSeq-uint64(n))%store.FxSeqBase(1) != 0 || r.FxSeq-uint64(n) == 0 {
		bad = append(bad, fmt.Sprintf("%s: fx_seq %d, loot_given %d: the sequence did not start at a base", id, r.FxSeq, n))
	} else {
		base = r.FxSeq - uint64(n)
	}
	if st.Kills != st.LootGiven {
		bad = append(bad, fmt.Sprintf("%s: kills %d, loot_given %d", id, st.Kills, st.LootGiven))
	}
	if want := int64(st.Run)*st.MaxHP - st.HP; st.TotalDmg != want {
		bad = append(bad, fmt.Sprintf("%s: total_damage %d, run %d × max_hp %d − hp %d = %d", id, st.TotalDmg, st.Run, st.MaxHP, st.HP, want))
	}
	if st.Run != st.LootGiven && st.Run != st.LootGiven+1 {
		bad = append(bad, fmt.Sprintf("%s: run %d, loot_given %d", id, st.Run, st.LootGiven))
	}
	return n, base, bad
}

// checkLootPayload checks that a loot effect is the grant of run seq to p, with the item the
// state still lists for that run (it keeps the last few).
func checkLootPayload(kind string, payload []byte, seq uint64, items map[int]string) error {
	if kind != "loot" {
		return fmt.Errorf("kind %q", kind)
	}
	var l dungeon.Loot
	if err := msgpack.Unmarshal(payload, &l); err != nil {
		return err
	}
	if uint64(l.Run) != seq || l.Player != "p" {
		return fmt.Errorf("run %d for %s, want run %d for p", l.Run, l.Player, seq)
	}
	if it, ok := items[l.Run]; ok && it != l.Item {
		return fmt.Errorf("item %q, the state granted %q", l.Item, it)
	}
	return nil
}

// checkEffects reads the stream and the consumer's deliveries and holds them against the keys
// every stored state explains. Call it after the outboxes drained and the consumer caught up.
func checkEffects(ctx context.Context, b *benchCluster, g *loadGen, fc *fxConsumer, rep *chaosReport) {
	e := &rep.Effects
	e.Killable, e.KillableHP = g.killable, g.killableHP
	js, err := jetstream.New(b.NC)
	if err != nil {
		e.Error = err.Error()
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	stored, msgs, err := readEffectsStream(rctx, js)
	cancel()
	e.StreamMessages = msgs
	if err != nil {
		e.Error = "effects stream: " + err.Error()
	}

	// What the states explain, read after the stream: with no attack left, no effect is made
	// meanwhile, and one that were would show as unexpected, never hide a missing one.
	want := map[string]fxExpect{}
	for _, id := range g.ids {
		r, err := b.Load(ctx, b.epoch, store.ShardOf(id, b.shards), id)
		var st fxState
		if err == nil {
			err = msgpack.Unmarshal(r.State, &st)
		}
		if err != nil {
			e.Inconsistent++
			e.example("%s: %v", id, err)
			continue
		}
		if len(r.Fx) > 0 {
			e.OutboxLeft++
			e.example("%s: outbox still holds %d effects (first %s)", id, len(r.Fx), r.Fx[0].Key)
		}
		n, base, bad := expectedKeys(id, r, st)
		if len(bad) > 0 {
			e.Inconsistent++
			for _, s := range bad {
				e.example("%s", s)
			}
		}
		x := fxExpect{n: n, base: base, items: map[int]string{}}
		for _, l := range st.Loot {
			x.items[l.Run] = l.Item
		}
		want[id] = x
		e.Kills += st.Kills
		e.FxSeq += r.FxSeq - base
	}

	fc.mu.Lock()
	delivered := make(map[string]fxDelivery, len(fc.keys))
	for k, d := range fc.keys {
		delivered[k] = *d
	}
	e.Deliveries, e.Applied, e.NakInjected = fc.deliveries, fc.applied, fc.naks
	fc.mu.Unlock()
	if ce := fc.consumerError(); ce != "" && e.Error == "" {
		e.Error = "effects consumer: " + ce
	}
	e.tally(b.epoch, g.ids, want, stored, delivered)
	if len(e.Examples) > 20 {
		e.Examples = e.Examples[:20]
	}
}

// fxExpect is what an instance's stored state explains: keys base+1..base+n, and the items of
// the runs its state still lists.
type fxExpect struct {
	n     int
	base  uint64
	items map[int]string
}

func (e *effectsResult) example(f string, a ...any) {
	e.Examples = append(e.Examples, fmt.Sprintf(f, a...))
}

// tally holds the stream's keys and the consumer's deliveries against the expected keys.
// e.Deliveries must be set (the consumer's count of every delivery).
func (e *effectsResult) tally(epoch uint64, ids []string, want map[string]fxExpect, stored map[string]*storedFx, delivered map[string]fxDelivery) {
	e.StreamKeys = len(stored)
	e.StreamDuplicates = 0
	for _, s := range stored {
		e.StreamDuplicates += s.n - 1
	}
	e.DeliveredKeys = len(delivered)
	e.Redeliveries = e.Deliveries - e.DeliveredKeys
	for _, id := range ids {
		e.Expected += want[id].n
	}
	// explained tells whether a key is one of the expected ones.
	explained := func(key string) (fxExpect, uint64, bool) {
		id, ep, seq, ok := store.ParseEffectKey(key)
		x, known := want[id]
		if !ok || !known || ep != epoch || seq <= x.base || seq > x.base+uint64(x.n) {
			return fxExpect{}, 0, false
		}
		return x, seq - x.base, true // the run whose loot it is
	}
	for _, key := range sortedKeys(stored) {
		s := stored[key]
		x, seq, ok := explained(key)
		if !ok {
			e.Unexpected++
			e.example("in the stream, unexplained by the states: %s (%s of %s)", key, s.kind, s.instance)
			continue
		}
		if err := checkLootPayload(s.kind, s.payload, seq, x.items); err != nil || s.changed || s.instance != keyInstance(key) {
			e.PayloadMismatch++
			e.example("stored %s: %v (stored %d times, changed %v, subject instance %s)", key, err, s.n, s.changed, s.instance)
		}
	}
	for _, key := range sortedKeys(delivered) {
		d := delivered[key]
		if d.n > 1 {
			e.Redelivered++
		}
		x, seq, ok := explained(key)
		if !ok {
			if stored[key] == nil { // counted above otherwise
				e.Unexpected++
				e.example("delivered, unexplained by the states: %s (%s of %s)", key, d.kind, d.instance)
			}
			continue
		}
		if err := checkLootPayload(d.kind, d.payload, seq, x.items); err != nil || d.changed || d.instance != keyInstance(key) {
			e.PayloadMismatch++
			e.example("delivered %s: %v (delivered %d times, changed %v, subject instance %s)", key, err, d.n, d.changed, d.instance)
		}
	}
	for _, id := range ids {
		for k := 1; k <= want[id].n; k++ {
			key := store.EffectKey(id, epoch, want[id].base+uint64(k))
			if stored[key] == nil {
				e.Missing++
				e.example("missing from the stream: %s", key)
			}
			if _, ok := delivered[key]; !ok {
				e.Undelivered++
				e.example("never delivered: %s", key)
			}
		}
	}
}

func keyInstance(key string) string {
	id, _, _, _ := store.ParseEffectKey(key)
	return id
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// failures are the effects check's failures.
func (e *effectsResult) failures() []string {
	var f []string
	if e.Error != "" {
		f = append(f, "effects: "+e.Error)
	}
	if e.Missing > 0 {
		f = append(f, fmt.Sprintf("effects: %d expected keys missing from the stream", e.Missing))
	}
	if e.Unexpected > 0 {
		f = append(f, fmt.Sprintf("effects: %d keys no stored state explains", e.Unexpected))
	}
	if e.StreamKeys != e.Expected {
		f = append(f, fmt.Sprintf("effects: %d distinct keys in the stream, %d expected", e.StreamKeys, e.Expected))
	}
	if e.Undelivered > 0 {
		f = append(f, fmt.Sprintf("effects: %d expected keys never delivered to the consumer", e.Undelivered))
	}
	if e.Applied != e.Expected {
		f = append(f, fmt.Sprintf("effects: the consumer applied %d, %d expected", e.Applied, e.Expected))
	}
	if e.PayloadMismatch > 0 {
		f = append(f, fmt.Sprintf("effects: %d payloads not the loot of their key's run", e.PayloadMismatch))
	}
	if e.Inconsistent > 0 {
		f = append(f, fmt.Sprintf("effects: %d instance states inconsistent with their runs (fx_seq, kills, players, damage)", e.Inconsistent))
	}
	if e.OutboxLeft > 0 {
		f = append(f, fmt.Sprintf("effects: %d outboxes not drained", e.OutboxLeft))
	}
	return f
}

func printEffects(e effectsResult, nak float64) {
	fmt.Printf("\neffects (%d killable instances, boss HP %d; consumer %s, %.0f%% of first deliveries refused after applying):\n",
		e.Killable, e.KillableHP, fxConsumerName, 100*nak)
	fmt.Printf("  kills %d; expected effects %d (Σ loot_given of the stored states, one player each); effects the states count (Σ fx_seq − its base) %d\n", e.Kills, e.Expected, e.FxSeq)
	fmt.Printf("  stream: %d messages, %d distinct keys, %d stored twice\n", e.StreamMessages, e.StreamKeys, e.StreamDuplicates)
	fmt.Printf("  consumer: %d deliveries, %d distinct keys, applied %d; %d keys delivered more than once (%d redeliveries, %d refusals injected)\n",
		e.Deliveries, e.DeliveredKeys, e.Applied, e.Redelivered, e.Redeliveries, e.NakInjected)
	fmt.Printf("  missing from the stream %d, never delivered %d, unexpected %d, payload mismatches %d, inconsistent states %d, outboxes not drained %d\n",
		e.Missing, e.Undelivered, e.Unexpected, e.PayloadMismatch, e.Inconsistent, e.OutboxLeft)
	fmt.Printf("  node metrics over lives (best effort): emitted %.0f, published %.0f, publish failures %.0f\n", e.Emitted, e.Published, e.Failed)
	fmt.Printf("  outboxes drained %.1fs after the final write, consumer caught up %.1fs later\n", e.DrainSeconds, e.CatchUpSeconds)
	if e.Error != "" {
		fmt.Printf("  error: %s\n", e.Error)
	}
	for _, x := range e.Examples {
		fmt.Printf("  %s\n", x)
	}
}
