// Package history checks the stored history of a data bucket against the promise of DESIGN.md
// section 2, message by message: every inst.<S>.* record carries the token equal to the current
// revision of shard.<S> at that point in the stream, or is a registration that changes nothing but
// the token, or a Create of an empty record; and an instance's tick never goes backwards. A stream
// that no longer holds every message is reported incomplete, never as a pass. The history comes
// from a JetStream stream (Check) or from memstore's message log (Memstore); CheckMessages is the
// check itself, over any ordered list of messages.
package history

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/memstore"
)

// Report of a check.
type Report struct {
	Messages   int
	Records    int
	Restored   int      // records a restore wrote into this epoch before its shard keys (DESIGN 6)
	Stale      []string // records written under a token that was not current: must be empty
	Backwards  []string // ticks that went back: must be empty
	Incomplete string   // non-empty: the stream lost messages, so the check proves nothing
}

// OK reports a complete history with no violation.
func (r Report) OK() bool { return r.Incomplete == "" && len(r.Stale) == 0 && len(r.Backwards) == 0 }

func (r Report) String() string {
	return fmt.Sprintf("%d messages, %d instance records (%d restored), %d stale, %d ticks backwards, incomplete=%q",
		r.Messages, r.Records, r.Restored, len(r.Stale), len(r.Backwards), r.Incomplete)
}

type last struct {
	rec     store.Record
	present bool
}

// Message is one message of a data bucket's stream, from whichever source: a JetStream stream
// (Check) or memstore's log (Memstore).
type Message struct {
	Seq uint64
	// Key is the key within the bucket: shard.<S> or inst.<S>.<id>.
	Key   string
	Value []byte
	// Deleted marks a delete or purge marker; Token is then its Tickfence-Token header.
	Deleted bool
	Token   uint64
}

// Check reads the whole stream of a data bucket in order and checks it.
func Check(ctx context.Context, js jetstream.JetStream, bucket string) (Report, error) {
	var rep Report
	stream, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return rep, err
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return rep, err
	}
	st := info.State
	if st.FirstSeq > 1 || st.Msgs != st.LastSeq-st.FirstSeq+1 {
		rep.Incomplete = fmt.Sprintf("stream holds %d messages of sequences %d..%d: revisions were dropped (raise the data buckets' history)",
			st.Msgs, st.FirstSeq, st.LastSeq)
		return rep, nil
	}
	if st.LastSeq == 0 {
		return rep, nil
	}
	msgs, err := read(ctx, stream, bucket, st.LastSeq)
	if err != nil {
		return rep, err
	}
	return CheckMessages(bucket, msgs)
}

// read reads messages 1..last of a data bucket's stream in order, with a pull consumer of its own
// that it makes again at the next sequence after any error. (An ordered consumer makes a new
// consumer for every reset, and on a JetStream cluster the pull that follows can reach the
// client's server before the consumer's interest has crossed the route: "no responders".)
func read(ctx context.Context, stream jetstream.Stream, bucket string, last uint64) ([]Message, error) {
	prefix := "$KV." + bucket + "."
	msgs := make([]Message, 0, last)
	var lastErr error
	for uint64(len(msgs)) < last {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("read message %d of %d: %w (last error: %v)", len(msgs)+1, last, ctx.Err(), lastErr)
		}
		cons, err := stream.CreateConsumer(ctx, jetstream.ConsumerConfig{AckPolicy: jetstream.AckNonePolicy,
			DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: uint64(len(msgs)) + 1,
			MemoryStorage: true, Replicas: 1, InactiveThreshold: time.Minute})
		if err != nil {
			lastErr = err
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for uint64(len(msgs)) < last {
			batch, err := cons.Fetch(256, jetstream.FetchMaxWait(2*time.Second))
			if err != nil {
				lastErr = err
				break
			}
			gap := false
			for msg := range batch.Messages() {
				meta, err := msg.Metadata()
				if err != nil {
					return nil, err
				}
				if meta.Sequence.Stream != uint64(len(msgs))+1 { // a message lost on the way: read again from it
					gap = true
					break
				}
				m := Message{Seq: meta.Sequence.Stream, Key: strings.TrimPrefix(msg.Subject(), prefix), Value: msg.Data()}
				if op := msg.Headers().Get("KV-Operation"); op == "DEL" || op == "PURGE" {
					m.Deleted = true
					m.Token, _ = strconv.ParseUint(msg.Headers().Get("Tickfence-Token"), 10, 64)
				}
				msgs = append(msgs, m)
			}
			if gap || batch.Error() != nil && !errors.Is(batch.Error(), nats.ErrTimeout) {
				lastErr = batch.Error()
				break
			}
		}
		_ = stream.DeleteConsumer(context.WithoutCancel(ctx), cons.CachedInfo().Name)
	}
	return msgs, nil
}

// Memstore checks a data bucket of an in-memory store made with memstore.NewWithHistory.
func Memstore(s *memstore.Store, bucket string) (Report, error) {
	log := s.History(bucket)
	msgs := make([]Message, len(log))
	for i, m := range log {
		msgs[i] = Message{Seq: m.Seq, Key: m.Key, Value: m.Value, Deleted: m.Deleted, Token: m.Token}
	}
	return CheckMessages(bucket, msgs)
}

// CheckMessages checks the whole ordered history of a data bucket. A history whose sequences
// do not start at 1 or have gaps is reported incomplete.
func CheckMessages(bucket string, msgs []Message) (Report, error) {
	var rep Report
	for i, m := range msgs {
		if m.Seq != uint64(i+1) {
			rep.Incomplete = fmt.Sprintf("message %d has sequence %d: the history has gaps", i+1, m.Seq)
			return rep, nil
		}
	}
	// In an epoch after the first, a restore writes the backup's records before it rewrites the
	// shard keys: a record of a shard with no shard key yet in this stream is one of those.
	var epoch uint64
	_, _ = fmt.Sscanf(bucket, "tickfence-data-e%d-", &epoch)
	shardRev := map[string]uint64{} // "S" → sequence of the last shard.<S> message
	insts := map[string]*last{}
	for _, msg := range msgs {
		rep.Messages++
		kind, rest, _ := strings.Cut(msg.Key, ".")
		switch kind {
		case "shard":
			shardRev[rest] = msg.Seq
		case "inst":
			s, id, _ := strings.Cut(rest, ".")
			cur := shardRev[s]
			l := insts[rest]
			if l == nil {
				l = &last{}
				insts[rest] = l
			}
			if msg.Deleted {
				if msg.Token != cur {
					rep.Stale = append(rep.Stale, fmt.Sprintf("seq %d: end of %s under token %d, shard %s at %d", msg.Seq, id, msg.Token, s, cur))
				}
				l.present = false
				continue
			}
			rec, err := store.DecodeRecord(msg.Value)
			if err != nil {
				return rep, fmt.Errorf("seq %d (%s): %w", msg.Seq, msg.Key, err)
			}
			rep.Records++
			switch {
			case epoch > 1 && cur == 0:
				rep.Restored++
			case rec.Token == cur:
			case !l.present && len(rec.State) == 0:
				// A Create: an empty record, compare-on-revision of the key; no state to be stale.
			case l.present && sameButToken(l.rec, rec):
				// A registration: changes nothing but the token.
			default:
				rep.Stale = append(rep.Stale, fmt.Sprintf("seq %d: %s tick %d written under token %d, shard %s at %d",
					msg.Seq, id, rec.Tick, rec.Token, s, cur))
			}
			if l.present && rec.Tick < l.rec.Tick {
				rep.Backwards = append(rep.Backwards, fmt.Sprintf("seq %d: %s tick %d after %d", msg.Seq, id, rec.Tick, l.rec.Tick))
			}
			l.rec, l.present = rec, true
		}
	}
	return rep, nil
}

func sameButToken(a, b store.Record) bool {
	if a.Tick != b.Tick || a.Kind != b.Kind || !bytes.Equal(a.State, b.State) || len(a.Reqs) != len(b.Reqs) {
		return false
	}
	for i := range a.Reqs {
		if a.Reqs[i].ID != b.Reqs[i].ID || a.Reqs[i].Fingerprint != b.Reqs[i].Fingerprint {
			return false
		}
	}
	if len(a.Clients) != len(b.Clients) {
		return false
	}
	for i, c := range a.Clients {
		d := b.Clients[i]
		if c.ID != d.ID || c.Ack != d.Ack || len(c.Done) != len(d.Done) {
			return false
		}
		for j := range c.Done {
			if c.Done[j].Seq != d.Done[j].Seq || c.Done[j].Fingerprint != d.Done[j].Fingerprint {
				return false
			}
		}
	}
	return true
}

// ErrViolations is returned by Require when the report is not OK.
var ErrViolations = errors.New("history check failed")

// Require turns a report into an error unless it is OK.
func Require(r Report) error {
	if r.OK() {
		return nil
	}
	return fmt.Errorf("%w: %s; first stale: %v; first backwards: %v", ErrViolations, r, first(r.Stale), first(r.Backwards))
}

func first(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	return s[0]
}
