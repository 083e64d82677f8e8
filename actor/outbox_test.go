package actor_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/tickfence/tickfence/actor"
)

// Issue 35: a bad effect or frame fails loudly where it is made. Emit and Publish return an
// error for one that breaks the limits and queue nothing (the node never sees it, so it can
// never be dropped behind the game's back); the refusals stay countable for the node.
func TestEmitRefusesABadEffectAtTheCall(t *testing.T) {
	var e actor.Effects
	for _, bad := range []actor.Effect{
		{Kind: "loot drop", Payload: []byte("x")},
		{Kind: "", Payload: []byte("x")},
		{Kind: "a.b", Payload: []byte("x")},
		{Kind: strings.Repeat("k", 33), Payload: nil},
		{Kind: "loot", Payload: make([]byte, actor.MaxEffectBytes+1)},
	} {
		err := e.Emit(bad.Kind, bad.Payload)
		if err == nil || !errors.Is(err, actor.ErrInvalidEffect) {
			t.Fatalf("Emit(%q, %d bytes) = %v, want an error wrapping ErrInvalidEffect", bad.Kind, len(bad.Payload), err)
		}
	}
	if err := e.Emit("loot", []byte("ok")); err != nil {
		t.Fatalf("a good effect: %v", err)
	}
	if got := e.TakeEffects(); len(got) != 1 || got[0].Kind != "loot" {
		t.Fatalf("queued %+v, want only the good effect", got)
	}
	if got := e.TakeRefusedEffects(); len(got) != 5 {
		t.Fatalf("refusals kept for the node: %d, want 5", len(got))
	}
	if got := e.TakeRefusedEffects(); len(got) != 0 {
		t.Fatalf("refusals taken twice: %d", len(got))
	}
}

func TestPublishRefusesABadFrameAtTheCall(t *testing.T) {
	var f actor.Frames
	for _, bad := range []actor.Frame{
		{Topic: "a.b", Payload: []byte("x")},
		{Topic: "hp bar", Payload: []byte("x")},
		{Topic: "", Payload: make([]byte, actor.MaxFrameBytes+1)},
	} {
		err := f.Publish(bad.Topic, bad.Payload)
		if err == nil || !errors.Is(err, actor.ErrInvalidFrame) {
			t.Fatalf("Publish(%q, %d bytes) = %v, want an error wrapping ErrInvalidFrame", bad.Topic, len(bad.Payload), err)
		}
	}
	if err := f.Publish("", []byte("ok")); err != nil {
		t.Fatalf("a good frame: %v", err)
	}
	if err := f.Publish("hp", make([]byte, actor.MaxFrameBytes)); err != nil {
		t.Fatalf("a frame at the limit: %v", err)
	}
	if got := f.TakeFrames(); len(got) != 2 {
		t.Fatalf("queued %d frames, want the 2 good ones", len(got))
	}
	if got := f.TakeRefusedFrames(); len(got) != 3 {
		t.Fatalf("refusals kept for the node: %d, want 3", len(got))
	}
}
