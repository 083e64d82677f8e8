package nemesis

import (
	"github.com/vmihailenco/msgpack/v5"

	"github.com/tickfence/tickfence/actor"
)

// ledgerKind is the nemesis's own kind: its state is the ordered list of applied operation IDs, so
// exactly-once and order are checkable from the stored state alone. {"type":"add","op":ID} appends
// ID, emits one effect of kind effectKind whose payload is ID (so the effects stream maps back to
// operations) and returns its position (1-based); the create command's "tag" is kept, so a create
// remade with default arguments shows. {"type":"get"} changes nothing and returns the number of
// ops: the flooder's junk. {"type":"grow","op":ID,"n":N} emits N bytes of effects of kind
// padKind (as many as it takes, each of actor.MaxEffectBytes, payloads starting with ID) and
// returns N: the grower's oversized command (oversize.go). Its effects go in the record's outbox
// with the write that holds the command, and N is past store.MaxRecordBytes, so no such write can
// be stored: it must be answered too_large, and none of its effects may ever leave.
type ledgerKind struct{}

func (ledgerKind) Name() string { return "ledger" }

func (ledgerKind) New(_ string, c actor.Command) (actor.Logic, error) {
	var a struct {
		Tag string `msgpack:"tag"`
	}
	if len(c.Body) == 0 {
		return &ledger{}, nil // a create with no arguments: the default ledger (tag "")
	}
	if err := c.Decode(&a); err != nil {
		return nil, err
	}
	return &ledger{Tag: a.Tag}, nil
}

// AuthorizeCreate implements actor.CreateAuthorizer: a player may make a ledger too (the
// nemesis's untrusted clients create instances, and end them as their creator).
func (ledgerKind) AuthorizeCreate(string, actor.Command) error { return nil }

func (ledgerKind) Restore(_ string, b []byte) (actor.Logic, error) {
	l := &ledger{}
	return l, msgpack.Unmarshal(b, l)
}

// effectKind is the kind of the effect every applied add emits.
const effectKind = "add"

// padKind is the kind of a grow's effects, which never leave (their write is too large).
const padKind = "pad"

type ledger struct {
	Tag string   `msgpack:"tag"`
	Ops []string `msgpack:"ops"`
	actor.Effects
}

func (l *ledger) Tick(uint64) {}

func (l *ledger) Handle(_ uint64, c actor.Command) (any, error) {
	var a struct {
		Op string `msgpack:"op"`
		N  int    `msgpack:"n"`
	}
	if err := c.Decode(&a); err != nil {
		return nil, err
	}
	switch c.Type {
	case "add":
		l.Ops = append(l.Ops, a.Op)
		l.Emit(effectKind, []byte(a.Op))
		return len(l.Ops), nil // 1-based: a reply's result 0 would be omitted
	case "get":
		return len(l.Ops), nil
	case "grow":
		for left := a.N; left > 0; left -= actor.MaxEffectBytes {
			p := make([]byte, min(left, actor.MaxEffectBytes))
			copy(p, a.Op)
			l.Emit(padKind, p)
		}
		return a.N, nil
	}
	return nil, actor.Reject("unknown %q", c.Type)
}

func (l *ledger) MarshalState() ([]byte, error) { return msgpack.Marshal(l) }

func decodeLedger(b []byte) (ledger, error) {
	var l ledger
	err := msgpack.Unmarshal(b, &l)
	return l, err
}
