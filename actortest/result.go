package actortest

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/shard/wire"
)

// Result is a command's answer as a node gives it: what Handle returned, encoded for the wire and
// decoded as the Go client decodes it (every integer in an any an int64, every float a float64),
// or its refusal's code and message.
type Result struct {
	// Tick is the tick at whose start the command was applied (0: the create).
	Tick uint64
	// Command is the command's type.
	Command string

	h       *Harness // nil for a refused create: failures go to t
	t       TB
	desc    string
	ok      bool
	code    string
	message string
	value   any
	raw     []byte
	effects []Effect
}

func (h *Harness) result(c actor.Command, tick uint64, reply []byte, effs []actor.Effect) *Result {
	h.t.Helper()
	r := &Result{Tick: tick, Command: c.Type, h: h, t: h.t, desc: fmt.Sprintf("tick %d, command %s", tick, describe(c)), raw: reply}
	rep, err := wire.DecodeReply(reply, false)
	if err != nil {
		h.fatalf("%s: its answer does not decode: %v", r.desc, err)
	}
	r.ok, r.value = rep.OK, rep.Result
	if rep.Error != nil {
		r.code, r.message = rep.Error.Code, rep.Error.Message
	}
	for _, e := range effs {
		r.effects = append(r.effects, Effect{Tick: tick, Kind: e.Kind, Payload: e.Payload, Command: c.Type, h: h})
	}
	return r
}

// OK reports whether the command was applied without a refusal.
func (r *Result) OK() bool { return r.ok }

// Code is the refusal's code — bad_request, rejected, forbidden, a game's own — or "" if OK.
func (r *Result) Code() string { return r.code }

// Message is the refusal's message ("" if OK).
func (r *Result) Message() string { return r.message }

// Err is nil if OK, else the refusal as an *actor.Rejected.
func (r *Result) Err() error {
	if r.ok {
		return nil
	}
	return &actor.Rejected{Code: r.code, Message: r.message}
}

// Value is the result in Go's own types (nil if none, or refused), as client.Reply.Result gives
// it: maps are map[string]any, every integer an int64 (uint64 above math.MaxInt64), every float
// a float64.
func (r *Result) Value() any { return r.value }

// Raw is the reply as a node would send it: msgpack {"ok":true,"result":…} or
// {"ok":false,"error":{"code":…,"message":…}}.
func (r *Result) Raw() []byte { return r.raw }

// Effects are the effects Handle emitted for this command (the harness's TakeEffects has them
// too).
func (r *Result) Effects() []Effect { return slices.Clone(r.effects) }

// Decode decodes the result into out (a struct with msgpack tags, a map, an *any), as the Go
// client's Reply.Decode does, after setting *out to its zero value: a key the result leaves out
// is a zero field, even in a variable decoded into before. The test fails if the command was refused or the result does not
// decode into out.
func (r *Result) Decode(out any) *Result {
	r.t.Helper()
	if !r.ok {
		fatal(r.t, "%s: refused (%s: %s), no result to decode", r.desc, r.code, r.message)
	}
	if err := wire.Assign(r.value, reset(out)); err != nil {
		fatal(r.t, "%s: result %v does not decode into %T: %v", r.desc, r.value, out, err)
	}
	return r
}

// WantOK fails the test unless the command was applied without a refusal.
func (r *Result) WantOK() *Result {
	r.t.Helper()
	if !r.ok {
		fatal(r.t, "%s: refused (%s: %s), want OK", r.desc, r.code, r.message)
	}
	return r
}

// WantCode fails the test unless the command was refused with code ("" or "ok": applied).
func (r *Result) WantCode(code string) *Result {
	r.t.Helper()
	if code == "ok" {
		code = ""
	}
	switch {
	case code == "" && !r.ok:
		fatal(r.t, "%s: refused (%s: %s), want OK", r.desc, r.code, r.message)
	case code != "" && r.ok:
		fatal(r.t, "%s: applied (result %v), want refused %s", r.desc, r.value, code)
	case code != r.code:
		fatal(r.t, "%s: refused %s (%s), want %s", r.desc, r.code, r.message, code)
	}
	return r
}

// WantResult fails the test unless the command was applied and its result matches want (a
// value, a map or a struct with msgpack tags, compared as the wire carries them: 3, int8(3) and
// int64(3) are alike). A map in want, at any depth, need only hold the keys it names: a move's
// map[string]any{"x": 2} matches a result {"x":2,"y":3,"hp":100}; a struct names all its fields.
func (r *Result) WantResult(want any) *Result {
	r.t.Helper()
	r.WantOK()
	b, err := wire.Canonical(want)
	if err != nil {
		fatal(r.t, "WantResult(%T): not encodable as msgpack: %v", want, err)
	}
	w, err := wire.DecodeValue(b)
	if err != nil {
		fatal(r.t, "WantResult(%T): %v", want, err)
	}
	var diffs []string
	match(w, r.value, "result", &diffs)
	if len(diffs) > 0 {
		fatal(r.t, "%s: result %v does not match: %s", r.desc, r.value, strings.Join(diffs, "; "))
	}
	return r
}

// String is the command and its answer, for logs.
func (r *Result) String() string {
	if r.ok {
		return fmt.Sprintf("%s: ok %v", r.desc, r.value)
	}
	return fmt.Sprintf("%s: %s: %s", r.desc, r.code, r.message)
}

// match appends to diffs where got does not have what want has.
func match(want, got any, path string, diffs *[]string) {
	if len(*diffs) >= maxDiffs {
		return
	}
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			*diffs = append(*diffs, fmt.Sprintf("%s: %s, want a map", path, show(got)))
			return
		}
		for _, k := range sortedKeys(w) {
			gv, ok := g[k]
			if !ok {
				*diffs = append(*diffs, fmt.Sprintf("%s.%s: missing, want %s", path, k, show(w[k])))
				continue
			}
			match(w[k], gv, path+"."+k, diffs)
		}
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			*diffs = append(*diffs, fmt.Sprintf("%s: %s, want %s", path, show(got), show(want)))
			return
		}
		for i := range w {
			match(w[i], g[i], fmt.Sprintf("%s[%d]", path, i), diffs)
		}
	default:
		if !reflect.DeepEqual(want, got) {
			*diffs = append(*diffs, fmt.Sprintf("%s: %s, want %s", path, show(got), show(want)))
		}
	}
}

func sortedKeys(m map[string]any) []string {
	k := make([]string, 0, len(m))
	for s := range m {
		k = append(k, s)
	}
	slices.Sort(k)
	return k
}

// Frame is a frame the game published, as its watchers would get it.
type Frame struct {
	Tick  uint64 // the tick after which the node publishes it (Handle's frames go with their tick's)
	Index int    // its number among the tick's frames: 0, 1, …
	Topic string // "" for the instance's main subject
	// To is the one player it is for (actor.Frames.PublishTo); "" for every watcher.
	To string
	// Payload is the game's bytes.
	Payload []byte
	h       *Harness
}

// Decode decodes the payload (msgpack) into out, zeroed first, as the Go client's Decode does;
// the test fails if it does not decode.
func (f Frame) Decode(out any) {
	f.h.t.Helper()
	if err := wire.Unmarshal(f.Payload, reset(out)); err != nil {
		f.h.fatalf("frame %d of tick %d (topic %q): does not decode into %T: %v", f.Index, f.Tick, f.Topic, out, err)
	}
}

// Effect is an effect the game emitted, as its consumers would get it.
type Effect struct {
	Tick    uint64 // the tick at which it was emitted
	Kind    string
	Payload []byte
	// Command is the type of the command whose Handle emitted it ("" for Tick).
	Command string
	h       *Harness
}

// Decode decodes the payload (msgpack) into out, zeroed first; the test fails if it does not
// decode.
func (e Effect) Decode(out any) {
	e.h.t.Helper()
	if err := wire.Unmarshal(e.Payload, reset(out)); err != nil {
		e.h.fatalf("effect %s of tick %d: does not decode into %T: %v", e.Kind, e.Tick, out, err)
	}
}

// TakeFrames returns the frames published since the last call, oldest first, and forgets them.
// With topics, it returns only those on these topics ("" names the main subject) and forgets the
// others too. A node publishes a tick's frames after the tick, those its commands' Handle
// published included: a command's frames are here once Tick ran.
func (h *Harness) TakeFrames(topics ...string) []Frame {
	out := h.frames
	h.frames = nil
	if len(topics) == 0 {
		return out
	}
	return slices.DeleteFunc(out, func(f Frame) bool { return !slices.Contains(topics, f.Topic) })
}

// TakeEffects returns the effects emitted since the last call, oldest first, and forgets them.
// With kinds, it returns only those of these kinds and forgets the others too.
func (h *Harness) TakeEffects(kinds ...string) []Effect {
	out := h.effects
	h.effects = nil
	if len(kinds) == 0 {
		return out
	}
	return slices.DeleteFunc(out, func(e Effect) bool { return !slices.Contains(kinds, e.Kind) })
}

// State decodes the instance's state — what MarshalState writes now — into out (a struct with
// msgpack tags, a map, an *any), zeroed first: a field the state leaves out (omitempty) is zero,
// even in a variable decoded into before.
func (h *Harness) State(out any) {
	h.t.Helper()
	b := h.marshal(h.cur, fmt.Sprintf("after tick %d: State", h.cur.tick))
	if err := wire.Unmarshal(b, reset(out)); err != nil {
		h.fatalf("after tick %d: the state (%d bytes) does not decode into %T: %v", h.cur.tick, len(b), out, err)
	}
}

// StateBytes is what MarshalState writes now.
func (h *Harness) StateBytes() []byte {
	h.t.Helper()
	return h.marshal(h.cur, fmt.Sprintf("after tick %d: StateBytes", h.cur.tick))
}

// reset sets what out points at to its zero value, and returns out.
func reset(out any) any {
	if v := reflect.ValueOf(out); v.Kind() == reflect.Pointer && !v.IsNil() {
		v.Elem().SetZero()
	}
	return out
}
