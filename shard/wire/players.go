package wire

import (
	"strconv"
	"strings"
)

// PrivateFramePrefix is where the frames a game shows one player only (actor.Frames.PublishTo)
// are published: tickfence.to.<S>.<id>.<player>[.<topic>], with the same stamp headers as the
// public frames of tickfence.out. A player's credential may subscribe there only under its own
// name (package auth: tickfence.to.*.*.<name> and tickfence.to.*.*.<name>.*), so no wildcard it
// may subscribe reaches another player's — a prefix of its own, because the players may
// subscribe tickfence.out.> (any public frame), whose wildcards would also match a player's
// frames kept below it. Trusted watchers (a gateway relaying to its players, an operator) may
// subscribe tickfence.to.>.
const PrivateFramePrefix = "tickfence.to"

// PrivateFrameSubject is where a frame of instance id for player is published.
func PrivateFrameSubject(shard uint32, id, player, topic string) string {
	s := PrivateFramePrefix + "." + strconv.FormatUint(uint64(shard), 10) + "." + id + "." + player
	if topic != "" {
		s += "." + topic
	}
	return s
}

// ParsePrivateFrameSubject splits what follows an instance's private frame prefix
// (tickfence.to.<S>.<id>.) into the player and the topic ("" for none).
func ParsePrivateFrameSubject(base, subject string) (player, topic string, ok bool) {
	rest, ok := strings.CutPrefix(subject, base+".")
	if !ok || rest == "" {
		return "", "", false
	}
	player, topic, _ = strings.Cut(rest, ".")
	return player, topic, player != "" && !strings.Contains(topic, ".")
}

// HeaderHeartbeat marks a heartbeat: a message published without a reply subject and without a
// body on a command subject (tickfence.play.<S>.<id>.<player>, or tickfence.cmd.<S>.<id> with
// Tickfence-Player), saying that the player's client is still there. A Logic that tracks
// players (actor.PlayerLeaver) disconnects a player the instance has not heard from — no command,
// no heartbeat — for its PresenceTimeout ticks. It is no command: never answered, never stored
// by itself (the player's last-seen tick is, with the instance's next write), and a heartbeat of
// a player that is not in is ignored. The Go client's Watch sends one every 5 s for its player.
const HeaderHeartbeat = "Tickfence-Heartbeat"
