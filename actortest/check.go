package actortest

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/shard/wire"
)

// CheckRoundTrip checks what a node relies on when an instance moves to another node, or its
// node restarts: the next owner knows only what MarshalState wrote. MarshalState → Kind.Restore
// → MarshalState must give the same bytes (and MarshalState called twice, the same bytes too).
// The harness then goes on with the restored logic, and runs the logic that was never restored
// beside it for the rest of the script: the test fails at the first command or tick whose answer,
// effects, frames or state differ between the two — say, a setting Restore forgot, such as one
// the Kind holds and New copies into the logic.
func (h *Harness) CheckRoundTrip() {
	h.t.Helper()
	tick := h.cur.tick
	where := fmt.Sprintf("round trip after tick %d", tick)
	a := h.marshal(h.cur, where)
	if again := h.marshal(h.cur, where); !bytes.Equal(a, again) {
		h.fatalf("%s: MarshalState called twice in a row wrote different bytes:\n%s", where, diffStates(a, again, "first call", "second call"))
	}
	var logic actor.Logic
	var err error
	h.call(where+": Kind.Restore", func() { logic, err = h.kind.Restore(h.id, bytes.Clone(a)) })
	if err != nil {
		h.fatalf("%s: Kind.Restore refused what MarshalState wrote (%d bytes): %v (a node could not load the instance)", where, len(a), err)
	}
	if logic == nil {
		h.fatalf("%s: Kind.Restore returned neither a Logic nor an error", where)
	}
	restored := &life{logic: logic, tick: tick, role: "restored", players: h.cur.players.clone()}
	if b := h.marshal(restored, where+" (restored)"); !bytes.Equal(a, b) {
		h.fatalf("%s: what MarshalState writes after Kind.Restore differs from what Restore was given (%d and %d bytes):\n%s",
			where, len(a), len(b), diffStates(a, b, "before", "after Restore"))
	}
	if h.shadow == nil {
		h.shadow, h.shadowFrom = h.cur, tick
		h.shadow.role = "never restored"
	}
	h.cur = restored
}

func (h *Harness) shadowDiff(tick uint64, c *actor.Command) string {
	what := fmt.Sprintf("tick %d", tick)
	if c != nil {
		what += ", command " + describe(*c)
	}
	return fmt.Sprintf("%s: after the round trip after tick %d, the restored logic and the one never restored differ", what, h.shadowFrom)
}

// compare fails the test with what if the run (a) and the shadow (b) differ.
func (h *Harness) compare(what string, a, b recorded) {
	h.t.Helper()
	if d := differ(a, b, "restored", "never restored"); d != "" {
		h.fatalf("%s: %s", what, d)
	}
}

// CheckDeterminism runs the script so far again from scratch — the same create, and the same
// commands from the same senders at the same ticks — on a new Logic from Kind.New, and compares
// it with the run: the test fails at the first command whose answer or effects differ, or the
// first tick whose frames, effects or state (MarshalState after every tick) differ, saying what
// differs. Given the same ticks and commands in the same order, a game must end in the same
// state: no wall clock, no global randomness, no iteration over a Go map that decides anything.
func (h *Harness) CheckDeterminism() {
	h.t.Helper()
	const what = "replaying the same inputs from scratch"
	logic, res := h.newLife(h.kind, h.create, "replay")
	if res != nil {
		h.fatalf("%s: the create was refused this time: %s: %s", what, res.code, res.message)
	}
	r := &life{logic: logic, role: "replay"}
	if d := differ(h.initial, recorded{state: h.marshal(r, "after Kind.New (replay)")}, "first run", "replay"); d != "" {
		h.fatalf("%s: Kind.New made another state than the first time: %s", what, d)
	}
	for _, st := range h.steps {
		var o recorded
		where := fmt.Sprintf("tick %d", st.tick)
		if st.heartbeat != "" {
			r.players.hear(st.heartbeat)
			continue
		}
		if st.cmd != nil {
			o = h.handle(r, st.tick, *st.cmd)
			where += ", command " + describe(*st.cmd)
		} else {
			o = h.runTick(r, st.tick)
		}
		if d := differ(st.out, o, "first run", "replay"); d != "" {
			h.fatalf("%s: %s differs from the first run: %s", what, where, d)
		}
	}
}

// Replay runs script from scratch on kind — the kind that recorded it, or another version of it
// — and returns the harness where it ends, to go on from or to look at. It compares nothing
// (CheckDeterminism does): the answers may differ, the inputs are the same.
func Replay(t TB, kind actor.Kind, script Script) *Harness {
	t.Helper()
	if script.create.Type == "" {
		fatal(t, "Replay: an empty script (Harness.Script records one)")
	}
	h := &Harness{t: t, kind: kind, id: script.id, opt: options{id: script.id, creator: script.create.Sender}}
	h.create = script.create
	logic, res := h.newLife(kind, script.create, "")
	if res != nil {
		h.fatalf("Replay: the create was refused: %s: %s", res.code, res.message)
	}
	h.cur = &life{logic: logic}
	h.initial = h.keep(recorded{}, h.marshal(h.cur, "after Kind.New"), nil)
	for _, st := range script.steps {
		switch {
		case st.heartbeat != "":
			h.Heartbeat(st.heartbeat)
		case st.cmd == nil:
			h.tickOnce()
		default:
			h.apply(*st.cmd)
		}
	}
	return h
}

// differ says how b differs from a ("" if it does not), naming them la and lb.
func differ(a, b recorded, la, lb string) string {
	if !sameValue(a.reply, b.reply) {
		return "the answer:\n" + diffEncoded(a.reply, b.reply, la, lb)
	}
	if !slices.EqualFunc(a.effects, b.effects, func(x, y actor.Effect) bool { return x.Kind == y.Kind && sameValue(x.Payload, y.Payload) }) {
		return fmt.Sprintf("the effects:\n    %s (%s)\n    %s (%s)", showEffects(a.effects), la, showEffects(b.effects), lb)
	}
	fa, fb := a.frames, b.frames
	if a.dropped != b.dropped {
		if !a.dropped {
			fa = framesDigest(fa)
		}
		if !b.dropped {
			fb = framesDigest(fb)
		}
	}
	same := func(x, y actor.Frame) bool {
		if a.dropped || b.dropped {
			return x.Topic == y.Topic && x.To == y.To && bytes.Equal(x.Payload, y.Payload)
		}
		return x.Topic == y.Topic && x.To == y.To && sameValue(x.Payload, y.Payload)
	}
	if !slices.EqualFunc(fa, fb, same) {
		return fmt.Sprintf("the frames:\n    %s (%s)\n    %s (%s)", showFrames(fa, a.dropped), la, showFrames(fb, b.dropped), lb)
	}
	if a.state == nil && !a.hasSum || b.state == nil && !b.hasSum {
		return "" // a command: its state is not taken
	}
	if a.state != nil && b.state != nil {
		if !bytes.Equal(a.state, b.state) {
			return "the state:\n" + diffStates(a.state, b.state, la, lb)
		}
		return ""
	}
	if sumOf(a) != sumOf(b) {
		return fmt.Sprintf("the state (its SHA-256: the harness keeps whole states only up to %d MiB)", keepBudget>>20)
	}
	return ""
}

// sameValue: the same bytes, or the same msgpack value (an answer, a frame or an effect encoded
// from a Go map without sorted keys differs in its bytes only; a state must not).
func sameValue(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	va, ea := wire.DecodeValue(a)
	vb, eb := wire.DecodeValue(b)
	return ea == nil && eb == nil && reflect.DeepEqual(va, vb)
}

func sumOf(r recorded) [32]byte {
	if r.hasSum {
		return r.sum
	}
	return sha256.Sum256(r.state)
}

func showEffects(es []actor.Effect) string {
	if len(es) == 0 {
		return "none"
	}
	var s []string
	for _, e := range es {
		s = append(s, e.Kind+" "+showPayload(e.Payload))
	}
	return strings.Join(s, ", ")
}

func showFrames(fs []actor.Frame, digests bool) string {
	if len(fs) == 0 {
		return "none"
	}
	var s []string
	for _, f := range fs {
		p := showPayload(f.Payload)
		if digests {
			p = fmt.Sprintf("SHA-256 %x…", f.Payload[:6])
		}
		to := ""
		if f.To != "" {
			to = " to " + f.To
		}
		s = append(s, fmt.Sprintf("%q%s %s", f.Topic, to, p))
	}
	return strings.Join(s, ", ")
}

func showPayload(b []byte) string {
	v, err := wire.DecodeValue(b)
	if err != nil {
		return fmt.Sprintf("(%d bytes)", len(b))
	}
	return show(v)
}

// maxDiffs bounds the differences a failure lists.
const maxDiffs = 8

// diffStates says how two states differ: the values that differ, by path, or how their bytes do.
func diffStates(a, b []byte, la, lb string) string {
	return diffEncoded(a, b, la, lb)
}

// diffEncoded says how two msgpack encodings differ.
func diffEncoded(a, b []byte, la, lb string) string {
	va, ea := wire.DecodeValue(a)
	vb, eb := wire.DecodeValue(b)
	if ea != nil || eb != nil {
		return fmt.Sprintf("    %d bytes (%s), %d bytes (%s), first different byte at offset %d (not msgpack: %v)", len(a), la, len(b), lb, firstDiff(a, b), errors2(ea, eb))
	}
	var diffs []string
	diffValue(va, vb, "", la, lb, &diffs)
	if len(diffs) == 0 {
		return fmt.Sprintf("    the same values encoded differently (%d and %d bytes, first different byte at offset %d): the same state must be written as the same bytes — a Go map encoded without sorted keys? (msgpack.Encoder.SetSortMapKeys)", len(a), len(b), firstDiff(a, b))
	}
	return "    " + strings.Join(diffs, "\n    ")
}

func errors2(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// diffValue appends to diffs where a and b (decoded, normalized) differ.
func diffValue(a, b any, path, la, lb string, diffs *[]string) {
	if len(*diffs) >= maxDiffs {
		return
	}
	at := path
	if at == "" {
		at = "(the whole value)"
	}
	ma, oka := a.(map[string]any)
	mb, okb := b.(map[string]any)
	if oka && okb {
		keys := sortedKeys(ma)
		for _, k := range sortedKeys(mb) {
			if _, ok := ma[k]; !ok {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			p := k
			if path != "" {
				p = path + "." + k
			}
			va, ina := ma[k]
			vb, inb := mb[k]
			switch {
			case !ina:
				*diffs = append(*diffs, fmt.Sprintf("%s: missing (%s), %s (%s)", p, la, show(vb), lb))
			case !inb:
				*diffs = append(*diffs, fmt.Sprintf("%s: %s (%s), missing (%s)", p, show(va), la, lb))
			default:
				diffValue(va, vb, p, la, lb, diffs)
			}
			if len(*diffs) >= maxDiffs {
				return
			}
		}
		return
	}
	sa, oka := a.([]any)
	sb, okb := b.([]any)
	if oka && okb {
		if len(sa) != len(sb) {
			*diffs = append(*diffs, fmt.Sprintf("%s: %d items (%s), %d items (%s)", at, len(sa), la, len(sb), lb))
		}
		for i := range min(len(sa), len(sb)) {
			diffValue(sa[i], sb[i], fmt.Sprintf("%s[%d]", path, i), la, lb, diffs)
		}
		return
	}
	if !reflect.DeepEqual(a, b) {
		*diffs = append(*diffs, fmt.Sprintf("%s: %s (%s), %s (%s)", at, show(a), la, show(b), lb))
	}
}

// show prints a decoded value briefly.
func show(v any) string {
	var s string
	switch x := v.(type) {
	case string:
		s = fmt.Sprintf("%q", x)
	case []byte:
		s = fmt.Sprintf("%d bytes %x", len(x), x[:min(len(x), 16)])
	case nil:
		s = "nil"
	default:
		s = fmt.Sprintf("%v", x)
	}
	if len(s) > 120 {
		s = s[:120] + "…"
	}
	return s
}
