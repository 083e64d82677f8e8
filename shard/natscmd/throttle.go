package natscmd

import (
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tickfence/tickfence/shard/wire"
)

// Throttle is client-side adaptive throttling (the SRE book's "Handling Overload"): a client whose
// commands an owner keeps refusing with busy refuses some of them itself, before sending them.
// A refusal at the owner's door is cheap but not free — on a saturated machine it costs about a
// third of an acknowledged command, counting the client's and the server's share — so a client
// that keeps sending twice what the owner admits spends on refusals the capacity it is refused
// for. With the throttle it sends about K times what the owner accepts and answers the rest busy
// at once.
//
// Per shard (one owner at a time) it keeps counts that halve every HalfLife: requests (attempts
// answered by the owner or refused here) and accepts (attempts the owner answered with anything
// but busy). An attempt is refused here with probability max(0, (requests − K·accepts) /
// (requests + 1)): while the owner accepts more than 1/K of the attempts, nothing is. Attempts
// that got no answer (no owner, a timeout) count neither way: the throttle follows what owners
// say. Once the owner has refused nothing for half a HalfLife, the requests refused here are
// forgotten; after a HalfLife without a refusal heard, at most every other attempt is refused.
//
// A Throttle is safe for concurrent use; its fields must be set before its first use.
type Throttle struct {
	// K is how many times the accepted rate the client goes on sending (default 1.1). Higher
	// wastes more on refusals; lower learns more slowly that the owner has capacity again
	// (it is probed with the K−1 excess).
	K float64
	// HalfLife is how fast the counts forget (default 500 ms).
	HalfLife time.Duration

	shards    []throttleShard
	throttled atomic.Int64
}

type throttleShard struct {
	mu                sync.Mutex
	requests, accepts float64
	at                time.Time
	busyAt            time.Time // the last busy answer
	_                 [16]byte  // its own cache line, mostly
}

// NewThrottle makes a throttle for a cluster of the given shard count.
func NewThrottle(shards uint32) *Throttle {
	return &Throttle{K: 1.1, HalfLife: 500 * time.Millisecond, shards: make([]throttleShard, max(shards, 1))}
}

// decay brings the shard's counts to now. Under s.mu.
func (t *Throttle) decay(s *throttleShard, now time.Time) {
	if d := now.Sub(s.at); d > 0 {
		f := math.Exp2(-float64(d) / float64(t.HalfLife))
		s.requests *= f
		s.accepts *= f
		s.at = now
	}
}

// Allow reports whether to send an attempt of a command to shard; false: answer it busy here
// (Throttled counts these; they count as requests, as refused).
func (t *Throttle) Allow(shard uint32) bool {
	s := &t.shards[shard%uint32(len(t.shards))]
	now := time.Now()
	s.mu.Lock()
	t.decay(s, now)
	p := (s.requests - t.K*s.accepts) / (s.requests + 1)
	if p > 0.5 && now.Sub(s.busyAt) > t.HalfLife {
		// No refusal heard for a while (nothing sent to hear one): probe with every other
		// attempt rather than with one in requests+1.
		p = 0.5
	}
	refuse := p > 0 && rand.Float64() < p
	if refuse {
		s.requests++
	}
	s.mu.Unlock()
	if refuse {
		t.throttled.Add(1)
	}
	return !refuse
}

// Answered records the owner's answer to an attempt Allow let through: accepted is false only
// for busy. An attempt counts as a request once answered (or refused here): attempts in flight
// count neither way, so a burst of first commands is not refused for want of answers.
func (t *Throttle) Answered(shard uint32, accepted bool) {
	s := &t.shards[shard%uint32(len(t.shards))]
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	t.decay(s, now)
	s.requests++
	if !accepted {
		s.busyAt = now
		return
	}
	s.accepts++
	if now.Sub(s.busyAt) > t.HalfLife/2 {
		// The owner has refused nothing for a while: what was refused here before says nothing
		// about its capacity now. Without this, after a spell of refusals the client would
		// probe with about one attempt per (requests+1), and take many half-lives to find out.
		s.requests = min(s.requests, s.accepts)
	}
}

// Throttled is the number of attempts Allow refused.
func (t *Throttle) Throttled() int64 { return t.throttled.Load() }

// codeOf is an answer's error code ("" for ok).
func codeOf(e *wire.Error) string {
	if e == nil {
		return ""
	}
	return e.Code
}
