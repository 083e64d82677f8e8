package natscmd

import (
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/shard/wire"
)

// HeaderPlayer names the player a trusted sender acts for (a trusted gateway, an operator's
// tickctl). Players send on their own subjects instead (wire.PlayerSubject).
const HeaderPlayer = "Tickfence-Player"

// Who sent a command comes from its subject, which the NATS server authorises, never from a
// header (DESIGN 9): a player's credential may publish only on tickfence.play.*.*.<its name>,
// and only trusted senders on tickfence.cmd.>. Headers are not used for identity at all, not even
// the Nats-Request-Info a server writes for a request that crossed accounts: nats-server 2.15.2
// removes a client's own copy only where it follows CRLF, while nats.go on the node reads a line
// after a bare LF too and stops at the first blank line, so a client can hide the server's value
// and show its own (the review of issue 33 forged a trusted sender and another player that way).

// playerSender is the sender of a command on tickfence.play.<S>.<id>.<name>.
func playerSender(name string) (actor.Sender, error) {
	if err := checkName(name); err != nil {
		return actor.Sender{}, wire.Errorf(wire.CodeBadRequest, "player %q in the subject: %v", name, err)
	}
	return actor.Sender{Name: name, Player: name}, nil
}

// trustedSender is the sender of a command on tickfence.cmd: trusted, acting for the player its
// Tickfence-Player header names, if any.
func trustedSender(h nats.Header) (actor.Sender, error) {
	s := actor.Sender{Trusted: true}
	if p := h.Get(HeaderPlayer); p != "" {
		if err := checkName(p); err != nil {
			return s, wire.Errorf(wire.CodeBadRequest, "header %s: %v", HeaderPlayer, err)
		}
		s.Player = p
	}
	return s, nil
}

// checkName: a player's name is a credential's name, 1-64 of A-Z a-z 0-9 _ - (auth.NewUser).
func checkName(n string) error {
	if n == "" || len(n) > wire.MaxRequestID || strings.ContainsFunc(n, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-')
	}) {
		return errBadName
	}
	return nil
}

var errBadName = wire.Errorf(wire.CodeBadRequest, "want 1-%d of A-Z a-z 0-9 _ -", wire.MaxRequestID)

// every lets one event through every 10 s, counting the others.
type every struct {
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

func (e *every) allow(now time.Time) (bool, int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.last.IsZero() && now.Sub(e.last) < 10*time.Second {
		e.suppressed++
		return false, 0
	}
	n := e.suppressed
	e.last, e.suppressed = now, 0
	return true, n
}
