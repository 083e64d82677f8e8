package storetest

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tickfence/tickfence/store"
)

// RunBatch runs the suite of store.BatchWriter (the write strategy of replicated streams,
// DESIGN 10). The backend's stores must implement it.
func RunBatch(t *testing.T, b Backend) {
	tests := []struct {
		name string
		fn   func(*testing.T, *fixture, store.BatchWriter)
	}{
		{"BatchStoresEveryWrite", testBatchStores},
		{"StaleBatchStoresNothing", testBatchStale},
		{"BadWriteLeavesTheBatch", testBatchBadWrite},
		{"HeldBatchLandsLateAndIsFenced", testBatchHeld},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := setup(t, b)
			bw, ok := f.s.(store.BatchWriter)
			if !ok {
				t.Fatalf("%T does not implement store.BatchWriter", f.s)
			}
			tc.fn(t, f, bw)
		})
	}
}

type batchResult struct {
	i   int
	rev uint64
	err error
}

// writeBatch runs WriteBatch and returns every write's outcome by index, failing the test if a
// write gets none or two.
func writeBatch(t *testing.T, bw store.BatchWriter, g store.Grant, writes []store.BatchWrite) []batchResult {
	t.Helper()
	ch := make(chan batchResult, 2*len(writes))
	bw.WriteBatch(g, writes, func(i int, rev uint64, err error) { ch <- batchResult{i, rev, err} })
	out := make([]batchResult, len(writes))
	got := make([]bool, len(writes))
	timeout := time.After(30 * time.Second)
	for range writes {
		select {
		case r := <-ch:
			if r.i < 0 || r.i >= len(writes) || got[r.i] {
				t.Fatalf("WriteBatch: done called for index %d twice or out of range", r.i)
			}
			got[r.i], out[r.i] = true, r
		case <-timeout:
			t.Fatalf("WriteBatch: %d of %d writes got no outcome in 30s", len(writes)-countTrue(got), len(writes))
		}
	}
	select {
	case r := <-ch:
		t.Fatalf("WriteBatch: an extra outcome for index %d", r.i)
	case <-time.After(50 * time.Millisecond):
	}
	return out
}

func countTrue(bs []bool) (n int) {
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// batchOf makes instances of shard 3 with state "v0" and a batch writing "<prefix>-<id>" to each.
func (f *fixture) batchOf(n, base int, prefix string) ([]string, []store.BatchWrite) {
	ids := make([]string, n)
	writes := make([]store.BatchWrite, n)
	for i := range ids {
		ids[i] = idIn(3, base+i)
		f.create(f.a, ids[i], "v0")
		writes[i] = store.BatchWrite{ID: ids[i], Rec: store.Record{Kind: "test", Tick: 5, State: []byte(prefix + "-" + ids[i])}}
	}
	return ids, writes
}

func testBatchStores(t *testing.T, f *fixture, bw store.BatchWriter) {
	ids, writes := f.batchOf(12, 300, "b1")
	seen := map[uint64]bool{}
	for i, r := range writeBatch(t, bw, f.a, writes) {
		if r.err != nil || r.rev == 0 || seen[r.rev] {
			t.Fatalf("write %d of the batch: rev %d, err %v (want a distinct revision, no error)", i, r.rev, r.err)
		}
		seen[r.rev] = true
		rec, rev := f.mustLoad(3, ids[i])
		if rev != r.rev || rec.Token != f.a.Token {
			t.Errorf("%s: loaded revision %d token %d, batch said revision %d under token %d", ids[i], rev, rec.Token, r.rev, f.a.Token)
		}
	}
	for _, id := range ids {
		f.wantState(3, id, "b1-"+id)
	}
	// A second batch over the same instances: records move on together.
	for i := range writes {
		writes[i].Rec.State = []byte("b2-" + ids[i])
	}
	for i, r := range writeBatch(t, bw, f.a, writes) {
		if r.err != nil {
			t.Fatalf("second batch, write %d: %v", i, r.err)
		}
	}
	for _, id := range ids {
		f.wantState(3, id, "b2-"+id)
	}
}

func testBatchStale(t *testing.T, f *fixture, bw store.BatchWriter) {
	ids, writes := f.batchOf(8, 400, "zombie")
	f.grant(3, "B", f.a.Token)
	for i, r := range writeBatch(t, bw, f.a, writes) {
		var se *store.StaleOwnerError
		if !errors.As(r.err, &se) || r.rev != 0 {
			t.Fatalf("stale batch, write %d: rev %d, err %v; want a *store.StaleOwnerError", i, r.rev, r.err)
		}
		if se.Revision == 0 || se.Revision == f.a.Token {
			t.Errorf("stale batch, write %d: the store met revision %d; want the new grant's", i, se.Revision)
		}
	}
	for _, id := range ids {
		f.wantState(3, id, "v0")
	}
	// A rotation fences a batch under the old token the same way.
	g2 := f.grant(3, "C", f.mustAssignRev(3))
	rot, err := f.s.Rotate(context.Background(), g2)
	if err != nil {
		t.Fatalf("Rotate: %v", err)
	}
	for i := range writes {
		writes[i].Rec.State = []byte("old-token")
	}
	for i, r := range writeBatch(t, bw, g2, writes) {
		if !errors.Is(r.err, store.ErrStaleOwner) {
			t.Fatalf("batch under the token rotated away from, write %d: err %v; want ErrStaleOwner", i, r.err)
		}
	}
	for i := range writes {
		writes[i].Rec.State = []byte("rotated-" + ids[i])
	}
	for i, r := range writeBatch(t, bw, rot, writes) {
		if r.err != nil {
			t.Fatalf("batch under the rotated token, write %d: %v", i, r.err)
		}
	}
	for _, id := range ids {
		f.wantState(3, id, "rotated-"+id)
	}
}

// mustAssignRev is shard.<S>'s current revision.
func (f *fixture) mustAssignRev(shard uint32) uint64 {
	f.t.Helper()
	_, rev, err := f.s.LatestAssignment(context.Background(), 1, shard)
	if err != nil {
		f.t.Fatalf("LatestAssignment(%d): %v", shard, err)
	}
	return rev
}

func testBatchBadWrite(t *testing.T, f *fixture, bw store.BatchWriter) {
	ids, writes := f.batchOf(4, 500, "good")
	big := store.Record{Kind: "test", State: bytes.Repeat([]byte{7}, store.MaxBlobBytes+1)}
	writes = append(writes,
		store.BatchWrite{ID: "bad id!", Rec: store.Record{Kind: "test", State: []byte("x")}},
		store.BatchWrite{ID: ids[0] + "x", Rec: big})
	rs := writeBatch(t, bw, f.a, writes)
	for i := range ids {
		if rs[i].err != nil {
			t.Errorf("good write %d beside bad ones: %v", i, rs[i].err)
		}
	}
	if err := rs[len(ids)].err; !errors.Is(err, store.ErrInvalidID) {
		t.Errorf("invalid ID in a batch: err %v, want ErrInvalidID", err)
	}
	if err := rs[len(ids)+1].err; !errors.Is(err, store.ErrTooLarge) {
		t.Errorf("oversized record in a batch: err %v, want ErrTooLarge", err)
	}
	for _, id := range ids {
		f.wantState(3, id, "good-"+id)
	}
	if _, _, err := f.s.Load(context.Background(), 1, 3, ids[0]+"x"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the oversized write's instance: Load err %v, want ErrNotFound", err)
	}
}

// testBatchHeld loses a batch's answer (held by fault injection), rotates as an owner must, and
// then lets the batch land late: the fence refuses every write of it.
func testBatchHeld(t *testing.T, f *fixture, bw store.BatchWriter) {
	fi, ok := f.s.(store.FaultInjector)
	if !ok {
		t.Fatalf("%T does not implement store.FaultInjector", f.s)
	}
	ids, writes := f.batchOf(5, 600, "late")
	fi.HoldWrites(func(id string) bool { return id == ids[2] })
	for i, r := range writeBatch(t, bw, f.a, writes) {
		if !errors.Is(r.err, store.ErrUnknownOutcome) {
			t.Fatalf("held batch, write %d: err %v; want ErrUnknownOutcome for every write of it", i, r.err)
		}
	}
	fi.HoldWrites(nil)
	held := fi.TakeHeld()
	if len(held) != 1 {
		t.Fatalf("%d held writes, want the one batch", len(held))
	}
	if _, err := f.s.Rotate(context.Background(), f.a); err != nil {
		t.Fatalf("Rotate: %v", err)
	}
	if err := held[0].Deliver(context.Background()); !errors.Is(err, store.ErrStaleOwner) {
		t.Fatalf("late batch after a rotation: %v, want ErrStaleOwner", err)
	}
	for _, id := range ids {
		f.wantState(3, id, "v0")
	}
}
