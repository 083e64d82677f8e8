package natskv

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickfence/tickfence/store"
)

// leaderMsg is the last message on a subject as the stream leader holds it.
type leaderMsg struct {
	subject string
	seq     uint64
	data    []byte
	time    time.Time
	deleted bool          // a delete, purge or TTL marker
	ttl     time.Duration // its per-message TTL (Nats-TTL), 0 if none
}

// leaderGet reads the last message on a key (or a key filter with wildcards) of a bucket through
// $JS.API.STREAM.MSG.GET, which only the stream leader answers. KV buckets allow direct gets, and
// the jetstream package then uses them for every message get: any replica may answer those, so a
// decision that must see every acknowledged write reads here instead (DESIGN 4).
func (s *Store) leaderGet(ctx context.Context, bucket, key string) (leaderMsg, error) {
	return s.leaderGetBy(ctx, bucket, key, map[string]any{"last_by_subj": "$KV." + bucket + "." + key})
}

// leaderGetSeq reads the message at one sequence of a bucket's stream, from the stream leader.
func (s *Store) leaderGetSeq(ctx context.Context, bucket string, seq uint64) (leaderMsg, error) {
	return s.leaderGetBy(ctx, bucket, fmt.Sprintf("revision %d", seq), map[string]any{"seq": seq})
}

func (s *Store) leaderGetBy(ctx context.Context, bucket, key string, request map[string]any) (leaderMsg, error) {
	req, _ := json.Marshal(request)
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.opts.AckTimeout)
		defer cancel()
	}
	resp, err := s.nc.RequestWithContext(ctx, jetstream.DefaultAPIPrefix+"STREAM.MSG.GET.KV_"+bucket, req)
	if err != nil {
		return leaderMsg{}, fmt.Errorf("leader read of %s: %w", key, err)
	}
	var r struct {
		Message *struct {
			Subj string    `json:"subject"`
			Seq  uint64    `json:"seq"`
			Time time.Time `json:"time"`
			Hdrs []byte    `json:"hdrs"`
			Data []byte    `json:"data"`
		} `json:"message"`
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return leaderMsg{}, fmt.Errorf("leader read of %s: %w", key, err)
	}
	if r.Error != nil {
		if r.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound {
			return leaderMsg{}, fmt.Errorf("%s: %w", key, store.ErrNotFound)
		}
		return leaderMsg{}, fmt.Errorf("leader read of %s: %w", key, r.Error)
	}
	if r.Message == nil {
		return leaderMsg{}, fmt.Errorf("leader read of %s: empty answer", key)
	}
	m := leaderMsg{subject: r.Message.Subj, seq: r.Message.Seq, data: r.Message.Data, time: r.Message.Time}
	if len(r.Message.Hdrs) > 0 {
		h, err := nats.DecodeHeadersMsg(r.Message.Hdrs)
		if err != nil {
			return leaderMsg{}, fmt.Errorf("leader read of %s: headers: %w", key, err)
		}
		if op := h.Get(headerKVOp); op == "DEL" || op == "PURGE" || h.Get(jetstream.MarkerReasonHeader) != "" {
			m.deleted = true
		}
		m.ttl = parseTTL(h.Get(jetstream.MsgTTLHeader))
	}
	return m, nil
}

// parseTTL reads a Nats-TTL header as the server does: a Go duration ("2s", what nats.go writes)
// or whole seconds; "never", empty or malformed is no TTL.
func parseTTL(v string) time.Duration {
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return d
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return 0
}
