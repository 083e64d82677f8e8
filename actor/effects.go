package actor

import (
	"errors"
	"fmt"
)

// Effect is something an instance does outside itself that must happen exactly once — "grant 30
// gold to zed", "unlock an achievement". Effects are durable: the instance's next fenced write
// stores them in its record together with the state that made them, and only after the store
// accepted that write does the owner publish them (DESIGN 8). A zombie's effects never leave; none
// is lost across kills, moves and restores; a consumer that keys on Key applies each once.
type Effect struct {
	// Kind names what to do (a subject token: letters, digits, _ and -, at most 32), e.g. "loot".
	Kind string
	// Payload is the game's bytes (msgpack is conventional), at most MaxEffectBytes.
	Payload []byte
}

// MaxEffectBytes bounds one effect's payload.
const MaxEffectBytes = 4 << 10

// Emitter is a Logic that emits effects. After every tick (which includes the commands applied at
// its start) the instance takes the effects emitted since the last call. Embed Effects, which
// refuses a bad effect at the call; an Emitter of the game's own that hands over an effect
// ValidEffect refuses fails its instance, as a panic does (the command that made it is answered
// instance_failed and nothing of it is stored), since dropping it would answer the command ok
// while its effect never happens.
type Emitter interface {
	// TakeEffects returns the effects emitted since the last call, oldest first (nil: none).
	TakeEffects() []Effect
}

// Effects is an outbox a Logic embeds to be an Emitter: Emit from Tick or Handle. It holds
// nothing between ticks and is never part of the state (its fields are unexported).
type Effects struct {
	out     []Effect
	refused []error
}

// ErrInvalidEffect is wrapped by the error of an effect that breaks the limits (its kind, its
// size): Emit returns it, and an Emitter of the game's own that hands one over fails its instance.
var ErrInvalidEffect = errors.New("invalid effect")

// Emit queues an effect of this tick. The payload must not change afterwards.
//
// An effect that breaks the limits (a kind that is not 1-32 of A-Z a-z 0-9 _ -, a payload over
// MaxEffectBytes) is not queued: Emit returns an error wrapping ErrInvalidEffect, and nothing of
// it is stored or published. Check it: in Handle, returning it (before changing the state, or as
// a *Rejected with code "bad_request", which stores nothing) tells the client; ignored, the
// effect is lost, with only the node's WARN line and tickfence_effects_refused_total to show it.
func (e *Effects) Emit(kind string, payload []byte) error {
	eff := Effect{Kind: kind, Payload: payload}
	if err := ValidEffect(eff); err != nil {
		e.refused = append(e.refused, err)
		return err
	}
	e.out = append(e.out, eff)
	return nil
}

// TakeRefusedEffects returns the errors Emit returned since the last call (nil: none), for the
// node to log and count (tickfence_effects_refused_total): the game was told at the call.
func (e *Effects) TakeRefusedEffects() []error {
	r := e.refused
	e.refused = nil
	return r
}

// RefusedEffects is an Emitter that keeps the effects it refused at the call (Effects is one),
// so that the node counts them.
type RefusedEffects interface {
	TakeRefusedEffects() []error
}

// TakeEffects implements Emitter.
func (e *Effects) TakeEffects() []Effect {
	out := e.out
	e.out = nil
	return out
}

// ValidEffect reports why an effect cannot be emitted (nil if it can): an error wrapping
// ErrInvalidEffect.
func ValidEffect(e Effect) error {
	if !topicRE.MatchString(e.Kind) {
		return fmt.Errorf("%w: kind %q: want 1-32 of A-Z a-z 0-9 _ -", ErrInvalidEffect, e.Kind)
	}
	if len(e.Payload) > MaxEffectBytes {
		return fmt.Errorf("%w: kind %q: %d bytes, over the %d-byte limit", ErrInvalidEffect, e.Kind, len(e.Payload), MaxEffectBytes)
	}
	return nil
}
