package clustertest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickfence/tickfence/internal/history"
	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/natskv"
)

// TestHistoryCheckOnR3: history.Check reads the whole history of an R3 data bucket. (Its ordered
// consumer made a new consumer for every Next, on the stream leader, and the pull that followed
// could reach the client's server before the new consumer's interest had crossed the route: "no
// responders", within a few hundred messages.)
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
	got, err := history.Check(cctx, js, bucket)
	if err != nil || !got.OK() || got.Messages != 602 { // the shard key, the Create and 600 writes
		t.Fatalf("history.Check on an R3 stream: %s, %v; want all 602 messages, OK", got, err)
	}
}
