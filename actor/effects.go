package actor

import "fmt"

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
// its start) the instance takes the effects emitted since the last call.
type Emitter interface {
	// TakeEffects returns the effects emitted since the last call, oldest first (nil: none).
	TakeEffects() []Effect
}

// Effects is an outbox a Logic embeds to be an Emitter: Emit from Tick or Handle. It holds
// nothing between ticks and is never part of the state (its field is unexported).
type Effects struct{ out []Effect }

// Emit queues an effect of this tick. The payload must not change afterwards.
func (e *Effects) Emit(kind string, payload []byte) {
	e.out = append(e.out, Effect{Kind: kind, Payload: payload})
}

// TakeEffects implements Emitter.
func (e *Effects) TakeEffects() []Effect {
	out := e.out
	e.out = nil
	return out
}

// ValidEffect reports why an effect cannot be emitted (nil if it can).
func ValidEffect(e Effect) error {
	if !topicRE.MatchString(e.Kind) {
		return fmt.Errorf("effect kind %q: want 1-32 of A-Z a-z 0-9 _ -", e.Kind)
	}
	if len(e.Payload) > MaxEffectBytes {
		return fmt.Errorf("effect of %d bytes: over the %d-byte limit", len(e.Payload), MaxEffectBytes)
	}
	return nil
}
