package actor

import (
	"errors"
	"fmt"
)

// The node's rules for what it decides before a game's Logic sees a command, exported so that a
// test harness (package actortest) applies the very same ones.

// AuthorizeCreate is nil, or why the sender of create may not make an instance of kind: the
// kind's CreateAuthorizer if it has one (an error that is no *Rejected is "forbidden"), else
// trusted senders only.
func AuthorizeCreate(kind Kind, id string, create Command) error {
	if a, ok := kind.(CreateAuthorizer); ok {
		err := a.AuthorizeCreate(id, create)
		var rj *Rejected
		if err != nil && !errors.As(err, &rj) {
			err = &Rejected{Code: "forbidden", Message: err.Error()}
		}
		return err
	}
	if !create.Sender.Trusted {
		return &Rejected{Code: "forbidden", Message: fmt.Sprintf("kind %s lets only trusted senders create instances (it implements no actor.CreateAuthorizer)", kind.Name())}
	}
	return nil
}

// PlayerOf is the player a built-in join or leave is for: the sender's own (a player's
// credential, or the Tickfence-Player of a trusted sender), or the one its "player" field names,
// which the sender must act for (Sender.ActsFor: a trusted sender acting for no player may name
// any). The sender returned acts for that player.
func PlayerOf(cmd Command) (Sender, error) {
	var a struct {
		Player string `msgpack:"player"`
	}
	if err := cmd.Decode(&a); err != nil {
		return Sender{}, err
	}
	s := cmd.Sender
	switch {
	case a.Player == "" && s.Player == "":
		return s, &Rejected{Code: "bad_request", Message: fmt.Sprintf(
			`%s needs a player: the sender's own (a player's credential, or a trusted sender's Tickfence-Player header), or a "player" field`, cmd.Type)}
	case a.Player == "":
		return s, nil
	case !ValidPlayer(a.Player):
		return s, &Rejected{Code: "bad_request", Message: fmt.Sprintf(`%s: player %q: want 1-64 of A-Z a-z 0-9 _ -`, cmd.Type, a.Player)}
	case !s.ActsFor(a.Player):
		return s, &Rejected{Code: "forbidden", Message: fmt.Sprintf("%s: the sender acts for player %q, not %q", cmd.Type, s.Player, a.Player)}
	}
	s.Player = a.Player
	return s, nil
}
