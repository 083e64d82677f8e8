// Package actor is the API a game implements for a kind of instance, and the engine that ticks
// instances at a fixed rate. An instance's Logic is only ever touched by its single owner: the
// engine calls Tick and Handle from one goroutine at a time, never concurrently.
package actor

import (
	"fmt"
	"sort"

	"github.com/vmihailenco/msgpack/v5"
)

// Kind is one kind of instance a game offers ("dungeon", "raid", ...).
type Kind interface {
	// Name is the kind's name as commands and records spell it.
	Name() string
	// New initialises a fresh instance from its create command (the whole {"type":"create",...}
	// map, so games can take parameters from it).
	New(id string, create Command) (Logic, error)
	// Restore rebuilds an instance from the bytes its Logic.MarshalState wrote.
	Restore(id string, state []byte) (Logic, error)
}

// Logic is the state and rules of one instance. It must be deterministic given its inputs: the
// tick numbers and the commands, in order.
//
// A panic in any of its methods fails the instance on its node (so does a Restore of its Kind
// that returns an error): nothing the instance held in memory is stored, every command is
// answered instance_failed with the reason until an operator reloads it from its stored state
// (tickctl instance reload) once the game is fixed.
type Logic interface {
	// Tick advances the simulation by one tick. tick numbers increase by one from the last stored.
	Tick(tick uint64)
	// Handle applies a command at the start of a tick. The returned value (msgpack-encodable) is
	// the command's result; an error refuses it (use *Rejected for a code the client can read).
	// Either way the answer is remembered and a retransmission gets it again; except a
	// *Rejected with code "bad_request", which says the command is malformed: Handle must not have
	// changed anything, and the refusal is answered at once, neither remembered nor stored.
	Handle(tick uint64, cmd Command) (any, error)
	// MarshalState encodes the whole state as msgpack.
	MarshalState() ([]byte, error)
}

// CreateAuthorizer is implemented by a Kind whose instances senders other than trusted ones
// (players: actor.Sender) may create. tickfence asks it about every create, trusted or not, and
// refuses the command when it returns an error (a *Rejected's code, else "forbidden"). A Kind
// that does not implement it lets only trusted senders create its instances.
type CreateAuthorizer interface {
	AuthorizeCreate(id string, create Command) error
}

// Command is a decoded command: its type and the whole msgpack map it came in.
type Command struct {
	Type string
	// Body is the command as a canonical msgpack map (keys sorted), "type" included.
	Body []byte
	// Sender is who sent it, as the NATS server authenticated it (DESIGN 9): never taken from
	// what a client wrote. Zero for the create command a rebuild replays (Kind.New from the
	// stored record): a game keeps what it needs of its creator in its own state.
	Sender Sender
}

// Sender is the authenticated sender of a command. Games authorise on it: a player acts only
// for itself, an operator may do more.
//
// On a cluster with credentials (tickctl auth init), a player's credential (the players'
// account) may send commands only on its own subject, tickfence.play.<S>.<id>.<its name>: the
// NATS server's permissions, not anything the client writes, say who it is. Commands on
// tickfence.cmd come from trusted senders only: a trusted gateway, an operator's tickctl, a
// node's own players, and every command on a cluster without credentials.
type Sender struct {
	// Name is a player's credential name (tickctl auth user DIR gateway NAME): the last token of
	// its subject, which the server let it publish on.
	Name string
	// Trusted: sent by a trusted sender (see above). A trusted sender may name the player it
	// acts for; an untrusted one is that player.
	Trusted bool
	// Player is the player the command acts for: an untrusted sender's Name; what a trusted
	// sender named in the Tickfence-Player header ("" if it named none).
	Player string
}

// ActsFor reports whether the sender may act for player: it is that player, or it is trusted
// and named no player, or named that one.
func (s Sender) ActsFor(player string) bool {
	if s.Trusted && s.Player == "" {
		return true
	}
	return s.Player == player
}

// Decode unmarshals the command's map into v (a struct with msgpack tags, or a map).
func (c Command) Decode(v any) error {
	if err := msgpack.Unmarshal(c.Body, v); err != nil {
		return &Rejected{Code: "bad_request", Message: fmt.Sprintf("%s: %v", c.Type, err)}
	}
	return nil
}

// Rejected is a game's refusal of a command, with a code a client can branch on.
type Rejected struct {
	Code    string
	Message string
}

func (r *Rejected) Error() string { return r.Code + ": " + r.Message }

// Reject is a shorthand for a refusal with code "rejected".
func Reject(format string, args ...any) error {
	return &Rejected{Code: "rejected", Message: fmt.Sprintf(format, args...)}
}

// Kinds maps kind names to kinds. Build one with NewKinds; it is read-only afterwards.
type Kinds struct{ m map[string]Kind }

// NewKinds registers kinds; a duplicate name is an error.
func NewKinds(kinds ...Kind) (*Kinds, error) {
	k := &Kinds{m: map[string]Kind{}}
	for _, kind := range kinds {
		if _, dup := k.m[kind.Name()]; dup {
			return nil, fmt.Errorf("kind %q registered twice", kind.Name())
		}
		k.m[kind.Name()] = kind
	}
	return k, nil
}

// Get returns a kind by name.
func (k *Kinds) Get(name string) (Kind, bool) {
	kind, ok := k.m[name]
	return kind, ok
}

// Names lists the registered kinds, sorted.
func (k *Kinds) Names() []string {
	var n []string
	for name := range k.m {
		n = append(n, name)
	}
	sort.Strings(n)
	return n
}
