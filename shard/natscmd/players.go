package natscmd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/shard"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
)

// isHeartbeat reports a heartbeat (wire.HeaderHeartbeat): published without a reply subject or
// a body, with the header.
func isHeartbeat(m *nats.Msg) bool {
	return m.Reply == "" && len(m.Data) == 0 && m.Header.Get(wire.HeaderHeartbeat) != ""
}

// heartbeat hands a heartbeat of who's player to its shard; a malformed subject is dropped
// (there is no one to tell).
func (s *Server) heartbeat(subject string, who actor.Sender, handle func(shard.Command)) {
	if who.Player == "" {
		return // a trusted sender acting for no player is no player
	}
	sh, id, err := wire.ParseSubject(subject, s.shards)
	if err != nil {
		return
	}
	c := shard.Command{Request: wire.Request{Shard: sh, Instance: id}, Received: time.Now(), Reply: func([]byte) {}, Heartbeat: true}
	c.SetSender(who)
	handle(c)
}

// DefaultHeartbeat is how often a player's Watch tells the instance its player is still there
// (Client.Heartbeat): well within actor.DefaultPresenceTimeout (600 ticks, 30 s at 20 Hz).
const DefaultHeartbeat = 5 * time.Second

// SendHeartbeat tells the owner of instance that player's client is still there (a heartbeat:
// wire.HeaderHeartbeat), published, unanswered: on the player's own subject if the client sends
// as that player, else on the trusted subject naming it (a trusted gateway relaying for it). A
// Logic that tracks players then does not disconnect it (actor.PresenceTimeout).
func (c *Client) SendHeartbeat(instance, player string) error {
	if err := store.ValidID(instance); err != nil {
		return err
	}
	if !actor.ValidPlayer(player) {
		return fmt.Errorf("heartbeat to %s: player %q: want 1-64 of A-Z a-z 0-9 _ -", instance, player)
	}
	s := store.ShardOf(instance, c.shards)
	var m *nats.Msg
	switch {
	case c.Player == player:
		m = nats.NewMsg(wire.PlayerSubject(s, instance, player))
	case c.Player != "":
		return fmt.Errorf("heartbeat to %s: a client sending as player %s speaks for no other player (%s)", instance, c.Player, player)
	default:
		m = nats.NewMsg(wire.Subject(s, instance))
		m.Header.Set(HeaderPlayer, player)
	}
	m.Header.Set(wire.HeaderHeartbeat, "1")
	return c.nc.PublishMsg(m)
}

// heartbeats sends a heartbeat for player to instance at once and every interval until ctx ends.
func (c *Client) heartbeats(ctx context.Context, instance, player string, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		_ = c.SendHeartbeat(instance, player) // a lost one costs nothing: the next comes soon
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// ErrOtherPlayer is returned by WatchPlayer for a player other than the client's own, when the
// client sends as a player: a player's credential may not subscribe another's frames.
var ErrOtherPlayer = errors.New("a player's client watches no other player's frames")
