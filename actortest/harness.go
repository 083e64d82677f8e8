package actortest

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
)

// TB is what the harness needs of a test: *testing.T, *testing.B and *testing.F are TBs. Fatalf
// must not return, as testing's does not; if it does, the harness panics with the same message.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Option configures New.
type Option func(*options)

type options struct {
	id             string
	fields         any
	creator        actor.Sender
	roundTripEvery int
}

// ID is the instance's ID (default "test-1"): what Kind.New and Kind.Restore are given. Games
// that seed from it (the demo dungeon does) play differently under another.
func ID(id string) Option { return func(o *options) { o.id = id } }

// Create gives the create command's fields — a map, or a struct with msgpack tags — as
// client.Create does: the command is {"type":"create","kind":<the kind's name>, fields...}.
func Create(fields any) Option { return func(o *options) { o.fields = fields } }

// CreatedBy is the create command's sender (default Trusted()). A kind that implements
// actor.CreateAuthorizer is asked, as a node asks it; one that does not lets only trusted
// senders create.
func CreatedBy(s actor.Sender) Option { return func(o *options) { o.creator = s } }

// RoundTripEvery makes the harness call CheckRoundTrip after every n-th tick, as if the instance
// moved to another node that often: from then on the game runs on what Restore made of its state.
func RoundTripEvery(n int) Option { return func(o *options) { o.roundTripEvery = n } }

// Player is a player's sender, as a node sees a command on the player's own subject: untrusted,
// acting for itself only.
func Player(name string) actor.Sender { return actor.Sender{Name: name, Player: name} }

// Trusted is a trusted sender naming no player: an operator's tickctl, the game's own servers.
// It is the sender of Send and, by default, of the create command.
func Trusted() actor.Sender { return actor.Sender{Trusted: true} }

// TrustedFor is a trusted gateway acting for player (the Tickfence-Player header).
func TrustedFor(player string) actor.Sender { return actor.Sender{Trusted: true, Player: player} }

// Harness runs one instance of a kind. Use it from one goroutine.
type Harness struct {
	t    TB
	kind actor.Kind
	id   string
	opt  options
	cur  *life
	// shadow is the logic that never went through MarshalState and Restore, run beside cur from
	// the first round trip on (at shadowFrom) and compared with it after every step.
	shadow     *life
	shadowFrom uint64
	create     actor.Command
	initial    recorded // the state New made
	steps      []step
	kept       int // bytes of states and frames kept in steps (keepBudget)
	frames     []Frame
	effects    []Effect
	reqs       int
}

// life is one logic and where it is.
type life struct {
	logic actor.Logic
	tick  uint64 // the last tick run
	role  string // how failures name it: "" (the run), "restored", "replay"
	// players: who is in, as the record keeps it (players.go); a round trip keeps it.
	players presence
}

// step is one input of the script — a command applied at the start of tick, a heartbeat of a
// player before it, or (neither) the tick itself — and what it made, to compare a replay with.
type step struct {
	tick      uint64
	cmd       *actor.Command
	heartbeat string
	out       recorded
}

// recorded is what one step made.
type recorded struct {
	reply   []byte
	effects []actor.Effect
	frames  []actor.Frame
	state   []byte // nil if over keepBudget: sum only
	sum     [32]byte
	hasSum  bool
	dropped bool // state and frames not kept
}

// keepBudget bounds the bytes of states and frames a harness keeps to show what differs in a
// failed CheckDeterminism; past it, it keeps their SHA-256 only. A variable for the tests.
var keepBudget = 64 << 20

// New creates an instance of kind from its create command and returns a harness at tick 0: the
// next commands are applied at the start of tick 1. The test fails if the create is refused.
func New(t TB, kind actor.Kind, opts ...Option) *Harness {
	t.Helper()
	h, res := TryNew(t, kind, opts...)
	if h == nil {
		fatal(t, "create %s: refused: %s: %s", kindName(kind), res.code, res.message)
	}
	return h
}

// TryNew is New for a create the test expects may be refused: the harness is nil if it was,
// and res is the create's answer as a node gives it ({"created":id,"kind":name}, or the refusal).
func TryNew(t TB, kind actor.Kind, opts ...Option) (h *Harness, res *Result) {
	t.Helper()
	o := options{id: "test-1", creator: Trusted()}
	for _, f := range opts {
		f(&o)
	}
	h = &Harness{t: t, kind: kind, id: o.id, opt: o}
	if kind == nil {
		h.fatalf("New: no kind")
	}
	if err := store.ValidID(o.id); err != nil {
		h.fatalf("New: %v", err)
	}
	if o.roundTripEvery < 0 {
		h.fatalf("RoundTripEvery(%d): want 0 (never) or more", o.roundTripEvery)
	}
	fields := map[string]any{}
	if o.fields != nil {
		b, err := wire.Canonical(o.fields)
		if err != nil {
			h.fatalf("Create(%T): not encodable as msgpack: %v", o.fields, err)
		}
		v, err := wire.DecodeValue(b)
		m, ok := v.(map[string]any)
		if err != nil || !ok {
			h.fatalf("Create(%T): want a map with string keys or a struct, got %T", o.fields, v)
		}
		fields = m
	}
	fields["type"], fields["kind"] = "create", kind.Name()
	c, res := h.command(o.creator, fields)
	if res != nil {
		return nil, res
	}
	h.create = c
	logic, res := h.newLife(kind, c, "")
	if res != nil {
		return nil, res
	}
	h.cur = &life{logic: logic}
	h.initial = h.keep(recorded{}, h.marshal(h.cur, "after New"), nil)
	return h, h.result(c, 0, h.createdReply(), nil)
}

// newLife runs Kind.New on the create command as a node does, asking the kind's
// CreateAuthorizer first; a refusal is a Result (nil logic).
func (h *Harness) newLife(kind actor.Kind, c actor.Command, role string) (actor.Logic, *Result) {
	h.t.Helper()
	what := "create" + roleSuffix(role)
	var err error
	h.call(what+": AuthorizeCreate", func() { err = actor.AuthorizeCreate(kind, h.id, c) })
	if err != nil {
		reply, _ := wire.ReplyFor(nil, err)
		return nil, h.result(c, 0, reply, nil)
	}
	var logic actor.Logic
	h.call(what+": Kind.New", func() { logic, err = kind.New(h.id, c) })
	if err != nil {
		reply, _ := wire.ReplyFor(nil, err)
		return nil, h.result(c, 0, reply, nil)
	}
	if logic == nil {
		h.fatalf("%s: Kind.New returned neither a Logic nor an error", what)
	}
	return logic, nil
}

func (h *Harness) createdReply() []byte {
	return wire.EncodeReply(wire.Reply{OK: true, Result: map[string]any{"created": h.id, "kind": h.kind.Name()}})
}

// command encodes cmd as the Go client does and decodes it as a node does; a command the node
// would refuse before the game sees it is a Result.
func (h *Harness) command(s actor.Sender, cmd any) (actor.Command, *Result) {
	h.t.Helper()
	var data []byte
	switch b := cmd.(type) {
	case []byte:
		data = b
	case msgpack.RawMessage:
		data = b
	case nil:
		h.fatalf("Send: no command")
	default:
		var err error
		if data, err = wire.Canonical(cmd); err != nil {
			h.fatalf("Send(%T): not encodable as msgpack: %v", cmd, err)
		}
	}
	h.reqs++
	req, err := wire.DecodeRequest(wire.Subject(0, h.id), "actortest-"+strconv.Itoa(h.reqs), "", data, 1)
	if err != nil {
		var we *wire.Error
		if !errors.As(err, &we) {
			we = wire.Errorf(wire.CodeBadRequest, "%v", err)
		}
		return actor.Command{}, h.result(actor.Command{Type: "?", Body: data, Sender: s}, h.next(), wire.EncodeReply(wire.Reply{Error: we}), nil)
	}
	return actor.Command{Type: req.Type, Body: req.Body, Sender: s}, nil
}

// ID is the instance's ID.
func (h *Harness) ID() string { return h.id }

// Kind is the kind the harness runs.
func (h *Harness) Kind() actor.Kind { return h.kind }

// LastTick is the last tick run (0 before the first): commands sent now are applied at the start
// of tick LastTick()+1.
func (h *Harness) LastTick() uint64 { return h.cur.tick }

func (h *Harness) next() uint64 {
	if h.cur == nil {
		return 0
	}
	return h.cur.tick + 1
}

// Logic is the instance's Logic as it is now, for a test of the game's own package to look
// inside (h.Logic().(*Arena)). It is a new value after each round trip. Changing it is no input
// the harness records: CheckDeterminism would find the difference.
func (h *Harness) Logic() actor.Logic { return h.cur.logic }

// Send applies cmd, sent by a trusted sender naming no player (Trusted()), at the start of the
// next tick, and returns its answer. cmd is a map or a struct with msgpack tags whose "type" key
// names the command ([]byte and msgpack.RawMessage are sent as they are, as msgpack).
func (h *Harness) Send(cmd any) *Result {
	h.t.Helper()
	return h.SendAs(Trusted(), cmd)
}

// SendAs is Send from sender s (Player, TrustedFor, Trusted, or any actor.Sender).
//
// As a node: a command without a string "type", or over store.MaxCommandBytes, is answered
// bad_request or too_large without reaching the game; "create" is answered already_exists.
// "end", which a node answers without the game, fails the test: the harness runs one life of an
// instance.
func (h *Harness) SendAs(s actor.Sender, cmd any) *Result {
	h.t.Helper()
	c, res := h.command(s, cmd)
	if res != nil {
		return res
	}
	switch c.Type {
	case "create":
		return h.result(c, h.next(), wire.EncodeReply(wire.Reply{Error: wire.Errorf(wire.CodeExists, "instance %s already exists", h.id)}), nil)
	case "end":
		h.fatalf("Send(end): end is tickfence's command, answered without the game; the harness runs one life of an instance (test ending on a node: tickfence.Start)")
	}
	return h.apply(c)
}

// apply runs a command the node would hand the game, at the start of the next tick.
func (h *Harness) apply(c actor.Command) *Result {
	h.t.Helper()
	tick := h.next()
	o := h.handle(h.cur, tick, c)
	if h.shadow != nil {
		h.compare(h.shadowDiff(tick, &c), o, h.handle(h.shadow, tick, c))
	}
	h.steps = append(h.steps, step{tick: tick, cmd: &c, out: o})
	res := h.result(c, tick, o.reply, o.effects)
	h.effects = append(h.effects, res.effects...)
	return res
}

// Tick runs n ticks. Each calls Logic.Tick — the first after the commands sent since the last
// tick, which Send applied at its start — then takes the tick's effects and frames (checking
// them) and its state (MarshalState, for CheckDeterminism).
func (h *Harness) Tick(n int) {
	h.t.Helper()
	if n < 0 {
		h.fatalf("Tick(%d): want 0 or more", n)
	}
	for range n {
		h.tickOnce()
	}
}

// TickUntil ticks until done reports true (asked before each tick) and returns how many ticks it
// ran; the test fails if done is still false after max ticks.
func (h *Harness) TickUntil(max int, done func() bool) int {
	h.t.Helper()
	if max < 0 {
		h.fatalf("TickUntil(%d): want 0 or more", max)
	}
	for n := 0; ; n++ {
		if done() {
			return n
		}
		if n == max {
			h.fatalf("TickUntil: not done after %d ticks (last tick %d)", max, h.cur.tick)
		}
		h.tickOnce()
	}
}

func (h *Harness) tickOnce() {
	h.t.Helper()
	tick := h.next()
	o := h.runTick(h.cur, tick)
	if h.shadow != nil {
		h.compare(h.shadowDiff(tick, nil), o, h.runTick(h.shadow, tick))
	}
	frames := o.frames
	h.steps = append(h.steps, step{tick: tick, out: h.keep(o, o.state, o.frames)})
	for i, f := range frames {
		h.frames = append(h.frames, Frame{Tick: tick, Index: i, Topic: f.Topic, To: f.To, Payload: f.Payload, h: h})
	}
	for _, e := range o.effects {
		h.effects = append(h.effects, Effect{Tick: tick, Kind: e.Kind, Payload: e.Payload, h: h})
	}
	if n := h.opt.roundTripEvery; n > 0 && tick%uint64(n) == 0 {
		h.CheckRoundTrip()
	}
}

// keep records a step's state and frames whole while the harness keeps less than keepBudget,
// and their digest always.
func (h *Harness) keep(o recorded, state []byte, frames []actor.Frame) recorded {
	o.sum, o.hasSum = sha256.Sum256(state), true
	n := len(state)
	for _, f := range frames {
		n += len(f.Payload)
	}
	if h.kept+n > keepBudget {
		o.state, o.dropped = nil, true
		o.frames = framesDigest(frames)
		return o
	}
	h.kept += n
	o.state = state
	return o
}

// framesDigest stands for frames by their topics and digests (of their values re-encoded
// canonically, if msgpack: the same value in other bytes has the same digest).
func framesDigest(frames []actor.Frame) []actor.Frame {
	out := make([]actor.Frame, len(frames))
	for i, f := range frames {
		p := f.Payload
		if v, err := wire.DecodeValue(p); err == nil {
			if c, err := wire.Canonical(v); err == nil {
				p = c
			}
		}
		s := sha256.Sum256(p)
		out[i] = actor.Frame{Topic: f.Topic, To: f.To, Payload: s[:]}
	}
	return out
}

// handle applies one command to l at the start of tick, as a node does, and checks what the game
// did with it.
func (h *Harness) handle(l *life, tick uint64, c actor.Command) recorded {
	h.t.Helper()
	where := fmt.Sprintf("tick %d%s, command %s", tick, roleSuffix(l.role), describe(c))
	var joinFx []actor.Effect
	if actor.TracksPlayers(l.logic) {
		l.players.hear(c.Sender.Player) // a command says its player is there
		reply, fx, done := h.players(l, tick, c, where)
		if done {
			return recorded{reply: reply, effects: fx}
		}
		joinFx = fx // the join's, whatever becomes of the command
	}
	before := h.marshal(l, where+": before Handle")
	var res any
	var err error
	h.call(where+": Handle", func() { res, err = l.logic.Handle(tick, c) })
	reply, code := wire.ReplyFor(res, err)
	if code == "" {
		h.fatalf("%s: Handle refused it with an *actor.Rejected without a Code (%q): clients branch on the code", where, errMessage(err))
	}
	if err == nil {
		if _, encErr := wire.Canonical(res); encErr != nil {
			h.fatalf("%s: the result (%T) cannot be encoded as msgpack, a node would answer internal: %v", where, res, encErr)
		}
		if j := wire.ForClient(reply, true); bytes.Contains(j, []byte(`"code":"internal"`)) {
			var r struct {
				Error *wire.Error `json:"error"`
			}
			if json.Unmarshal(j, &r) == nil && r.Error != nil {
				h.fatalf("%s: the result (%T) cannot be sent to a JSON client, a node would answer it internal: %s", where, res, r.Error.Message)
			}
		}
	}
	var effs []actor.Effect
	if e, ok := l.logic.(actor.Emitter); ok {
		h.call(where+": TakeEffects", func() { effs = e.TakeEffects() })
	}
	h.refusals(l, where+": Handle", err == nil)
	if code == wire.CodeBadRequest {
		// A node answers it at once and drops what it did: it must have done nothing.
		if len(effs) > 0 {
			h.fatalf("%s: answered bad_request (%s) after emitting %d effect(s) (first %q): a node drops them; a malformed command must change nothing", where, errMessage(err), len(effs), effs[0].Kind)
		}
		if after := h.marshal(l, where+": after Handle"); !bytes.Equal(before, after) {
			h.fatalf("%s: answered bad_request (%s) after changing the state: a node answers it at once and never stores the change, so the state it stores later is not what the game had; a malformed command must change nothing:\n%s",
				where, errMessage(err), diffStates(before, after, "before", "after"))
		}
	}
	for _, e := range effs {
		if verr := actor.ValidEffect(e); verr != nil {
			h.fatalf("%s: Handle emitted an effect a node refuses (logs and drops): %v", where, verr)
		}
	}
	return recorded{reply: reply, effects: append(joinFx, effs...)}
}

// runTick runs Logic.Tick on l and takes what it made.
func (h *Harness) runTick(l *life, tick uint64) recorded {
	h.t.Helper()
	where := fmt.Sprintf("tick %d%s", tick, roleSuffix(l.role))
	var o recorded
	o.effects = h.presenceTick(l, tick, where) // players heard from are seen, silent ones leave
	h.call(where+": Tick", func() { l.logic.Tick(tick) })
	l.tick = tick
	o.effects = append(o.effects, h.takeEffects(l, where+": Tick")...)
	h.refusals(l, where+": Tick", true)
	if f, ok := l.logic.(actor.Framer); ok {
		h.call(where+": TakeFrames", func() { o.frames = f.TakeFrames() })
	}
	for i, f := range o.frames {
		if err := actor.ValidFrame(f); err != nil {
			h.fatalf("%s: frame %d (published by Handle or Tick) is one a node refuses (logs and drops): %v", where, i, err)
		}
	}
	o.state = h.marshal(l, where)
	return o
}

// marshal is l's MarshalState, which must work and fit in what an instance can store.
func (h *Harness) marshal(l *life, where string) []byte {
	h.t.Helper()
	var b []byte
	var err error
	h.call(where+": MarshalState", func() { b, err = l.logic.MarshalState() })
	switch {
	case err != nil:
		h.fatalf("%s: MarshalState: %v (a node stops the instance)", where, err)
	case len(b) == 0:
		h.fatalf("%s: MarshalState wrote no bytes: a node loading an instance with no state makes it again from its create command", where)
	case len(b) > store.MaxBlobBytes:
		h.fatalf("%s: MarshalState wrote %d bytes: over the %d an instance can store", where, len(b), store.MaxBlobBytes)
	}
	return b
}

// call runs the game's f, turning a panic into a failure that says where.
func (h *Harness) call(where string, f func()) {
	h.t.Helper()
	defer func() {
		if p := recover(); p != nil {
			h.fatalf("%s panicked (a node stops the instance): %v\n%s", where, p, debug.Stack())
		}
	}()
	f()
}

func (h *Harness) fatalf(format string, args ...any) {
	h.t.Helper()
	fatal(h.t, format, args...)
}

func fatal(t TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	t.Fatalf("%s", msg)
	panic("actortest: " + msg) // a TB whose Fatalf returned
}

func roleSuffix(role string) string {
	if role == "" {
		return ""
	}
	return " (" + role + ")"
}

func kindName(k actor.Kind) string {
	if k == nil {
		return "<nil kind>"
	}
	return k.Name()
}

func errMessage(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// describe names a command in failures: its type, its body as JSON and its sender.
func describe(c actor.Command) string {
	body := "(unreadable body)"
	if j, err := wire.MsgpackToJSON(c.Body); err == nil {
		body = string(j)
	}
	if len(body) > 200 {
		body = body[:200] + "…"
	}
	return c.Type + " " + body + " from " + senderString(c.Sender)
}

func senderString(s actor.Sender) string {
	switch {
	case s.Trusted && s.Player != "":
		return "a trusted sender for " + s.Player
	case s.Trusted:
		return "a trusted sender"
	case s.Name == s.Player:
		return "player " + s.Player
	}
	return fmt.Sprintf("%+v", s)
}

// Script is a harness's inputs in order — its create command, and each command with the tick it
// was applied at and each tick — as Harness.Script records them and Replay runs them again.
type Script struct {
	id     string
	create actor.Command
	steps  []step
}

// Script is what the harness was given so far.
func (h *Harness) Script() Script {
	return Script{id: h.id, create: h.create, steps: h.steps[:len(h.steps):len(h.steps)]}
}

// String lists the script: its create, one line per command, and some of the ticks.
func (s Script) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", s.id, describe(s.create))
	var ticks int
	for _, st := range s.steps {
		if st.cmd != nil {
			fmt.Fprintf(&b, "\n  tick %d: %s", st.tick, describe(*st.cmd))
			continue
		}
		if st.heartbeat != "" {
			fmt.Fprintf(&b, "\n  tick %d: heartbeat of %s", st.tick, st.heartbeat)
			continue
		}
		ticks++
		if ticks <= 3 || ticks%100 == 0 {
			fmt.Fprintf(&b, "\n  tick %d", st.tick)
		}
	}
	fmt.Fprintf(&b, "\n  (%d ticks)", ticks)
	return b.String()
}
