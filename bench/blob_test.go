package bench

import (
	"context"
	"fmt"
	"testing"

	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/natskv"
)

// BenchmarkFencedWriteJetStream is one synchronous fenced write to a real embedded JetStream
// server (file storage): a small state in the record, a state just under the blob threshold
// still in the record, and a state over it, uploaded to the Object Store before the record that
// points at it. Read the blob's cost against the in-record writes of the same run.
func BenchmarkFencedWriteJetStream(b *testing.B) {
	ctx := context.Background()
	srv, err := natsserver.Start(natsserver.Config{DataDir: b.TempDir()})
	if err != nil {
		b.Fatalf("embedded NATS server: %v", err)
	}
	defer srv.Stop()
	nc, err := natskv.Connect("", srv.ConnectOption())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	st, err := natskv.Open(nc, natskv.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Bootstrap(ctx, store.Cluster{Shards: 1, Partitions: 1, Epoch: 1}); err != nil {
		b.Fatal(err)
	}
	a := store.Assignment{Owner: "n", Session: "s"}
	tok, err := st.Assign(ctx, 1, 0, a, 0)
	if err != nil {
		b.Fatal(err)
	}
	g := store.Grant{Epoch: 1, Shard: 0, Token: tok, Assignment: a}
	for _, size := range []int{4 << 10, store.BlobThreshold - 1024, store.BlobThreshold + 1024, 1 << 20} {
		where := "record"
		if size > store.BlobThreshold {
			where = "blob"
		}
		b.Run(fmt.Sprintf("%s-%dKiB", where, size>>10), func(b *testing.B) {
			id := fmt.Sprintf("i%d", size)
			if _, err := st.Create(ctx, g, id, store.Record{Kind: "k"}); err != nil {
				b.Fatal(err)
			}
			state := make([]byte, size)
			b.SetBytes(int64(size))
			tick := uint64(0)
			for b.Loop() {
				tick++
				state[0]++ // a changed state: a blob's write uploads it (an unchanged one keeps its pointer)
				if _, err := st.Write(ctx, g, id, store.Record{Kind: "k", Tick: tick, State: state}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
