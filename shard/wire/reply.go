package wire

import (
	"errors"

	"github.com/tickfence/tickfence/actor"
)

// ReplyFor is the reply to what a game's Handle (or Join, New, Restore) returned, and its result
// code ("ok", a *actor.Rejected's code, or rejected for any other error): what a node answers, and
// what package actortest answers the same way.
func ReplyFor(res any, err error) ([]byte, string) {
	if err == nil {
		return EncodeReply(Reply{OK: true, Result: res}), "ok"
	}
	var rj *actor.Rejected
	if errors.As(err, &rj) {
		return EncodeReply(Reply{Error: &Error{Code: rj.Code, Message: rj.Message}}), rj.Code
	}
	return EncodeReply(Reply{Error: Errorf(CodeRejected, "%v", err)}), CodeRejected
}
