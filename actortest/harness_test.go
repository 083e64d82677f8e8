package actortest_test

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/actortest"
)

// counter is a small game for these tests: a sum players add to, with bugs to turn on.
type counter struct {
	Bug string // "global" (nondeterministic), "forget" (Restore loses Every), "badreq" (bad_request after a change), "lossy" (Restore drops Log)
	// Every, if not 0, publishes a frame on topic "sum" every this many ticks (not in the state:
	// New and Restore take it from the kind, as the demo dungeon does).
	Every uint64
}

var global int // what a nondeterministic game would read

func (counter) Name() string { return "counter" }

func (k counter) New(id string, create actor.Command) (actor.Logic, error) {
	var args struct {
		Start int `msgpack:"start"`
	}
	if err := create.Decode(&args); err != nil {
		return nil, err
	}
	if args.Start < 0 {
		return nil, &actor.Rejected{Code: "bad_request", Message: "start must not be negative"}
	}
	return &sum{N: args.Start, bug: k.Bug, every: k.Every}, nil
}

func (k counter) Restore(id string, b []byte) (actor.Logic, error) {
	s := &sum{bug: k.Bug, every: k.Every}
	if k.Bug == "forget" {
		s.every = 0
	}
	if err := msgpack.Unmarshal(b, s); err != nil {
		return nil, err
	}
	if k.Bug == "lossy" {
		s.Log = nil
	}
	return s, nil
}

type sum struct {
	N     int      `msgpack:"n"`
	Ticks uint64   `msgpack:"ticks"`
	Log   []string `msgpack:"log"`

	actor.Frames
	actor.Effects
	bug   string
	every uint64
}

func (s *sum) Tick(tick uint64) {
	s.Ticks = tick
	if s.bug == "global" {
		global++
		if global%7 == 0 {
			s.N++
		}
	}
	if s.every > 0 && tick%s.every == 0 {
		b, _ := msgpack.Marshal(map[string]any{"n": s.N, "tick": tick})
		s.Publish("sum", b)
	}
}

type addArgs struct {
	Player string `msgpack:"player"`
	N      int    `msgpack:"n"`
	Kind   string `msgpack:"kind"`
	Topic  string `msgpack:"topic"`
}

func (s *sum) Handle(tick uint64, cmd actor.Command) (any, error) {
	var a addArgs
	if err := cmd.Decode(&a); err != nil {
		return nil, err
	}
	switch cmd.Type {
	case "add":
		if !cmd.Sender.ActsFor(a.Player) {
			return nil, &actor.Rejected{Code: "forbidden", Message: "not you"}
		}
		if a.N == 0 {
			if s.bug == "badreq" {
				s.N++
			}
			return nil, &actor.Rejected{Code: "bad_request", Message: "n must not be 0"}
		}
		if a.N < 0 {
			return nil, actor.Reject("no taking away")
		}
		s.N += a.N
		s.Log = append(s.Log, a.Player)
		return map[string]any{"n": s.N, "by": a.Player, "tick": tick}, nil
	case "boom":
		var m map[string]int
		m["x"] = 1 // a nil map: panics
	case "emit":
		s.Emit(a.Kind, []byte{0x80})
		if a.N == 0 {
			return nil, &actor.Rejected{Code: "bad_request", Message: "n must not be 0"}
		}
		return "emitted", nil
	case "frame":
		s.Publish(a.Topic, []byte{0xa1, 'x'})
		return nil, nil
	case "chan":
		return make(chan int), nil
	case "plain":
		return nil, errors.New("a plain error")
	case "nocode":
		return nil, &actor.Rejected{Message: "why"}
	}
	return nil, &actor.Rejected{Code: "bad_request", Message: "unknown " + cmd.Type}
}

func (s *sum) MarshalState() ([]byte, error) { return msgpack.Marshal(s) }

// fakeT records the first failure and stops its goroutine, as testing.T does.
type fakeT struct{ msg string }

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// failure runs f with a fakeT and returns its failure ("" if none).
func failure(f func(t actortest.TB)) string {
	ft := &fakeT{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(ft)
	}()
	<-done
	return ft.msg
}

func wantFailure(t *testing.T, msg string, parts ...string) {
	t.Helper()
	if msg == "" {
		t.Fatalf("no failure, want one saying %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(msg, p) {
			t.Fatalf("failure %q does not say %q", msg, p)
		}
	}
}

type add struct {
	Type   string `msgpack:"type"`
	Player string `msgpack:"player"`
	N      int    `msgpack:"n"`
}

func TestCommandsAnswersAndState(t *testing.T) {
	h := actortest.New(t, counter{}, actortest.Create(map[string]any{"start": 5}))
	var got struct {
		N    int    `msgpack:"n"`
		By   string `msgpack:"by"`
		Tick uint64 `msgpack:"tick"`
	}
	h.Send(add{Type: "add", Player: "ann", N: 3}).Decode(&got)
	if got.N != 8 || got.By != "ann" || got.Tick != 1 {
		t.Fatalf("add answered %+v, want n 8 by ann at tick 1", got)
	}
	res := h.SendAs(actortest.Player("bob"), map[string]any{"type": "add", "player": "bob", "n": int8(2)})
	res.WantOK().WantResult(map[string]any{"n": 10, "by": "bob"})
	if v := res.Value().(map[string]any)["n"]; v != int64(10) {
		t.Fatalf("Value's n is %T %v, want int64 10", v, v)
	}
	m := map[string]any{"stale": true}
	if res.Decode(&m); m["stale"] != nil || m["n"] != int64(10) {
		t.Fatalf("Decode into a used map: %v", m)
	}
	if c := h.SendAs(actortest.Player("bob"), add{Type: "add", Player: "ann", N: 1}).WantCode("forbidden").Code(); c != "forbidden" {
		t.Fatal(c)
	}
	h.SendAs(actortest.TrustedFor("cy"), add{Type: "add", Player: "cy", N: 1}).WantOK()
	h.SendAs(actortest.TrustedFor("cy"), add{Type: "add", Player: "ann", N: 1}).WantCode("forbidden")
	h.Send(add{Type: "add", Player: "ann", N: -1}).WantCode("rejected")
	h.Send(add{Type: "add", Player: "ann"}).WantCode("bad_request")
	if r := h.Send(map[string]any{"type": "plain"}); r.Code() != "rejected" || r.Message() != "a plain error" || r.Err() == nil {
		t.Fatalf("a plain error answered %v", r)
	}
	// What a node answers without the game.
	h.Send(map[string]any{"player": "ann"}).WantCode("bad_request")
	h.Send(map[string]any{"type": "create", "kind": "counter"}).WantCode("already_exists")
	h.Send(map[string]any{"type": "add", "player": strings.Repeat("x", 20<<10), "n": 1}).WantCode("too_large")
	if h.LastTick() != 0 {
		t.Fatalf("LastTick %d before any tick", h.LastTick())
	}
	h.Tick(3)
	var st struct {
		N     int      `msgpack:"n"`
		Ticks uint64   `msgpack:"ticks"`
		Log   []string `msgpack:"log"`
	}
	h.State(&st)
	if st.N != 11 || st.Ticks != 3 || strings.Join(st.Log, ",") != "ann,bob,cy" || h.LastTick() != 3 {
		t.Fatalf("state %+v at tick %d", st, h.LastTick())
	}
	if h.Logic().(*sum).N != 11 {
		t.Fatal("Logic is not the running logic")
	}
	n := h.TickUntil(100, func() bool { return h.Logic().(*sum).Ticks >= 10 })
	if n != 7 || h.LastTick() != 10 {
		t.Fatalf("TickUntil ran %d ticks, to %d", n, h.LastTick())
	}
	h.CheckRoundTrip()
	h.Send(add{Type: "add", Player: "ann", N: 1}).WantOK()
	h.Tick(5)
	h.CheckDeterminism()

	// The same script on a new harness: the same end.
	r := actortest.Replay(t, counter{}, h.Script())
	var st2 struct {
		N int `msgpack:"n"`
	}
	r.State(&st2)
	if st2.N != 12 || r.LastTick() != 15 {
		t.Fatalf("replay ended at n %d tick %d", st2.N, r.LastTick())
	}
	if s := h.Script().String(); !strings.Contains(s, `tick 11: add {"n":1,"player":"ann","type":"add"} from a trusted sender`) {
		t.Fatalf("script:\n%s", s)
	}
}

func TestAssertionsFail(t *testing.T) {
	wantFailure(t, failure(func(tb actortest.TB) {
		actortest.New(tb, counter{}).Send(add{Type: "add", Player: "ann", N: 1}).WantResult(map[string]any{"n": 2, "by": "bob"})
	}), "tick 1, command add", "result.by: \"ann\", want \"bob\"", "result.n: 1, want 2")
	wantFailure(t, failure(func(tb actortest.TB) {
		actortest.New(tb, counter{}).Send(add{Type: "add", Player: "ann", N: -1}).WantOK()
	}), "refused (rejected: no taking away), want OK")
	wantFailure(t, failure(func(tb actortest.TB) {
		actortest.New(tb, counter{}).Send(add{Type: "add", Player: "ann", N: 1}).WantCode("rejected")
	}), "applied", "want refused rejected")
	wantFailure(t, failure(func(tb actortest.TB) {
		var out struct{}
		actortest.New(tb, counter{}).Send(add{Type: "add", Player: "ann", N: -1}).Decode(&out)
	}), "no result to decode")
	wantFailure(t, failure(func(tb actortest.TB) {
		actortest.New(tb, counter{}).TickUntil(3, func() bool { return false })
	}), "not done after 3 ticks")
}

func TestCreate(t *testing.T) {
	h, res := actortest.TryNew(t, counter{}, actortest.Create(struct {
		Start int `msgpack:"start"`
	}{-1}))
	if h != nil || res.Code() != "bad_request" || res.Message() != "start must not be negative" {
		t.Fatalf("a negative start: %v", res)
	}
	h, res = actortest.TryNew(t, counter{}, actortest.CreatedBy(actortest.Player("ann")))
	if h != nil || res.Code() != "forbidden" {
		t.Fatalf("a player created a counter, which has no CreateAuthorizer: %v", res)
	}
	h, res = actortest.TryNew(t, counter{}, actortest.ID("c-9"))
	res.WantResult(map[string]any{"created": "c-9", "kind": "counter"})
	if h.ID() != "c-9" {
		t.Fatal(h.ID())
	}
	wantFailure(t, failure(func(tb actortest.TB) {
		actortest.New(tb, counter{}, actortest.Create(map[string]any{"start": -1}))
	}), "create counter: refused: bad_request: start must not be negative")
	wantFailure(t, failure(func(tb actortest.TB) { actortest.New(tb, counter{}, actortest.ID("a.b")) }), "only A-Z a-z 0-9 _ - allowed")
}

// Frames come out after the tick that made them, by topic; effects after each Handle.
func TestFramesAndEffects(t *testing.T) {
	h := actortest.New(t, counter{Every: 2})
	h.Send(map[string]any{"type": "frame", "topic": "hud-ann"}).WantOK()
	if f := h.TakeFrames(); len(f) != 0 {
		t.Fatalf("frames before the tick: %v", f)
	}
	h.Tick(2)
	fs := h.TakeFrames()
	if len(fs) != 2 || fs[0].Topic != "hud-ann" || fs[0].Tick != 1 || fs[1].Topic != "sum" || fs[1].Tick != 2 || fs[1].Index != 0 {
		t.Fatalf("frames: %+v", fs)
	}
	var f struct {
		N    int    `msgpack:"n"`
		Tick uint64 `msgpack:"tick"`
	}
	fs[1].Decode(&f)
	if f.Tick != 2 {
		t.Fatalf("frame %+v", f)
	}
	h.Tick(4)
	if fs := h.TakeFrames("sum"); len(fs) != 2 || fs[1].Tick != 6 {
		t.Fatalf("sum frames: %+v", fs)
	}
	if fs := h.TakeFrames(); len(fs) != 0 {
		t.Fatalf("TakeFrames took them: %+v", fs)
	}
	res := h.Send(map[string]any{"type": "emit", "kind": "gold", "n": 1})
	if e := res.Effects(); len(e) != 1 || e[0].Kind != "gold" || e[0].Command != "emit" || e[0].Tick != 7 {
		t.Fatalf("the result's effects: %+v", e)
	}
	h.Send(map[string]any{"type": "emit", "kind": "xp", "n": 1})
	if e := h.TakeEffects("xp"); len(e) != 1 || e[0].Kind != "xp" {
		t.Fatalf("xp effects: %+v", e)
	}
	if e := h.TakeEffects(); len(e) != 0 {
		t.Fatalf("TakeEffects took them: %+v", e)
	}
	var m map[string]any
	res.Effects()[0].Decode(&m)
	h.CheckDeterminism()
}

// The game's mistakes fail the test, naming the tick and the command.
func TestGameMistakesFail(t *testing.T) {
	for _, c := range []struct {
		name  string
		kind  counter
		run   func(h *actortest.Harness)
		parts []string
	}{
		{"panic in Handle", counter{}, func(h *actortest.Harness) { h.Tick(2); h.Send(map[string]any{"type": "boom"}) },
			[]string{`tick 3, command boom {"type":"boom"} from a trusted sender: Handle panicked`, "assignment to entry in nil map", "harness_test.go"}},
		{"bad effect kind", counter{}, func(h *actortest.Harness) { h.Send(map[string]any{"type": "emit", "kind": "no spaces", "n": 1}) },
			[]string{"tick 1, command emit", "Emit refused an effect", `kind "no spaces"`}},
		{"effect with bad_request", counter{}, func(h *actortest.Harness) { h.Send(map[string]any{"type": "emit", "kind": "gold"}) },
			[]string{"tick 1, command emit", "answered bad_request (bad_request: n must not be 0) after emitting 1 effect(s)"}},
		{"state changed with bad_request", counter{Bug: "badreq"}, func(h *actortest.Harness) { h.Tick(4); h.Send(add{Type: "add", Player: "ann"}) },
			[]string{"tick 5, command add", "after changing the state", "n: 0 (before), 1 (after)"}},
		{"bad frame topic", counter{}, func(h *actortest.Harness) { h.Send(map[string]any{"type": "frame", "topic": "a.b"}); h.Tick(1) },
			[]string{"tick 1, command frame", "Publish refused a frame", `topic "a.b"`}},
		{"unencodable result", counter{}, func(h *actortest.Harness) { h.Send(map[string]any{"type": "chan"}) },
			[]string{"tick 1, command chan", "cannot be encoded as msgpack"}},
		{"refusal without a code", counter{}, func(h *actortest.Harness) { h.Send(map[string]any{"type": "nocode"}) },
			[]string{"tick 1, command nocode", "without a Code"}},
		{"end", counter{}, func(h *actortest.Harness) { h.Send(map[string]any{"type": "end"}) },
			[]string{"end is tickfence's command"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			wantFailure(t, failure(func(tb actortest.TB) { c.run(actortest.New(tb, c.kind)) }), c.parts...)
		})
	}
}

// A nondeterministic game fails CheckDeterminism at the first tick whose state differs.
func TestNondeterminismFound(t *testing.T) {
	global = 0
	msg := failure(func(tb actortest.TB) {
		h := actortest.New(tb, counter{Bug: "global"})
		h.Tick(10) // global reaches 7 at tick 7: n becomes 1
		h.CheckDeterminism()
	})
	// The replay's ticks see global 11..20: 14 at its tick 4.
	wantFailure(t, msg, "replaying the same inputs from scratch: tick 4 differs from the first run: the state:", "n: 0 (first run), 1 (replay)")
}

// What Restore loses fails CheckRoundTrip, and a setting it forgets fails at the first tick that
// behaves differently.
func TestRoundTripFailures(t *testing.T) {
	wantFailure(t, failure(func(tb actortest.TB) {
		h := actortest.New(tb, counter{Bug: "lossy"})
		h.Send(add{Type: "add", Player: "ann", N: 1})
		h.Tick(1)
		h.CheckRoundTrip()
	}), "round trip after tick 1: what MarshalState writes after Kind.Restore differs", "log: [ann] (before), nil (after Restore)")

	wantFailure(t, failure(func(tb actortest.TB) {
		h := actortest.New(tb, counter{Bug: "forget", Every: 5})
		h.Tick(2)
		h.CheckRoundTrip() // the same bytes: Every is not in the state
		h.Tick(10)
	}), "tick 5: after the round trip after tick 2, the restored logic and the one never restored differ: the frames:", `none (restored)`, `"sum" map[n:0 tick:5] (never restored)`)

	// RoundTripEvery finds it without a call.
	wantFailure(t, failure(func(tb actortest.TB) {
		actortest.New(tb, counter{Bug: "forget", Every: 5}, actortest.RoundTripEvery(1)).Tick(10)
	}), "tick 5: after the round trip after tick 1")

	h := actortest.New(t, counter{Every: 3}, actortest.RoundTripEvery(2))
	h.Send(add{Type: "add", Player: "ann", N: 1}).WantOK()
	h.Tick(9)
	h.CheckDeterminism()
}
