package shard_test

import (
	"context"
	"encoding/base64"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickfence/tickfence/store"
)

// TestMissingBlobDoesNotTakeTheShardDown: one record of a shard points at a blob that is
// gone (collected by mistake, lost with its bucket). A new owner of the shard should still serve
// every other instance of it (an unreadable state is "not loaded", as a bad record is); instead
// loadOne retries ErrBlobMissing forever and the shard never starts.
func TestMissingBlobDoesNotTakeTheShardDown(t *testing.T) {
	var jet backend
	for _, b := range backends(t) {
		if b.nc != nil {
			jet = b
		}
	}
	a := newNode(t, jet.open(t), "a", nodeOpt{})
	const s = 4
	a.grant(s)
	big, small := idIn(s, 1), idIn(s, 2)
	mustOK(t, a.send(big, "c1", map[string]any{"type": "create", "kind": "counter"}), "create big")
	mustOK(t, a.send(big, "g1", map[string]any{"type": "grow", "n": store.BlobThreshold + 1000}), "grow")
	mustOK(t, a.send(small, "c2", map[string]any{"type": "create", "kind": "counter"}), "create small")
	mustOK(t, a.send(small, "a1", map[string]any{"type": "add", "by": 7}), "add")
	rec, _ := load(t, a.st, big)
	if rec.Blob == nil {
		t.Fatal("the big state is not in a blob")
	}
	// The object's meta goes (the blobs bucket takes no roll-up, so no Object Store Delete: a purge).
	js, _ := jetstream.New(jet.nc(t))
	st, err := js.Stream(context.Background(), "OBJ_"+store.BlobBucket)
	if err != nil {
		t.Fatal(err)
	}
	meta := "$O." + store.BlobBucket + ".M." + base64.URLEncoding.EncodeToString([]byte(rec.Blob.Name))
	if err := st.Purge(context.Background(), jetstream.WithPurgeSubject(meta)); err != nil {
		t.Fatal(err)
	}
	b := newNode(t, jet.open(t), "b", nodeOpt{})
	ctx := context.Background()
	_, rev, _ := b.st.Assignment(ctx, 1, s)
	asg := store.Assignment{Owner: "b", Session: "b-s1"}
	tok, err := b.st.Assign(ctx, 1, s, asg, rev)
	if err != nil {
		t.Fatal(err)
	}
	b.host.Apply(store.AssignmentEvent{Shard: s, Revision: tok, Assignment: asg})
	deadline := time.Now().Add(5 * time.Second)
	for !b.host.Running(s) {
		if time.Now().After(deadline) {
			t.Fatalf("shard %d is still not running on b after 5 s: one missing blob keeps all its instances (%s among them) out of service", s, small)
		}
		time.Sleep(10 * time.Millisecond)
	}
	mustOK(t, b.send(small, "g2", map[string]any{"type": "get"}), "get small on b")
}
