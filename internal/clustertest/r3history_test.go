package clustertest_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickfence/tickfence/internal/history"
	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/natskv"
)

// readHistory reads every message of a data bucket's stream in order, with a pull consumer of its
// own that it recreates at the next sequence after any error. history.Check's ordered consumer
// cannot read an R3 stream (TestHistoryCheckOnR3).
func readHistory(ctx context.Context, js jetstream.JetStream, bucket string) ([]history.Message, error) {
	stream, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return nil, err
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, err
	}
	st := info.State
	if st.FirstSeq > 1 || st.Msgs != st.LastSeq-st.FirstSeq+1 {
		return nil, fmt.Errorf("stream holds %d messages of sequences %d..%d: revisions were dropped, the check would prove nothing",
			st.Msgs, st.FirstSeq, st.LastSeq)
	}
	prefix := "$KV." + bucket + "."
	msgs := make([]history.Message, 0, st.Msgs)
	var last error
	for uint64(len(msgs)) < st.LastSeq {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("read message %d of %d: %w (last: %v)", len(msgs)+1, st.LastSeq, ctx.Err(), last)
		}
		next := uint64(len(msgs)) + 1
		cons, err := stream.CreateConsumer(ctx, jetstream.ConsumerConfig{AckPolicy: jetstream.AckNonePolicy,
			DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: next, MemoryStorage: true, Replicas: 1,
			InactiveThreshold: time.Minute})
		if err != nil {
			last = err
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for uint64(len(msgs)) < st.LastSeq {
			batch, err := cons.Fetch(256, jetstream.FetchMaxWait(2*time.Second))
			if err != nil {
				last = err
				break
			}
			gap := false
			for msg := range batch.Messages() {
				meta, err := msg.Metadata()
				if err != nil {
					return nil, err
				}
				if meta.Sequence.Stream != uint64(len(msgs))+1 { // a batch lost on the way
					gap = true
					break
				}
				m := history.Message{Seq: meta.Sequence.Stream, Key: strings.TrimPrefix(msg.Subject(), prefix), Value: msg.Data()}
				if op := msg.Headers().Get("KV-Operation"); op == "DEL" || op == "PURGE" {
					m.Deleted = true
					m.Token, _ = strconv.ParseUint(msg.Headers().Get("Tickfence-Token"), 10, 64)
				}
				msgs = append(msgs, m)
			}
			if gap || (batch.Error() != nil && !errors.Is(batch.Error(), nats.ErrTimeout)) {
				last = batch.Error()
				break
			}
		}
		_ = stream.DeleteConsumer(ctx, cons.CachedInfo().Name)
	}
	return msgs, nil
}

// checkR3History checks a data bucket's stored history message by message, as checkHistory does,
// reading it with readHistory.
func (c *cluster) checkR3History(bucket string) history.Report {
	c.t.Helper()
	js, err := jetstream.New(c.NC)
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	msgs, err := readHistory(ctx, js, bucket)
	if err != nil {
		c.t.Fatalf("history of %s: %v", bucket, err)
	}
	rep, err := history.CheckMessages(bucket, msgs)
	if err != nil {
		c.t.Fatalf("history of %s: %v", bucket, err)
	}
	if err := history.Require(rep); err != nil {
		c.t.Fatal(err)
	}
	c.t.Logf("history of %s: %s", bucket, rep)
	return rep
}

// TestHistoryCheckOnR3 shows a defect of internal/history: Check cannot read the history of an R3
// data bucket. Each Next of its ordered consumer creates a new consumer (nats.go resets an ordered
// consumer on every fetch), on the stream leader; the pull request that follows reaches the
// client's server before the new consumer's interest has crossed the route: "no responders". It
// fails within a few hundred messages when the client is not on the stream leader's server.
// readHistory (above) reads the same stream.
func TestHistoryCheckOnR3(t *testing.T) {
	srvs, err := natsserver.StartCluster(3, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, s := range srvs {
			s.Stop()
		}
	}()
	var urls []string
	for _, s := range srvs {
		urls = append(urls, s.ClientURL())
	}
	nc, err := natskv.Connect(strings.Join(urls, ","))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	st, err := natskv.Open(nc, natskv.Options{Replicas: 3, History: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	for start := time.Now(); ; time.Sleep(200 * time.Millisecond) {
		if _, err = st.Bootstrap(ctx, store.Cluster{Shards: 1, Partitions: 1, Epoch: 1}); err == nil {
			break
		}
		if time.Since(start) > 20*time.Second {
			t.Fatalf("bootstrap on the R3 cluster: %v", err)
		}
	}
	a := store.Assignment{Owner: "A", Session: "a"}
	tok, err := st.Assign(ctx, 1, 0, a, 0)
	if err != nil {
		t.Fatal(err)
	}
	g := store.Grant{Epoch: 1, Shard: 0, Token: tok, Assignment: a}
	if _, err := st.Create(ctx, g, "i", store.Record{Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	for tick := uint64(1); tick <= 600; tick++ {
		if _, err := st.Write(ctx, g, "i", store.Record{Kind: "k", Tick: tick}); err != nil {
			t.Fatal(err)
		}
	}
	js, _ := jetstream.New(nc)
	bucket := store.DataBucket(1, 0)
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	msgs, err := readHistory(cctx, js, bucket)
	if err != nil {
		t.Fatal(err)
	}
	want, err := history.CheckMessages(bucket, msgs)
	if err != nil || !want.OK() {
		t.Fatalf("readHistory: %s, %v", want, err)
	}
	got, err := history.Check(cctx, js, bucket)
	if err != nil || got.Messages != want.Messages {
		t.Fatalf("history.Check on an R3 stream: %s, %v; want the %d messages readHistory read", got, err, want.Messages)
	}
}
