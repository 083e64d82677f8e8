package actor

import (
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// KindOptions are a kind's own tick rate, checkpoint policy and passivation. A zero field takes
// the node's setting (tickd --tick-rate, --checkpoint-every; no idle checkpointing, no
// passivation).
type KindOptions struct {
	// TickRate is ticks per second of the kind's instances (in (0, 1000]; 0: the node's). The
	// node's engine ticks every rate with the same workers; a rate's period is a whole number of
	// buckets of about 500 µs, so it is exact to the nanosecond below 1/TickRate.
	TickRate float64
	// CheckpointEvery: an instance with no command is still written every this many ticks (0:
	// the node's). Commands and effects are always written at the tick that applies them.
	CheckpointEvery uint64
	// IdleCheckpoint, if set, writes an instance whose state has not changed since its last write
	// only every this many ticks instead of every CheckpointEvery (its state is encoded and
	// compared at each CheckpointEvery; an unchanged one is not sent). A failover then redoes up to
	// IdleCheckpoint ticks of an idle instance from its stored tick, which a deterministic Logic
	// replays to the same state: only its tick numbers restart from the stored one.
	IdleCheckpoint uint64
	// Passivate, if set, unloads an instance that had no command and no watcher (see the README:
	// a watcher's interest) for this long: it is written one last time, marked passive, and then
	// holds no memory on its node but a few bytes of index — no logic, no timer, no tick. Its next
	// command, or a watcher's interest, loads it again (Kind.Restore of the stored state) and it
	// ticks on from its stored tick. An instance holding undelivered effects, ended or failed is
	// never passivated.
	Passivate time.Duration
}

// KindOptioner is a Kind with options of its own (KindOptions).
type KindOptioner interface {
	KindOptions() KindOptions
}

// Validate reports options a node refuses.
func (o KindOptions) Validate() error {
	switch {
	case o.TickRate < 0 || o.TickRate > 1000:
		return fmt.Errorf("TickRate must be in (0, 1000] Hz (0: the node's), got %v", o.TickRate)
	case o.Passivate < 0:
		return fmt.Errorf("Passivate must not be negative, got %v", o.Passivate)
	case o.IdleCheckpoint != 0 && o.CheckpointEvery != 0 && o.IdleCheckpoint < o.CheckpointEvery:
		return fmt.Errorf("IdleCheckpoint (%d ticks) must not be below CheckpointEvery (%d)", o.IdleCheckpoint, o.CheckpointEvery)
	}
	return nil
}

// OptionsOf returns a kind's options (the zero KindOptions for a kind without any).
func OptionsOf(k Kind) KindOptions {
	if o, ok := k.(KindOptioner); ok {
		return o.KindOptions()
	}
	return KindOptions{}
}

// Ender is a Logic that can end its own instance. After each command it handles and after each
// tick, the node asks TakeEnd; true ends the instance as an "end" command does: its fenced
// tombstone holds the effects of that tick (published once it is stored), the frames of that
// tick are published, the commands after it in the tick are answered that it has ended, and the
// tombstone keeps the request window until TombstoneTTL. The command whose Handle ended it is
// answered with Handle's result.
type Ender interface {
	TakeEnd() bool
}

// Labeler is a Logic that sets its instance's labels (what listings filter on: a raid's mode, a
// match's open seats). After each command it handles and after each tick, the node takes the
// changes and stores them with the instance's next write.
type Labeler interface {
	// TakeLabels returns the label changes since the last call, oldest first (nil: none).
	TakeLabels() []LabelChange
}

// LabelChange sets a label (Delete false) or removes it.
type LabelChange struct {
	Key, Value string
	Delete     bool
}

// Lifecycle is what a Logic embeds to end its instance and set its labels (an Ender and a
// Labeler). It holds nothing between ticks and is never part of the state (its fields are
// unexported).
type Lifecycle struct {
	end    bool
	labels []LabelChange
}

// End ends the instance at the end of this command or tick (see Ender). Deterministic logic
// decides it from its state, the tick and the commands: a failover that redoes ticks ends it
// again at the same one.
func (l *Lifecycle) End() { l.end = true }

// TakeEnd implements Ender.
func (l *Lifecycle) TakeEnd() bool {
	e := l.end
	l.end = false
	return e
}

// SetLabel sets a label of the instance, stored with its next write. A key or value that breaks
// the limits (ValidLabel) is refused at the call, and nothing changes.
func (l *Lifecycle) SetLabel(key, value string) error {
	if err := ValidLabel(key, value); err != nil {
		return err
	}
	l.labels = append(l.labels, LabelChange{Key: key, Value: value})
	return nil
}

// DeleteLabel removes a label of the instance (nothing if it has none of that key).
func (l *Lifecycle) DeleteLabel(key string) {
	l.labels = append(l.labels, LabelChange{Key: key, Delete: true})
}

// TakeLabels implements Labeler.
func (l *Lifecycle) TakeLabels() []LabelChange {
	c := l.labels
	l.labels = nil
	return c
}

// Label limits. An instance has at most MaxLabels labels; a key is 1–MaxLabelKey of
// A-Z a-z 0-9 _ - . /, a value at most MaxLabelValue bytes of UTF-8.
const (
	MaxLabels     = 16
	MaxLabelKey   = 63
	MaxLabelValue = 128
)

// ErrInvalidLabel is wrapped by the error of a label that breaks the limits.
var ErrInvalidLabel = errors.New("invalid label")

// ValidLabel reports why a label cannot be set (nil if it can).
func ValidLabel(key, value string) error {
	if len(key) == 0 || len(key) > MaxLabelKey {
		return fmt.Errorf("%w: key %q: length must be 1..%d", ErrInvalidLabel, key, MaxLabelKey)
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' || c == '/') {
			return fmt.Errorf("%w: key %q: only A-Z a-z 0-9 _ - . / allowed", ErrInvalidLabel, key)
		}
	}
	if len(value) > MaxLabelValue || !utf8.ValidString(value) {
		return fmt.Errorf("%w: value of %q: at most %d bytes of UTF-8", ErrInvalidLabel, key, MaxLabelValue)
	}
	return nil
}

// ValidLabels reports why a set of labels cannot be an instance's (nil if it can).
func ValidLabels(labels map[string]string) error {
	if len(labels) > MaxLabels {
		return fmt.Errorf("%w: %d labels, at most %d", ErrInvalidLabel, len(labels), MaxLabels)
	}
	for k, v := range labels {
		if err := ValidLabel(k, v); err != nil {
			return err
		}
	}
	return nil
}
