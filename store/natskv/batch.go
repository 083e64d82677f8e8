package natskv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/tickfence/tickfence/store"
)

// Atomic batch publishing (server ≥ 2.12, a stream with AllowAtomicPublish): every message of a
// batch carries Nats-Batch-Id and its Nats-Batch-Sequence (1, 2, …); the last one also carries
// Nats-Batch-Commit and alone gets an acknowledgement, for the whole batch. The server stages the
// batch and commits it as one proposal (one raft entry on a replicated stream), all or nothing.
const (
	headerBatchID     = "Nats-Batch-Id"
	headerBatchSeq    = "Nats-Batch-Sequence"
	headerBatchCommit = "Nats-Batch-Commit"

	codeBatchesOff         = jetstream.ErrorCode(10174) // atomic publish disabled on the stream
	codeBatchIncomplete    = jetstream.ErrorCode(10176) // a message of the batch went missing: nothing stored
	codeBatchesInFlight    = jetstream.ErrorCode(10210) // too many batches staged on the stream or server
	codeBatchTooLarge      = jetstream.ErrorCode(10199) // over the server's max_batch_size
	defaultBatchesInFlight = 16
)

var _ store.BatchWriter = (*Store)(nil)

// batchAck is the commit's acknowledgement: the sequence of the batch's last message and how many
// it stored, or the server's error.
type batchAck struct {
	Seq   uint64              `json:"seq"`
	Count int                 `json:"count"`
	Error *jetstream.APIError `json:"error"`
}

// nbatch is a batch ready to send: msgs[k] is the fenced message of writes[idx[k]] (ids[k]).
type nbatch struct {
	g       store.Grant
	idx     []int
	ids     []string
	msgs    []*nats.Msg
	settles []func(uint64, error) // the blob writer's, per message
}

func (b *nbatch) op() string {
	return fmt.Sprintf("batch of %d writes (%s…)", len(b.ids), b.ids[0])
}

// WriteBatch implements store.BatchWriter. Each message of the batch carries the fence on
// shard.<S> (the server checks it once and reuses the result within the batch). The commit's
// acknowledgement is awaited on a goroutine of its own; the batches of one data bucket in flight
// at once are bounded by Options.MaxBatchesInFlight (the server refuses more than 50 per stream by
// default, counting every node's).
func (s *Store) WriteBatch(g store.Grant, writes []store.BatchWrite, done func(int, uint64, error)) {
	ctx := context.Background()
	b := &nbatch{g: g}
	held := false
	for i, w := range writes {
		m, settle, err := s.fencedMsg(ctx, g, w.ID, &w.Rec)
		if err != nil {
			done(i, 0, err)
			continue
		}
		b.idx, b.ids, b.msgs = append(b.idx, i), append(b.ids, w.ID), append(b.msgs, m)
		b.settles = append(b.settles, settle)
		held = held || s.holds(w.ID)
	}
	if len(b.msgs) == 0 {
		return
	}
	fail := func(err error) {
		for k, i := range b.idx {
			b.settles[k](0, err)
			done(i, 0, fmt.Errorf("write %s: %w", b.ids[k], err))
		}
	}
	if held {
		s.mu.Lock()
		s.held = append(s.held, heldBatch{s: s, b: b})
		s.mu.Unlock()
		fail(fmt.Errorf("its batch is held by fault injection: %w", store.ErrUnknownOutcome))
		return
	}
	select {
	case <-s.quit:
		fail(fmt.Errorf("store closed: %w", store.ErrUnknownOutcome))
		return
	default:
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		revs, err := s.commitBatch(b)
		if err != nil {
			fail(err)
			return
		}
		for k, i := range b.idx {
			b.settles[k](revs[k], nil)
			done(i, revs[k], nil)
		}
	}()
}

func (s *Store) holds(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hold != nil && s.hold(id)
}

// slot takes one of the bucket's batch slots; the returned func gives it back.
func (s *Store) slot(ctx context.Context, bucket string) (func(), error) {
	s.mu.Lock()
	sem := s.batchSlots[bucket]
	if sem == nil {
		sem = make(chan struct{}, s.opts.MaxBatchesInFlight)
		s.batchSlots[bucket] = sem
	}
	s.mu.Unlock()
	select {
	case sem <- struct{}{}:
		return func() { <-sem }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.quit:
		return nil, errors.New("store closed")
	}
}

// commitBatch sends a batch and waits for its acknowledgement, sending it again (under a new batch
// ID) while the server refuses it for a reason that stores nothing and passes: the fence subject
// busy with another proposal (10164), too many batches staged (10210), a message gone missing
// (10176). It returns each message's revision.
func (s *Store) commitBatch(b *nbatch) ([]uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.AckTimeout)
	defer cancel()
	_, bucket, err := s.dataKV(ctx, b.g.Epoch, b.g.Shard)
	if err != nil {
		return nil, err
	}
	// The wait for a slot is not the commit's: a slot comes back within an AckTimeout, and only
	// then does the batch's own AckTimeout start (nothing was sent yet, so no outcome is unknown).
	release, err := s.slot(context.Background(), bucket)
	if err != nil {
		return nil, fmt.Errorf("%s: no batch slot: %w: %v", b.op(), store.ErrRefused, err)
	}
	defer release()
	cancel()
	ctx, cancel = context.WithTimeout(context.Background(), s.opts.AckTimeout)
	defer cancel()
	for backoff := time.Millisecond; ; backoff = min(2*backoff, 50*time.Millisecond) {
		ack, err := s.sendBatch(ctx, b)
		if noneTook(err) && ctx.Err() == nil {
			// Nobody took the commit: the stream's leadership is moving (the old leader stopped
			// taking its subjects before the new one started) or its interest has not crossed the
			// routes yet. Nothing was stored; send the batch again, under a new ID.
			select {
			case <-s.quit:
				return nil, fmt.Errorf("%s: store closed: %w", b.op(), store.ErrUnknownOutcome)
			case <-time.After(backoff):
			}
			continue
		}
		if err != nil {
			// The commit may have been sent: whether it was stored is not known.
			return nil, fmt.Errorf("%s: %w: %v", b.op(), store.ErrUnknownOutcome, err)
		}
		if ack.Error == nil {
			if ack.Count != len(b.msgs) || ack.Seq < uint64(ack.Count) {
				return nil, fmt.Errorf("%s: the server acknowledged %d messages ending at %d: %w", b.op(), ack.Count, ack.Seq, store.ErrUnknownOutcome)
			}
			revs := make([]uint64, len(b.msgs))
			for k := range revs {
				revs[k] = ack.Seq - uint64(len(revs)-1-k)
			}
			return revs, nil
		}
		switch ack.Error.ErrorCode {
		case codeSubjectBusy, codeBatchesInFlight, codeBatchIncomplete:
		case codeBatchesOff:
			return nil, fmt.Errorf("%s: %w: %w: %v", b.op(), store.ErrBatchesOff, store.ErrRefused, ack.Error)
		case codeBatchTooLarge:
			return nil, fmt.Errorf("%s: over the server's max_batch_size: %w: %v", b.op(), store.ErrRefused, ack.Error)
		default:
			return nil, s.metHolder(ctx, classifyFenced(b.op(), b.g, ack.Error))
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s: %w: %v (last refusal: %v)", b.op(), store.ErrUnknownOutcome, ctx.Err(), ack.Error)
		case <-s.quit:
			return nil, fmt.Errorf("%s: store closed: %w", b.op(), store.ErrUnknownOutcome)
		case <-time.After(backoff):
		}
	}
}

// sendBatch publishes the batch under a fresh ID and waits for the commit's acknowledgement.
func (s *Store) sendBatch(ctx context.Context, b *nbatch) (batchAck, error) {
	id := []string{nuid.Next()}
	last := len(b.msgs) - 1
	for k, m := range b.msgs {
		m.Header[headerBatchID] = id
		m.Header[headerBatchSeq] = []string{strconv.Itoa(k + 1)}
		if k < last {
			if err := s.nc.PublishMsg(m); err != nil {
				return batchAck{}, err
			}
		}
	}
	m := b.msgs[last]
	m.Header[headerBatchCommit] = []string{"1"}
	reply, err := s.nc.RequestMsgWithContext(ctx, m)
	delete(m.Header, headerBatchCommit)
	if err != nil {
		return batchAck{}, err
	}
	var ack batchAck
	if err := json.Unmarshal(reply.Data, &ack); err != nil {
		return batchAck{}, fmt.Errorf("batch acknowledgement %.100q: %w", reply.Data, err)
	}
	return ack, nil
}

type heldBatch struct {
	s *Store
	b *nbatch
}

func (h heldBatch) Instance() string { return h.b.ids[0] }
func (h heldBatch) Deliver(context.Context) error {
	_, err := h.s.commitBatch(h.b)
	return err
}
