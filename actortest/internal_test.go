package actortest

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/tickfence/tickfence/actor"
)

// flaky is a game whose state and frames go wrong on the 2nd life it is given (a package
// variable: what a nondeterministic game reads).
type flaky struct{}

var (
	lives    int
	frameOfN bool // frames show n (else they are all alike)
)

func (flaky) Name() string { return "flaky" }
func (flaky) New(string, actor.Command) (actor.Logic, error) {
	lives++
	return &flakyLogic{life: lives}, nil
}
func (flaky) Restore(string, []byte) (actor.Logic, error) { panic("not used") }

type flakyLogic struct {
	actor.Frames
	life, n int
}

func (f *flakyLogic) Tick(tick uint64) {
	f.n++
	if f.life == 2 && tick == 40 {
		f.n += 100
	}
	if frameOfN {
		f.Publish("", []byte{0x81, 0xa1, 'n', byte(f.n & 0x7f)})
	} else {
		f.Publish("", []byte{0xc0})
	}
}
func (f *flakyLogic) Handle(uint64, actor.Command) (any, error) { return nil, nil }
func (f *flakyLogic) MarshalState() ([]byte, error) {
	return []byte{0x81, 0xa1, 'n', 0xcd, byte(f.n >> 8), byte(f.n)}, nil
}

type recT struct{ msg string }

func (r *recT) Helper() {}
func (r *recT) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func run(f func(TB)) string {
	r := &recT{}
	done := make(chan struct{})
	go func() { defer close(done); f(r) }()
	<-done
	return r.msg
}

// Past the budget the harness keeps digests: CheckDeterminism still finds the first tick that
// differs, and says it cannot show how.
func TestDigestsPastTheBudget(t *testing.T) {
	defer func(b int) { keepBudget = b }(keepBudget)
	for _, c := range []struct {
		budget int
		frames bool
		want   string
	}{
		{1 << 20, true, "tick 40 differs from the first run: the frames:"},
		{100, true, "tick 40 differs from the first run: the frames:"},
		{1 << 20, false, "tick 40 differs from the first run: the state:\n    n: 40 (first run), 140 (replay)"},
		{100, false, "tick 40 differs from the first run: the state (its SHA-256: the harness keeps whole states only up to 0 MiB)"},
	} {
		keepBudget, lives, frameOfN = c.budget, 0, c.frames
		msg := run(func(tb TB) {
			h := New(tb, flaky{})
			h.Tick(50)
			h.CheckDeterminism()
		})
		if !strings.Contains(msg, c.want) {
			t.Fatalf("budget %d: %q, want %q", c.budget, msg, c.want)
		}
	}
}

func TestDiffs(t *testing.T) {
	// Same values, other bytes: a map encoded in another order.
	a := []byte{0x82, 0xa1, 'a', 0x01, 0xa1, 'b', 0x02}
	b := []byte{0x82, 0xa1, 'b', 0x02, 0xa1, 'a', 0x01}
	if d := diffStates(a, b, "x", "y"); !strings.Contains(d, "the same values encoded differently") {
		t.Fatal(d)
	}
	if d := diffStates(a, []byte{0x81, 0xa1, 'a', 0x02}, "x", "y"); !strings.Contains(d, "a: 1 (x), 2 (y)") || !strings.Contains(d, "b: 2 (x), missing (y)") {
		t.Fatal(d)
	}
	if d := diffStates([]byte{0xc1}, a, "x", "y"); !strings.Contains(d, "not msgpack") {
		t.Fatal(d)
	}
	if d := diffStates([]byte{0x92, 1, 2}, []byte{0x93, 1, 3, 4}, "x", "y"); !strings.Contains(d, "(the whole value): 2 items (x), 3 items (y)") || !strings.Contains(d, "[1]: 2 (x), 3 (y)") {
		t.Fatal(d)
	}
}
