package actor_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tickfence/tickfence/actor"
)

func TestKindOptionsValidate(t *testing.T) {
	for _, o := range []actor.KindOptions{{}, {TickRate: 60, CheckpointEvery: 30, IdleCheckpoint: 1200, Passivate: time.Minute}, {IdleCheckpoint: 5}} {
		if err := o.Validate(); err != nil {
			t.Errorf("%+v: %v", o, err)
		}
	}
	for _, o := range []actor.KindOptions{{TickRate: -1}, {TickRate: 1001}, {Passivate: -time.Second}, {CheckpointEvery: 10, IdleCheckpoint: 5}} {
		if err := o.Validate(); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

func TestLifecycleAndLabels(t *testing.T) {
	var l actor.Lifecycle
	if l.TakeEnd() {
		t.Fatal("ended before End")
	}
	l.End()
	if !l.TakeEnd() || l.TakeEnd() {
		t.Fatal("TakeEnd: want true once after End")
	}
	if err := l.SetLabel("mode", "heroic"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][2]string{{"", "x"}, {"bad key", "x"}, {strings.Repeat("k", 64), "x"}, {"k", strings.Repeat("v", 129)}, {"k", "\xff"}} {
		if err := l.SetLabel(bad[0], bad[1]); !errors.Is(err, actor.ErrInvalidLabel) {
			t.Errorf("SetLabel(%q, %q): %v, want ErrInvalidLabel", bad[0], bad[1], err)
		}
	}
	l.DeleteLabel("open")
	got := l.TakeLabels()
	if len(got) != 2 || got[0] != (actor.LabelChange{Key: "mode", Value: "heroic"}) || got[1] != (actor.LabelChange{Key: "open", Delete: true}) {
		t.Fatalf("TakeLabels: %+v", got)
	}
	if l.TakeLabels() != nil {
		t.Fatal("TakeLabels twice")
	}
	many := map[string]string{}
	for i := range actor.MaxLabels + 1 {
		many[strings.Repeat("k", i+1)] = "v"
	}
	if err := actor.ValidLabels(many); err == nil {
		t.Fatal("17 labels accepted")
	}
}
