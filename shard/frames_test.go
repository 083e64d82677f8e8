package shard_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/shard"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/memstore"
)

// shower is a kind whose instances publish a frame every tick (its tick number, on the main
// subject) and, on command, a frame that breaks a limit.
type shower struct{}

func (shower) Name() string { return "shower" }
func (shower) New(string, actor.Command) (actor.Logic, error) {
	return &showerState{}, nil
}
func (shower) Restore(_ string, b []byte) (actor.Logic, error) {
	s := &showerState{}
	return s, msgpack.Unmarshal(b, s)
}

type showerState struct {
	N    uint64 `msgpack:"n"`
	Blob []byte `msgpack:"blob,omitempty"` // "grow": a state too large to store
	actor.Frames
}

func (s *showerState) Tick(tick uint64) {
	s.N = tick
	s.Publish("", []byte(fmt.Sprint(tick)))
}

func (s *showerState) Handle(_ uint64, c actor.Command) (any, error) {
	var err error
	switch c.Type {
	case "huge":
		err = s.Publish("", make([]byte, actor.MaxFrameBytes+1))
	case "badtopic":
		err = s.Publish("a.b", []byte("x"))
	case "topic":
		err = s.Publish("hp", []byte("on a topic"))
	case "grow":
		s.Blob = make([]byte, store.MaxBlobBytes+1)
	}
	if err != nil {
		return nil, &actor.Rejected{Code: wire.CodeBadRequest, Message: err.Error()}
	}
	return "ok", nil
}

func (s *showerState) MarshalState() ([]byte, error) { return msgpack.Marshal(s) }

// collect is a FramePublisher that keeps what it is given.
type collect struct {
	mu     sync.Mutex
	frames []shard.Frame
}

func (c *collect) Publish(f shard.Frame) {
	c.mu.Lock()
	c.frames = append(c.frames, f)
	c.mu.Unlock()
}

func (c *collect) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.frames)
}

func (c *collect) take() []shard.Frame {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.frames
	c.frames = nil
	return out
}

// TestFramesLeaveStampedAndLimitsHold: a Framer's frames are handed to the publisher after each
// tick, stamped with the instance's grant and tick; a frame over the size limit or with a topic
// that is not one subject token is refused whole and counted, and the instance goes on.
func TestFramesLeaveStampedAndLimitsHold(t *testing.T) {
	pub := &collect{}
	n := newNode(t, memstore.New(), "n1", nodeOpt{frames: func(prometheus.Registerer) shard.FramePublisher { return pub }})
	const s = 4
	g := n.grant(s)
	id := idIn(s, 1)
	mustOK(t, n.send(id, "c1", map[string]any{"type": "create", "kind": "shower"}), "create")
	waitFor(t, "frames of a few ticks", func() bool { return pub.count() >= 5 })
	frames := pub.take()
	for i, f := range frames {
		if f.Shard != s || f.Instance != id || f.Epoch != g.Epoch || f.Token != g.Token || f.Topic != "" {
			t.Fatalf("frame %+v: want shard %d, instance %s, epoch %d, token %d", f, s, id, g.Epoch, g.Token)
		}
		if string(f.Payload) != fmt.Sprint(f.Tick) {
			t.Fatalf("frame of tick %d carries %q, want the tick its Tick made it in", f.Tick, f.Payload)
		}
		if i > 0 && f.Tick != frames[i-1].Tick+1 {
			t.Fatalf("frames of ticks %d then %d: want one per tick, in order", frames[i-1].Tick, f.Tick)
		}
	}
	mustOK(t, n.send(id, "t1", map[string]any{"type": "topic"}), "topic")
	// Refused at the call: the game sees Publish's error (here it refuses the command with it).
	r := n.send(id, "h1", map[string]any{"type": "huge"})
	wantCode(t, r, wire.CodeBadRequest, "huge")
	if !strings.Contains(r.Error.Message, "invalid frame") {
		t.Fatalf("huge: %q", r.Error.Message)
	}
	wantCode(t, n.send(id, "b1", map[string]any{"type": "badtopic"}), wire.CodeBadRequest, "badtopic")
	waitFor(t, "two frames refused", func() bool { return testutil.ToFloat64(n.metrics.FramesRefused) == 2 })
	topics := 0
	for _, f := range pub.take() {
		if len(f.Payload) > actor.MaxFrameBytes || strings.Contains(f.Topic, ".") {
			t.Fatalf("a frame over the limits was published: topic %q, %d bytes", f.Topic, len(f.Payload))
		}
		if f.Topic == "hp" {
			topics++
		}
	}
	if topics != 1 {
		t.Fatalf("frames on topic hp: %d, want 1", topics)
	}
	waitFor(t, "ticks go on after refused frames", func() bool { return len(pub.take()) > 0 })
}

// TestZombiesFramesDieAtTheWatcher: node A still runs an instance after the shard was granted to
// B (A has not learned it: a zombie). Both publish frames on the same subject over real NATS; a
// watcher shows A's only until B's first frame, and from then on only B's.
func TestZombiesFramesDieAtTheWatcher(t *testing.T) {
	var jet backend
	for _, b := range backends(t) {
		if b.nc != nil {
			jet = b
		}
	}
	st := jet.open(t)
	nc := jet.nc(t)
	pubFor := func(reg prometheus.Registerer) shard.FramePublisher {
		p := natscmd.NewFramePublisher(jet.nc(t), 0, reg)
		t.Cleanup(p.Close)
		return p
	}
	a := newNode(t, st, "a", nodeOpt{frames: pubFor})
	b := newNode(t, jet.open(t), "b", nodeOpt{frames: pubFor})
	const s = 2
	ga := a.grant(s)
	id := idIn(s, 3)
	mustOK(t, a.send(id, "c1", map[string]any{"type": "create", "kind": "shower"}), "create")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := natscmd.NewClient(nc, testShards).Watch(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	first := <-w.C
	if first.Token != ga.Token {
		t.Fatalf("first frame under token %d, want A's %d", first.Token, ga.Token)
	}
	gb := b.grant(s) // A is not told: it keeps ticking and publishing under its old token
	if gb.Token <= ga.Token {
		t.Fatalf("B's token %d not above A's %d", gb.Token, ga.Token)
	}
	var last natscmd.Frame
	fromB := 0
	deadline := time.After(20 * time.Second)
	for fromB < 20 {
		select {
		case f := <-w.C:
			if last.Token == gb.Token && f.Token != gb.Token {
				t.Fatalf("a frame under token %d reached the watcher after B's (token %d)", f.Token, gb.Token)
			}
			if f.Token == last.Token && f.Tick <= last.Tick {
				t.Fatalf("tick %d shown after tick %d under the same token", f.Tick, last.Tick)
			}
			if f.Token == gb.Token {
				fromB++
			}
			last = f
		case <-deadline:
			t.Fatalf("only %d frames of B in 20 s", fromB)
		}
	}
	if ga.Token == last.Token || a.engine.Ticks() == 0 {
		t.Fatal("the zombie did not run")
	}
	waitFor(t, "the zombie's frames dropped by the rule", func() bool { return w.Stale() > 0 })
}
