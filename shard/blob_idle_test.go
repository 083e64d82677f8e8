package shard_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/store"
)

// vault is a test kind whose state changes only by command: "fill" makes it n bytes of one value.
// An idle vault's checkpoints write the same state again and again.
type vault struct{}

func (vault) Name() string { return "vault" }
func (vault) New(string, actor.Command) (actor.Logic, error) {
	return &vaultState{}, nil
}
func (vault) Restore(_ string, b []byte) (actor.Logic, error) {
	s := &vaultState{}
	return s, msgpack.Unmarshal(b, s)
}

type vaultState struct {
	Gold []byte `msgpack:"gold"`
}

func (s *vaultState) Tick(uint64) {}
func (s *vaultState) Handle(_ uint64, c actor.Command) (any, error) {
	var a struct {
		N int  `msgpack:"n"`
		V byte `msgpack:"v"`
	}
	if err := c.Decode(&a); err != nil {
		return nil, err
	}
	if c.Type != "fill" {
		return nil, actor.Reject("unknown %q", c.Type)
	}
	s.Gold = bytes.Repeat([]byte{a.V}, a.N)
	return map[string]any{"gold": a.N}, nil
}
func (s *vaultState) MarshalState() ([]byte, error) { return msgpack.Marshal(s) }

// blobUsage is what the blobs bucket's stream holds: its messages and bytes.
func blobUsage(t *testing.T, js jetstream.JetStream) (msgs, bytes uint64) {
	t.Helper()
	s, err := js.Stream(context.Background(), "OBJ_"+store.BlobBucket)
	if err != nil {
		t.Fatal(err)
	}
	in, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return in.State.Msgs, in.State.Bytes
}

// TestIdleLargeStateUploadsNothing (issue 35.6): an idle instance whose state is 100 KiB is
// checkpointed again and again and uploads nothing after its first blob; a change of its state
// uploads one blob; the collector then keeps only the current one. It logs the blob bytes per
// hour of an idle instance at one checkpoint a second (the raid), from the bucket's own
// size. Before: every checkpoint uploaded the whole state.
func TestIdleLargeStateUploadsNothing(t *testing.T) {
	jet := backends(t)[1]
	a := newNode(t, jet.open(t), "a", nodeOpt{checkpointEvery: 5}) // 50 ticks/s: a checkpoint every 0.1 s
	const s = 2
	a.grant(s)
	id := idIn(s, 7)
	const size = 100 << 10
	mustOK(t, a.send(id, "c", map[string]any{"type": "create", "kind": "vault"}), "create")
	mustOK(t, a.send(id, "f1", map[string]any{"type": "fill", "n": size, "v": 1}), "fill")
	js, _ := jetstream.New(jet.nc(t))
	writes := func() float64 { return testutil.ToFloat64(a.metrics.StateWrites.WithLabelValues("ok")) }
	stats := func() store.BlobStats { return a.st.(interface{ BlobStats() store.BlobStats }).BlobStats() }

	w0, st0 := writes(), stats()
	m0, b0 := blobUsage(t, js)
	time.Sleep(3 * time.Second)
	w1, st1 := writes(), stats()
	m1, b1 := blobUsage(t, js)
	checkpoints := w1 - w0
	if checkpoints < 10 {
		t.Fatalf("%v idle checkpoints in 3 s, want at least 10 (machine too loaded?)", checkpoints)
	}
	perCheckpoint := float64(b1-b0) / checkpoints
	t.Logf("idle %d KiB state: %v checkpoints, %d uploads (%d bytes), %d kept pointers; the bucket grew by %d messages, %d bytes: %.0f bytes/checkpoint, %.1f MB/h at 1 checkpoint/s",
		size>>10, checkpoints, st1.Uploads-st0.Uploads, st1.UploadBytes-st0.UploadBytes, st1.Kept-st0.Kept, m1-m0, b1-b0, perCheckpoint, perCheckpoint*3600/1e6)
	if st1.Uploads != st0.Uploads || b1 != b0 {
		t.Fatalf("an idle instance uploaded %d blobs (%d bytes) in %v checkpoints; want none", st1.Uploads-st0.Uploads, b1-b0, checkpoints)
	}
	if st1.Kept-st0.Kept < uint64(checkpoints)-1 {
		t.Errorf("%d writes kept the pointer in %v checkpoints", st1.Kept-st0.Kept, checkpoints)
	}

	// A changing state: one upload per change, however many checkpoints follow each.
	for v := 2; v <= 6; v++ {
		mustOK(t, a.send(id, "f"+string(rune('0'+v)), map[string]any{"type": "fill", "n": size, "v": v}), "fill again")
		a.ticked(10) // two checkpoints of the same state
	}
	st2 := stats()
	if got := st2.Uploads - st1.Uploads; got != 5 {
		t.Fatalf("5 changes of the state made %d uploads, want 5", got)
	}
	res, err := a.st.(interface {
		CollectBlobs(context.Context, time.Duration, bool) (store.GCResult, error)
	}).CollectBlobs(context.Background(), 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Deleted) != 5 || res.Referenced != 1 || res.DeletedBytes < 5*size {
		t.Fatalf("collection: %+v; want the 5 replaced blobs deleted (%d bytes and more), the current one referenced", res, 5*size)
	}
	a.ticked(10)
	rec, _, err := a.st.Load(context.Background(), 1, s, id)
	if err != nil || rec.Blob == nil || !bytes.Equal(rec.State[len(rec.State)-10:], bytes.Repeat([]byte{6}, 10)) {
		t.Fatalf("the current state after the collection: %v, blob %+v", err, rec.Blob)
	}
}
