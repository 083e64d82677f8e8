package natskv_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/natskv"
)

// blobsEnv is a store on a fresh server with shard 0 of a 1-shard cluster granted, and an admin's
// view of the blobs bucket's stream.
type blobsEnv struct {
	st  *natskv.Store
	js  jetstream.JetStream
	nc  *nats.Conn
	g   store.Grant
	srv *natsserver.Server
}

func newBlobsEnv(t *testing.T) *blobsEnv {
	t.Helper()
	srv, err := natsserver.Start(natsserver.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	e := &blobsEnv{srv: srv, st: openOn(t, srv)}
	ctx := context.Background()
	if _, err := e.st.Bootstrap(ctx, store.Cluster{Shards: 1, Partitions: 1, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	a := store.Assignment{Owner: "n", Session: "s"}
	tok, err := e.st.Assign(ctx, 1, 0, a, 0)
	if err != nil {
		t.Fatal(err)
	}
	e.g = store.Grant{Epoch: 1, Shard: 0, Token: tok, Assignment: a}
	if e.nc, err = natskv.Connect("", srv.ConnectOption()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.nc.Close)
	e.js, _ = jetstream.New(e.nc)
	return e
}

func (e *blobsEnv) stream(t *testing.T) jetstream.Stream {
	t.Helper()
	s, err := e.js.Stream(context.Background(), "OBJ_"+store.BlobBucket)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestBlobBucketRefusesRollups: the blobs bucket's stream takes no roll-up, so a publish with
// Nats-Rollup: all — allowed by the subject permissions of anyone who may upload a blob — cannot
// empty it; objects are still written and read the Object Store's way.
func TestBlobBucketRefusesRollups(t *testing.T) {
	e := newBlobsEnv(t)
	ctx := context.Background()
	big := bytes.Repeat([]byte("r"), store.BlobThreshold+1)
	if _, err := e.st.Create(ctx, e.g, "i", store.Record{Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.Write(ctx, e.g, "i", store.Record{Kind: "k", Tick: 1, State: big}); err != nil {
		t.Fatal(err)
	}
	s := e.stream(t)
	if s.CachedInfo().Config.AllowRollup {
		t.Fatal("the blobs bucket allows roll-ups")
	}
	for _, subj := range []string{"$O." + store.BlobBucket + ".M.x", "$O." + store.BlobBucket + ".C.x"} {
		for _, rollup := range []string{"all", "sub"} {
			_, err := e.js.PublishMsg(ctx, &nats.Msg{Subject: subj, Header: nats.Header{"Nats-Rollup": {rollup}}})
			var ae *jetstream.APIError
			if !errors.As(err, &ae) || !strings.Contains(ae.Description, "rollup") {
				t.Errorf("roll-up (%s) on %s: %v, want refused (rollup not permitted)", rollup, subj, err)
			}
		}
	}
	if r, _, err := e.st.Load(ctx, 1, 0, "i"); err != nil || !bytes.Equal(r.State, big) {
		t.Fatalf("the state after the roll-up attempts: %d bytes, %v", len(r.State), err)
	}
	// Any Object Store client reads it.
	obs, err := e.js.ObjectStore(ctx, store.BlobBucket)
	if err != nil {
		t.Fatal(err)
	}
	r, _, _ := e.st.Load(ctx, 1, 0, "i")
	got, err := obs.GetBytes(ctx, r.Blob.Name)
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("Object Store read of %s: %d bytes, %v", r.Blob.Name, len(got), err)
	}
}

// TestBlobBucketMadeBeforeIsRepaired: a blobs bucket made by an older tickfence (the Object Store's
// own stream, roll-ups allowed) is updated by Init to refuse them, keeping its objects; an
// OpenOnly store (a node) says it cannot.
func TestBlobBucketMadeBeforeIsRepaired(t *testing.T) {
	srv, err := natsserver.Start(natsserver.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	ctx := context.Background()
	nc, err := natskv.Connect("", srv.ConnectOption())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	obs, err := js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: store.BlobBucket})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obs.PutBytes(ctx, "old/1-1-1", []byte("kept")); err != nil {
		t.Fatal(err)
	}
	var steps []natskv.Step
	admin, err := natskv.Open(nc, natskv.Options{Progress: func(s natskv.Step) { steps = append(steps, s) }})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.Init(ctx, store.Cluster{Shards: 1, Partitions: 1, Epoch: 1}, nil); err != nil {
		t.Fatal(err)
	}
	var blobStep natskv.Step
	for _, s := range steps {
		if s.What == "blobs bucket" {
			blobStep = s
		}
	}
	if blobStep.State != natskv.StepUpdated {
		t.Errorf("Init's blobs bucket step: %+v, want updated", blobStep)
	}
	s, _ := js.Stream(ctx, "OBJ_"+store.BlobBucket)
	if s.CachedInfo().Config.AllowRollup {
		t.Fatal("the blobs bucket still takes roll-ups after Init")
	}
	if got, err := obs.GetBytes(ctx, "old/1-1-1"); err != nil || string(got) != "kept" {
		t.Fatalf("an object of the old bucket after the update: %q, %v", got, err)
	}
}

// TestBlobNameWrittenOnce: an object's name is written once; uploading it again with the same
// bytes (a restore putting back a blob still there) succeeds and makes it new to a collector,
// with other bytes it fails and the object keeps its bytes.
func TestBlobNameWrittenOnce(t *testing.T) {
	e := newBlobsEnv(t)
	ctx := context.Background()
	bl := e.st.Blobs(ctx)
	if _, err := bl.PutBlob("i/1-1-1", []byte("first")); err != nil {
		t.Fatal(err)
	}
	obs, _ := e.js.ObjectStore(ctx, store.BlobBucket)
	before, _ := obs.GetInfo(ctx, "i/1-1-1")
	time.Sleep(10 * time.Millisecond)
	if _, err := bl.PutBlob("i/1-1-1", []byte("other")); err == nil {
		t.Fatal("a name was uploaded again with other bytes")
	}
	if got, err := bl.GetBlob("i/1-1-1"); err != nil || string(got) != "first" {
		t.Fatalf("after the refused upload: %q, %v", got, err)
	}
	if d, err := bl.PutBlob("i/1-1-1", []byte("first")); err != nil || d != store.BlobDigest([]byte("first")) {
		t.Fatalf("the same bytes again: %s, %v", d, err)
	}
	after, _ := obs.GetInfo(ctx, "i/1-1-1")
	if !after.ModTime.After(before.ModTime) {
		t.Errorf("modification time after the same bytes again: %v, was %v; want later (a collector's listing is stale)", after.ModTime, before.ModTime)
	}
	if got, err := bl.GetBlob("i/1-1-1"); err != nil || string(got) != "first" {
		t.Fatalf("after the second upload: %q, %v", got, err)
	}
}

// TestCollectorSweepsOrphanChunks: chunks no object names (an upload that stopped before its meta,
// the chunks a name's second upload replaced) go once older than the grace period; the chunks of
// a live object never do.
func TestCollectorSweepsOrphanChunks(t *testing.T) {
	e := newBlobsEnv(t)
	ctx := context.Background()
	big := bytes.Repeat([]byte("c"), store.BlobThreshold+1)
	if _, err := e.st.Create(ctx, e.g, "i", store.Record{Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.Write(ctx, e.g, "i", store.Record{Kind: "k", Tick: 1, State: big}); err != nil {
		t.Fatal(err)
	}
	// An upload that died after its chunks.
	if _, err := e.js.Publish(ctx, "$O."+store.BlobBucket+".C.deadupload", []byte("half")); err != nil {
		t.Fatal(err)
	}
	res, err := e.st.CollectBlobs(ctx, time.Hour, false)
	if err != nil || res.OrphanChunks != 0 {
		t.Fatalf("with a 1 h grace: %+v, %v; want the young orphan kept", res, err)
	}
	res, err = e.st.CollectBlobs(ctx, 0, false)
	if err != nil || res.OrphanChunks != 1 || len(res.Deleted) != 0 {
		t.Fatalf("with no grace: %+v, %v; want one orphan upload swept, no object deleted", res, err)
	}
	info, err := e.stream(t).Info(ctx, jetstream.WithSubjectFilter("$O."+store.BlobBucket+".C.>"))
	if err != nil || len(info.State.Subjects) != 1 {
		t.Fatalf("chunk subjects after the sweep: %v, %v; want the live object's only", info.State.Subjects, err)
	}
	if r, _, err := e.st.Load(ctx, 1, 0, "i"); err != nil || !bytes.Equal(r.State, big) {
		t.Fatalf("the live state after the sweep: %d bytes, %v", len(r.State), err)
	}
}
