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

// Command is a decoded command: its type and the whole msgpack map it came in.
type Command struct {
	Type string
	// Body is the command as a canonical msgpack map (keys sorted), "type" included.
	Body []byte
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
