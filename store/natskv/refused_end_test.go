package natskv_test

import (
	"context"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickfence/tickfence/store"
)

// A full data bucket (an operator's MaxBytes; KV streams discard new) refuses a tombstone's
// delete marker with an API error: store.Refused says the token is still good.
func TestEndOnAFullBucketIsRefused(t *testing.T) {
	ctx := context.Background()
	s, nc := storeAndConn(t)
	cl, err := s.Bootstrap(ctx, store.Cluster{Shards: 8, Partitions: 1, Epoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	a := store.Assignment{Owner: "n1", Session: "n1-s1"}
	tok, err := s.Assign(ctx, cl.Epoch, 3, a, 0)
	if err != nil {
		t.Fatal(err)
	}
	g := store.Grant{Epoch: cl.Epoch, Shard: 3, Token: tok, Assignment: a}
	id := idInShard(t, cl, 3)
	if _, err := s.Create(ctx, g, id, store.Record{Kind: "counter"}); err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	for n := range js.StreamNames(ctx).Name() {
		if !strings.Contains(n, "data") {
			continue
		}
		st, err := js.Stream(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		info, _ := st.Info(ctx)
		cfg := info.Config
		cfg.MaxBytes = int64(info.State.Bytes)
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	_, err = s.End(ctx, g, id)
	t.Logf("End on a full bucket: %v (Refused=%v)", err, store.Refused(err))
	if err == nil || !store.Refused(err) {
		t.Skipf("not a definite refusal here: %v", err)
	}
}
