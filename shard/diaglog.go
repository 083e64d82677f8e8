package shard

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tickfence/tickfence/internal/logkey"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
)

// The diagnostic logs of the fence (seed S9): a write the store rejected, a token rotation and a
// refused command each carry the token, the current revision of shard.<S>, the request IDs and
// fingerprints, and the conditional update's result, under the keys of package logkey.

// fenceView is what a host's diagnostic logs say about a shard's fence: the token this session
// runs it under (0: not running here) and the highest revision of shard.<S> it has seen. It is
// read without a lock of the host or the shard: commands are refused from under instance locks.
type fenceView struct{ token, rev atomic.Uint64 }

func (h *Host) fenceOf(shard uint32) *fenceView {
	if v, ok := h.fence.Load(shard); ok {
		return v.(*fenceView)
	}
	v, _ := h.fence.LoadOrStore(shard, &fenceView{})
	return v.(*fenceView)
}

// noteToken records the token a shard runs under here (0: stopped).
func (h *Host) noteToken(shard uint32, token uint64) {
	v := h.fenceOf(shard)
	v.token.Store(token)
	raise(&v.rev, token)
}

// noteRevision records a revision of shard.<S> this session has seen.
func (h *Host) noteRevision(shard uint32, rev uint64) { raise(&h.fenceOf(shard).rev, rev) }

func raise(a *atomic.Uint64, v uint64) {
	for {
		cur := a.Load()
		if v <= cur || a.CompareAndSwap(cur, v) {
			return
		}
	}
}

// refusalLevel is the level a command refused with code is logged at; false: not a refusal (ok,
// duplicate, a game's own answer). Refusals a client retries as flow control are debug lines.
func refusalLevel(code string) (slog.Level, bool) {
	switch code {
	case wire.CodeBusy, wire.CodeRetry, wire.CodeNotOwner, wire.CodeUnknownInstance:
		return slog.LevelDebug, true
	case wire.CodeBadRequest, wire.CodeTooLarge, wire.CodeRequestIDReused, wire.CodeAnswerForgotten, wire.CodeInstanceFailed:
		return slog.LevelWarn, true
	case wire.CodeInternal:
		return slog.LevelError, true
	}
	return 0, false
}

// logRefusal logs a command answered with an error code (rate-limited per code).
func (h *Host) logRefusal(c Command, code string, reply []byte) {
	level, ok := refusalLevel(code)
	if !ok || !h.log.Enabled(context.Background(), level) {
		return
	}
	emit, suppressed := h.diagLimit.Allow("command:"+code, time.Now())
	if !emit {
		return
	}
	msg := ""
	if r, err := wire.DecodeReply(reply, false); err == nil && r.Error != nil {
		msg = r.Error.Message
	}
	cas := c.cas
	if cas == "" {
		cas = logkey.CASNone
	}
	v := h.fenceOf(c.Shard)
	attrs := []slog.Attr{slog.Any(logkey.Shard, c.Shard), slog.String(logkey.Instance, c.Instance),
		slog.Uint64(logkey.Token, v.token.Load()), slog.Uint64(logkey.CurrentRevision, v.rev.Load()),
		slog.String(logkey.RequestID, c.Key()), slog.String(logkey.Fingerprint, logkey.FormatFingerprint(c.Fingerprint)),
		slog.String(logkey.CASResult, cas), slog.String(logkey.Code, code), slog.String(logkey.Err, msg)}
	if suppressed > 0 {
		attrs = append(attrs, slog.Int(logkey.Suppressed, suppressed))
	}
	h.log.LogAttrs(context.Background(), level, "command refused", attrs...)
}

// answerWriteErr answers a command whose write failed or was undone; its refusal line carries the
// write's result.
func (h *Host) answerWriteErr(c Command, err error, code, format string, args ...any) {
	c.cas = writeResult(err)
	var stale *store.StaleOwnerError
	if errors.As(err, &stale) && stale.Revision != 0 {
		h.noteRevision(c.Shard, stale.Revision) // the store met it: shard.<S> is at least there
	}
	h.answerErr(c, code, format, args...)
}

// logWrite logs a failed write of an instance with the commands it carried (rate-limited per
// result: a zombie's every instance is rejected at once).
func (in *instance) logWrite(level slog.Level, msg string, answers []answer, err error) {
	h := in.sh.h
	if !in.sh.log.Enabled(context.Background(), level) {
		return
	}
	result := writeResult(err)
	emit, suppressed := h.diagLimit.Allow("write:"+result, time.Now())
	if !emit {
		return
	}
	ids := make([]string, 0, len(answers))
	fps := make([]string, 0, len(answers))
	for _, a := range answers {
		ids = append(ids, a.c.Key())
		fps = append(fps, logkey.FormatFingerprint(a.c.Fingerprint))
	}
	cur := h.fenceOf(in.grant.Shard).rev.Load()
	var stale *store.StaleOwnerError
	if errors.As(err, &stale) && stale.Revision != 0 {
		cur = stale.Revision // the revision the store met
	}
	attrs := []any{logkey.Instance, in.id, logkey.Token, in.grant.Token, logkey.CurrentRevision, cur,
		logkey.RequestID, strings.Join(ids, ","), logkey.Fingerprint, strings.Join(fps, ","), logkey.CASResult, result, logkey.Err, err}
	if suppressed > 0 {
		attrs = append(attrs, logkey.Suppressed, suppressed)
	}
	in.sh.log.Log(context.Background(), level, msg, attrs...)
}
