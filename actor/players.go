package actor

// Players are first-class (README: Players). A Logic that implements PlayerJoiner or
// PlayerLeaver has its players tracked by its instance's owner: who is in, since which tick, and
// the tick it was last heard from are kept in the instance's record, beside its state, so that
// a failover neither repeats nor loses a join or a leave. The owner calls the hooks at a tick,
// from the tick's single goroutine, exactly like Handle: what they change is stored by the same
// write as the presence they go with, or not at all.
//
//   - A player joins with its first command to the instance (any type; the command's Sender
//     names it: Sender.Player), or with the built-in command {"type":"join"}: Join is called
//     first, and an error refuses the command (the player stays out).
//   - It leaves with the built-in command {"type":"leave"} (LeaveLeft); when the instance has
//     ticked PresenceTimeout ticks without a command or a heartbeat from it (LeaveDisconnected);
//     or when the instance ends (LeaveEnded).
//
// A trusted sender acting for no player (an operator, a trusted gateway without a
// Tickfence-Player header) is no player: its commands join no one. It may name the player in a
// join or leave command's "player" field. A Logic that implements neither interface sees no
// change at all: no presence is kept, and "join" and "leave" are its own commands.

// PlayerJoiner is a Logic told when a player joins. Join is called at tick, before the command
// that made the player join is handled (for the built-in "join", instead of Handle). An error
// refuses that command and the player is not in (a *Rejected's code reaches the client; one
// with code "bad_request" is answered at once and not remembered): Join must then not have
// changed anything. Join may Publish frames and Emit effects as Handle may.
type PlayerJoiner interface {
	Join(tick uint64, who Sender) error
}

// PlayerLeaver is a Logic told when a player leaves, and why. It is called at tick, once per
// join: for LeaveLeft while the leave command is handled, for LeaveDisconnected at the start of
// the tick after the commands (before Tick), for LeaveEnded while the end is applied (the
// instance's last call; its frames and effects are still sent and stored). It cannot refuse.
type PlayerLeaver interface {
	Leave(tick uint64, player string, why LeaveReason)
}

// PresenceTimeout is a Logic that chooses after how many ticks without a command or a heartbeat
// from a present player it is disconnected (LeaveDisconnected); 0: never. Without it,
// DefaultPresenceTimeout. Ticks, not seconds: the instance's ticks are the only clock every owner
// shares, so a failover decides the same disconnects (and a time without an owner, when nothing
// ticks, counts as no silence).
type PresenceTimeout interface {
	PresenceTimeout() uint64
}

// DefaultPresenceTimeout is 30 s at 20 ticks per second: a client sends heartbeats every 5 s by
// default (client.Watch), and every command counts too.
const DefaultPresenceTimeout = 600

// LeaveReason says why a player left.
type LeaveReason string

const (
	// LeaveLeft: the player (or a trusted sender acting for it) sent {"type":"leave"}.
	LeaveLeft LeaveReason = "left"
	// LeaveDisconnected: the instance ticked its PresenceTimeout without hearing from the player.
	LeaveDisconnected LeaveReason = "disconnected"
	// LeaveEnded: the instance ended with the player in.
	LeaveEnded LeaveReason = "ended"
)

// TracksPlayers reports whether the owner keeps the presence of l's players (l implements
// PlayerJoiner or PlayerLeaver).
func TracksPlayers(l Logic) bool {
	if l == nil {
		return false
	}
	_, j := l.(PlayerJoiner)
	_, v := l.(PlayerLeaver)
	return j || v
}

// PresenceTimeoutOf is l's PresenceTimeout, or DefaultPresenceTimeout.
func PresenceTimeoutOf(l Logic) uint64 {
	if p, ok := l.(PresenceTimeout); ok {
		return p.PresenceTimeout()
	}
	return DefaultPresenceTimeout
}

// ValidPlayer reports whether name can be a player's name: 1-64 of A-Z a-z 0-9 _ - (a
// credential's name, a subject token).
func ValidPlayer(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
