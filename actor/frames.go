package actor

import (
	"errors"
	"fmt"
	"regexp"
)

// Frame is a message for the players watching an instance — a boss's HP bar, positions, a phase
// change. Frames are for display: the node publishes them right after the tick (or command) that
// made them, without waiting for the state to be stored, and never stores them (DESIGN 8).
type Frame struct {
	// Topic, if not empty, narrows who receives it (one NATS subject token: letters, digits, _
	// and -, at most 32); watchers of the instance get every topic.
	Topic string
	// To, if not empty, is the one player who receives it (Frames.PublishTo): it goes on that
	// player's own subject, which no other player's credential may subscribe (README: Players).
	// Empty: every watcher of the instance may receive it.
	To string
	// Payload is the game's bytes (msgpack is conventional), at most MaxFrameBytes.
	Payload []byte
}

// MaxFrameBytes bounds a frame's payload. A bigger frame is refused (Frames.Publish returns an
// error), never published in part.
const MaxFrameBytes = 64 << 10

// Framer is a Logic that shows something to its watchers. After every tick (which includes the
// commands applied at its start) the instance takes the frames made since the last call. Embed
// Frames, which refuses a bad frame at the call; a frame of a Framer of the game's own that
// ValidFrame refuses is dropped whole, logged and counted (tickfence_frames_refused_total).
type Framer interface {
	// TakeFrames returns the frames made since the last call, oldest first (nil: none). The
	// caller owns the slice and the payloads afterwards.
	TakeFrames() []Frame
}

// Frames is an outbox a Logic embeds to be a Framer: Publish from Tick or Handle, and the
// instance takes them after the tick. It holds nothing between ticks and is never part of the
// state (its fields are unexported, so msgpack leaves them out).
type Frames struct {
	out     []Frame
	refused []error
}

// ErrInvalidFrame is wrapped by the error of a frame that breaks the limits (its topic, its
// size).
var ErrInvalidFrame = errors.New("invalid frame")

// Publish queues a frame for the end of this tick. The payload must not change afterwards.
//
// A frame that breaks the limits (a topic that is not empty or 1-32 of A-Z a-z 0-9 _ -, a
// payload over MaxFrameBytes) is not queued: Publish returns an error wrapping ErrInvalidFrame.
// Frames are display only, so nothing else fails; the node also logs it at WARN and counts it
// (tickfence_frames_refused_total).
func (f *Frames) Publish(topic string, payload []byte) error {
	fr := Frame{Topic: topic, Payload: payload}
	if err := ValidFrame(fr); err != nil {
		f.refused = append(f.refused, err)
		return err
	}
	f.out = append(f.out, fr)
	return nil
}

// PublishTo queues a frame for player only, for the end of this tick: its HUD, its hand of
// cards, what only it may see. It is published on the player's own subject
// (tickfence.to.<S>.<id>.<player>[.<topic>]), which only that player's credential (and trusted
// ones) may subscribe; the player's client.Watch receives it with the instance's public frames.
// To show something to a set of players, call it once per player. Errors as Publish, and for a
// player name that is not 1-64 of A-Z a-z 0-9 _ -.
func (f *Frames) PublishTo(player, topic string, payload []byte) error {
	fr := Frame{Topic: topic, To: player, Payload: payload}
	err := ValidFrame(fr)
	if player == "" {
		err = fmt.Errorf("%w: PublishTo needs a player (Publish shows a frame to everyone)", ErrInvalidFrame)
	}
	if err != nil {
		f.refused = append(f.refused, err)
		return err
	}
	f.out = append(f.out, fr)
	return nil
}

// TakeRefusedFrames returns the errors Publish returned since the last call (nil: none), for the
// node to log and count: the game was told at the call.
func (f *Frames) TakeRefusedFrames() []error {
	r := f.refused
	f.refused = nil
	return r
}

// RefusedFrames is a Framer that keeps the frames it refused at the call (Frames is one), so
// that the node counts them.
type RefusedFrames interface {
	TakeRefusedFrames() []error
}

// TakeFrames implements Framer.
func (f *Frames) TakeFrames() []Frame {
	out := f.out
	f.out = nil
	return out
}

var topicRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)

// ValidFrame reports why a frame cannot be published (nil if it can): an error wrapping
// ErrInvalidFrame.
func ValidFrame(f Frame) error {
	if f.Topic != "" && !topicRE.MatchString(f.Topic) {
		return fmt.Errorf("%w: topic %q: want 1-32 of A-Z a-z 0-9 _ -", ErrInvalidFrame, f.Topic)
	}
	if f.To != "" && !ValidPlayer(f.To) {
		return fmt.Errorf("%w: player %q: want 1-64 of A-Z a-z 0-9 _ -", ErrInvalidFrame, f.To)
	}
	if len(f.Payload) > MaxFrameBytes {
		return fmt.Errorf("%w: %d bytes, over the %d-byte limit", ErrInvalidFrame, len(f.Payload), MaxFrameBytes)
	}
	return nil
}
