// Package logkey names the attributes of tickfence's diagnostic logs, so that a write rejected by
// the fence, a token rotation and a refused command carry the same keys wherever they are logged
// (seed S9: record together the token a write was issued under, the store's current revision of
// shard.<S>, the request ID and payload fingerprint, and the conditional update's result).
//
// A line has the keys that apply: a command refused by the transport before it reached its shard
// has no token; a rotation has no request ID.
package logkey

import (
	"strconv"
	"sync"
	"time"
)

const (
	// Shard and Instance: which shard.<S> and which instance.
	Shard    = "shard"
	Instance = "instance"
	// Token is the fence token the write was sent under, or the shard runs under on this node
	// (the revision of shard.<S> its grant or last rotation made).
	Token = "token"
	// CurrentRevision is the revision of shard.<S> the store holds now, as far as this node knows:
	// the one a rejected write met, the one a rotation made, or the highest this node has seen.
	CurrentRevision = "current_revision"
	// RequestID is the command's request ID (a compact-form command's client/seq); a write lists
	// the IDs of the commands it carried, comma-separated.
	RequestID = "request_id"
	// Fingerprint is the hash of the command's canonical body (16 hex digits); comma-separated like
	// RequestID for a write.
	Fingerprint = "fingerprint"
	// CASResult is the outcome of the conditional update behind the line: a fenced write's "ok",
	// "stale_owner", "conflict", "refused" or "error"; a rotation's "ok", "adopted" or "lost";
	// "none" when no conditional update decided it (a command refused before any write).
	CASResult = "cas_result"
	// Code is the error code a command was answered with (wire.Code*).
	Code = "code"
	// Err is the error or the refusal's message.
	Err = "err"
	// Suppressed counts lines of the same kind left out since the last one (rate limit).
	Suppressed = "suppressed"
)

// CASNone: no conditional update decided the outcome.
const CASNone = "none"

// FormatFingerprint renders a fingerprint as 16 hex digits.
func FormatFingerprint(fp uint64) string {
	s := strconv.FormatUint(fp, 16)
	for len(s) < 16 {
		s = "0" + s
	}
	return s
}

// Limiter lets through at most PerSecond lines of each kind per second and counts the rest for
// the next line of that kind that goes out (under the key Suppressed). The zero value is ready.
type Limiter struct {
	mu   sync.Mutex
	kind map[string]*window
}

type window struct {
	start         time.Time
	n, suppressed int
}

// PerSecond is how many lines of one kind a Limiter lets through per second.
const PerSecond = 20

// Allow reports whether a line of kind may be logged now and, if so, how many were left out
// before it.
func (l *Limiter) Allow(kind string, now time.Time) (emit bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.kind == nil {
		l.kind = map[string]*window{}
	}
	w := l.kind[kind]
	if w == nil {
		w = &window{start: now}
		l.kind[kind] = w
	}
	if now.Sub(w.start) >= time.Second {
		w.start, w.n = now, 0
	}
	if w.n >= PerSecond {
		w.suppressed++
		return false, 0
	}
	w.n++
	suppressed, w.suppressed = w.suppressed, 0
	return true, suppressed
}
