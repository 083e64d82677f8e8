// Package storetest is the conformance suite every store.Store backend must pass: the in-memory
// one and the JetStream one run exactly the same tests.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tickfence/tickfence/store"
)

// Backend makes fresh, bootstrapped-nothing stores for the suite.
type Backend struct {
	// New returns an empty store; the backend closes it when the test ends.
	New func(t *testing.T) store.Store
	// PutRaw stores raw bytes as an instance record, bypassing every check (to plant bad data).
	PutRaw func(t *testing.T, s store.Store, epoch uint64, shard uint32, id string, data []byte)
	// Peer, if set, returns another connection to the same store as s (a second operator's
	// tickctl, for RunRestore); without it both operators use s.
	Peer func(t *testing.T, s store.Store) store.Store
}

const shards = 8

// fixture is a bootstrapped store with shard 3 granted to node A.
type fixture struct {
	t  *testing.T
	s  store.Store
	b  Backend
	a  store.Grant
	cl store.Cluster
}

func setup(t *testing.T, b Backend) *fixture {
	t.Helper()
	s := b.New(t)
	ctx := context.Background()
	cl, err := s.Bootstrap(ctx, store.Cluster{Shards: shards, Partitions: 2, Epoch: 1})
	if err != nil {
		t.Fatalf("Bootstrap: %v", err)
	}
	f := &fixture{t: t, s: s, b: b, cl: cl}
	f.a = f.grant(3, "A", 0)
	return f
}

// grant assigns a shard to a node (new session), expecting the given current revision.
func (f *fixture) grant(shard uint32, node string, expect uint64) store.Grant {
	f.t.Helper()
	a := store.Assignment{Owner: node, Session: node + "-session"}
	rev, err := f.s.Assign(context.Background(), 1, shard, a, expect)
	if err != nil {
		f.t.Fatalf("Assign(shard %d to %s, expect %d): %v", shard, node, expect, err)
	}
	return store.Grant{Epoch: 1, Shard: shard, Token: rev, Assignment: a}
}

// idIn returns an instance ID of the shard.
func idIn(shard uint32, n int) string {
	for i := 0; ; i++ {
		id := fmt.Sprintf("inst-%d-%d", n, i)
		if store.ShardOf(id, shards) == shard {
			return id
		}
	}
}

// create makes an instance with initial state under g.
func (f *fixture) create(g store.Grant, id string, state string) uint64 {
	f.t.Helper()
	ctx := context.Background()
	if _, err := f.s.Create(ctx, g, id, store.Record{Kind: "test"}); err != nil {
		f.t.Fatalf("Create(%s): %v", id, err)
	}
	rev, err := f.s.Write(ctx, g, id, store.Record{Kind: "test", Tick: 1, State: []byte(state)})
	if err != nil {
		f.t.Fatalf("Write(%s) initial: %v", id, err)
	}
	return rev
}

func (f *fixture) mustLoad(shard uint32, id string) (store.Record, uint64) {
	f.t.Helper()
	r, rev, err := f.s.Load(context.Background(), 1, shard, id)
	if err != nil {
		f.t.Fatalf("Load(%s): %v", id, err)
	}
	return r, rev
}

func (f *fixture) wantState(shard uint32, id, want string) {
	f.t.Helper()
	r, _ := f.mustLoad(shard, id)
	if string(r.State) != want {
		f.t.Fatalf("stored state of %s = %q, want %q", id, r.State, want)
	}
}

// Run runs the whole suite.
func Run(t *testing.T, b Backend) {
	tests := []struct {
		name string
		fn   func(*testing.T, *fixture)
	}{
		{"Bootstrap", testBootstrap},
		{"AssignCompareOnRevision", testAssign},
		{"FencedWriteAndStaleOwner", testFence},
		{"ZombieWritesBeforeNewOwnerRegisters", testWriteBeforeRegistration},
		{"RegistrationProvesLoadWasCurrent", testRegister},
		{"CreateNeverOverwrites", testCreate},
		{"EndIsAFencedDelete", testEnd},
		{"RotationFencesOldToken", testRotate},
		{"StaleReleaseChangesNothing", testRelease},
		{"UnknownOutcomeLateCopyRejected", testLateCopy},
		{"InvalidIDsWriteNothing", testInvalidIDs},
		{"OversizedRecordWritesNothing", testOversized},
		{"MalformedStoredRecord", testMalformed},
		{"PipelinedWrites", testPipelined},
		{"WatchAssignments", testWatch},
		{"LatestAssignmentAndList", testLatestAssignment},
		{"LargeStateInABlob", testBlobs},
		{"LargeStateUploadedOnlyWhenChanged", testBlobsByChange},
		{"KeptBlobSurvivesTheCollector", testKeptBlobCollected},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, setup(t, b)) })
	}
}

func testBootstrap(t *testing.T, f *fixture) {
	ctx := context.Background()
	if f.cl != (store.Cluster{Shards: shards, Partitions: 2, Epoch: 1}) {
		t.Fatalf("Bootstrap returned %+v", f.cl)
	}
	got, err := f.s.Bootstrap(ctx, store.Cluster{Shards: 99, Partitions: 1, Epoch: 1})
	if err != nil {
		t.Fatalf("second Bootstrap: %v", err)
	}
	if got != f.cl {
		t.Fatalf("second Bootstrap returned %+v, want the stored %+v", got, f.cl)
	}
	if _, err := f.s.Bootstrap(ctx, store.Cluster{}); err == nil {
		t.Fatal("Bootstrap accepted an invalid cluster record")
	}
}

func testAssign(t *testing.T, f *fixture) {
	ctx := context.Background()
	a, rev, err := f.s.Assignment(ctx, 1, 3)
	if err != nil || a != f.a.Assignment || rev != f.a.Token {
		t.Fatalf("Assignment = %+v@%d, %v; want %+v@%d", a, rev, err, f.a.Assignment, f.a.Token)
	}
	if _, _, err := f.s.Assignment(ctx, 1, 4); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Assignment of unassigned shard: err = %v, want ErrNotFound", err)
	}
	if _, err := f.s.Assign(ctx, 1, 3, store.Assignment{Owner: "B"}, 0); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Assign over existing with expect 0: err = %v, want ErrConflict", err)
	}
	if _, err := f.s.Assign(ctx, 1, 3, store.Assignment{Owner: "B"}, f.a.Token+100); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Assign with wrong revision: err = %v, want ErrConflict", err)
	}
	if a, _, _ := f.s.Assignment(ctx, 1, 3); a != f.a.Assignment {
		t.Fatalf("failed Assigns changed shard.3 to %+v", a)
	}
}

// testFence is the seed scenario at the store level: A's grant is superseded by B's; A's write is
// rejected by the store and the record stays B's.
func testFence(t *testing.T, f *fixture) {
	ctx := context.Background()
	id := idIn(3, 0)
	f.create(f.a, id, "a1")
	b := f.grant(3, "B", f.a.Token)
	r, rev := f.mustLoad(3, id)
	if _, err := f.s.Register(ctx, b, id, r, rev); err != nil {
		t.Fatalf("B Register: %v", err)
	}
	if _, err := f.s.Write(ctx, b, id, store.Record{Kind: "test", Tick: 2, State: []byte("b2")}); err != nil {
		t.Fatalf("B Write: %v", err)
	}
	_, err := f.s.Write(ctx, f.a, id, store.Record{Kind: "test", Tick: 2, State: []byte("a2-zombie")})
	if !errors.Is(err, store.ErrStaleOwner) {
		t.Fatalf("zombie A Write: err = %v, want ErrStaleOwner", err)
	}
	// The refusal says what the store met: shard.3 at B's token, not A's (issue 11.7).
	var stale *store.StaleOwnerError
	// ... and who holds it there: B's owner and session, so the refused owner needs no read.
	metB := func(stale *store.StaleOwnerError) bool {
		return stale.Revision == b.Token && stale.HolderKnown && stale.Holder == b.Assignment
	}
	if !errors.As(err, &stale) || !metB(stale) || stale.Grant.Token != f.a.Token || stale.Sealed {
		t.Fatalf("zombie A Write: %v (%+v); want a *store.StaleOwnerError at revision %d held by %+v for token %d", err, stale, b.Token, b.Assignment, f.a.Token)
	}
	_, err = f.s.End(ctx, f.a, id)
	if !errors.As(err, &stale) || !metB(stale) {
		t.Fatalf("zombie A End: err = %v, want a *store.StaleOwnerError at revision %d held by %+v", err, b.Token, b.Assignment)
	}
	done := make(chan error, 1)
	f.s.WriteAsync(f.a, id, store.Record{Kind: "test", Tick: 3, State: []byte("a3-zombie")}, func(_ uint64, err error) { done <- err })
	if err := <-done; !errors.As(err, &stale) || !metB(stale) || !errors.Is(err, store.ErrStaleOwner) {
		t.Fatalf("zombie A WriteAsync: err = %v, want a *store.StaleOwnerError at revision %d held by %+v", err, b.Token, b.Assignment)
	}
	f.wantState(3, id, "b2")
	got, _ := f.mustLoad(3, id)
	if got.Token != b.Token {
		t.Fatalf("stored token = %d, want B's %d", got.Token, b.Token)
	}
	// A grant of one shard does not fence another shard's writes.
	other := f.grant(5, "A", 0)
	oid := idIn(5, 0)
	f.create(other, oid, "x")
	f.wantState(5, oid, "x")
}

func testWriteBeforeRegistration(t *testing.T, f *fixture) {
	ctx := context.Background()
	id := idIn(3, 1)
	f.create(f.a, id, "a1")
	f.grant(3, "B", f.a.Token) // B granted, has not loaded or registered anything
	_, err := f.s.Write(ctx, f.a, id, store.Record{Kind: "test", Tick: 2, State: []byte("a2")})
	if !errors.Is(err, store.ErrStaleOwner) {
		t.Fatalf("A Write after reassignment, before B registers: err = %v, want ErrStaleOwner", err)
	}
	f.wantState(3, id, "a1")
}

func testRegister(t *testing.T, f *fixture) {
	ctx := context.Background()
	id := idIn(3, 2)
	f.create(f.a, id, "v1")
	old, oldRev := f.mustLoad(3, id) // what a lagging replica could still return later
	if _, err := f.s.Write(ctx, f.a, id, store.Record{Kind: "test", Tick: 2, State: []byte("v2")}); err != nil {
		t.Fatal(err)
	}
	b := f.grant(3, "B", f.a.Token)
	if _, err := f.s.Register(ctx, b, id, old, oldRev); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Register of a stale load: err = %v, want ErrConflict", err)
	}
	f.wantState(3, id, "v2")
	cur, rev := f.mustLoad(3, id)
	nrev, err := f.s.Register(ctx, b, id, cur, rev)
	if err != nil {
		t.Fatalf("Register of a current load: %v", err)
	}
	after, arev := f.mustLoad(3, id)
	if arev != nrev || after.Token != b.Token || after.Tick != cur.Tick || !bytes.Equal(after.State, cur.State) {
		t.Fatalf("after Register: %+v@%d; want the loaded record with token %d at %d", after, arev, b.Token, nrev)
	}
}

func testCreate(t *testing.T, f *fixture) {
	ctx := context.Background()
	id := idIn(3, 3)
	f.create(f.a, id, "precious")
	// A listing that lags does not show the instance; Create is still refused.
	if _, err := f.s.Create(ctx, f.a, id, store.Record{Kind: "test"}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Create of an existing instance: err = %v, want ErrConflict", err)
	}
	f.wantState(3, id, "precious")
	ids, err := f.s.Instances(ctx, 1, 3)
	if err != nil || len(ids) != 1 || ids[0] != id {
		t.Fatalf("Instances(shard 3) = %v, %v; want [%s]", ids, err, id)
	}
}

func testEnd(t *testing.T, f *fixture) {
	ctx := context.Background()
	id := idIn(3, 4)
	f.create(f.a, id, "v1")
	if _, err := f.s.End(ctx, f.a, id); err != nil {
		t.Fatalf("End: %v", err)
	}
	if _, _, err := f.s.Load(ctx, 1, 3, id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Load after End: err = %v, want ErrNotFound", err)
	}
	if ids, _ := f.s.Instances(ctx, 1, 3); len(ids) != 0 {
		t.Fatalf("Instances after End = %v, want none", ids)
	}
	f.create(f.a, id, "again") // an ended instance can be created anew
	f.wantState(3, id, "again")
}

func testRotate(t *testing.T, f *fixture) {
	ctx := context.Background()
	id := idIn(3, 5)
	f.create(f.a, id, "v1")
	rotated, err := f.s.Rotate(ctx, f.a)
	if err != nil {
		t.Fatalf("Rotate: %v", err)
	}
	if rotated.Token <= f.a.Token || rotated.Assignment != f.a.Assignment {
		t.Fatalf("Rotate gave %v from %v", rotated, f.a)
	}
	if _, err := f.s.Write(ctx, f.a, id, store.Record{Kind: "test", State: []byte("old")}); !errors.Is(err, store.ErrStaleOwner) {
		t.Fatalf("Write under the rotated-away token: err = %v, want ErrStaleOwner", err)
	}
	if _, err := f.s.Rotate(ctx, f.a); !errors.Is(err, store.ErrStaleOwner) {
		t.Fatalf("Rotate of a superseded grant: err = %v, want ErrStaleOwner", err)
	}
	if _, err := f.s.Write(ctx, rotated, id, store.Record{Kind: "test", State: []byte("new")}); err != nil {
		t.Fatalf("Write under the new token: %v", err)
	}
	f.wantState(3, id, "new")
}

func testRelease(t *testing.T, f *fixture) {
	ctx := context.Background()
	b := f.grant(3, "B", f.a.Token)
	if err := f.s.ReleaseShard(ctx, f.a); !errors.Is(err, store.ErrStaleOwner) {
		t.Fatalf("stale ReleaseShard: err = %v, want ErrStaleOwner", err)
	}
	a, rev, err := f.s.Assignment(ctx, 1, 3)
	if err != nil || a != b.Assignment || rev != b.Token {
		t.Fatalf("after stale release: %+v@%d, %v; want B's %+v@%d", a, rev, err, b.Assignment, b.Token)
	}
	if err := f.s.ReleaseShard(ctx, b); err != nil {
		t.Fatalf("ReleaseShard by the owner: %v", err)
	}
	if _, _, err := f.s.Assignment(ctx, 1, 3); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Assignment after release: err = %v, want ErrNotFound", err)
	}
	c := f.grant(3, "C", 0)
	if c.Token <= b.Token {
		t.Fatalf("token after release and re-create = %d, not above %d", c.Token, b.Token)
	}
}

// testLateCopy: a write whose outcome is unknown is settled by rotating before reading back; the
// delayed copy that lands afterwards is rejected by the store.
func testLateCopy(t *testing.T, f *fixture) {
	fi, ok := f.s.(store.FaultInjector)
	if !ok {
		t.Fatalf("%T does not implement store.FaultInjector", f.s)
	}
	ctx := context.Background()
	id := idIn(3, 6)
	f.create(f.a, id, "v1")
	fi.HoldWrites(func(x string) bool { return x == id })
	_, err := f.s.Write(ctx, f.a, id, store.Record{Kind: "test", Tick: 2, State: []byte("v2-lost-ack")})
	if !errors.Is(err, store.ErrUnknownOutcome) {
		t.Fatalf("held Write: err = %v, want ErrUnknownOutcome", err)
	}
	fi.HoldWrites(nil)
	g, err := f.s.Rotate(ctx, f.a)
	if err != nil {
		t.Fatal(err)
	}
	r, rev := f.mustLoad(3, id)
	if _, err := f.s.Register(ctx, g, id, r, rev); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.Write(ctx, g, id, store.Record{Kind: "test", Tick: 2, State: []byte("v2")}); err != nil {
		t.Fatal(err)
	}
	held := fi.TakeHeld()
	if len(held) != 1 || held[0].Instance() != id {
		t.Fatalf("held writes = %d, want 1 of %s", len(held), id)
	}
	if err := held[0].Deliver(ctx); !errors.Is(err, store.ErrStaleOwner) {
		t.Fatalf("late copy: err = %v, want ErrStaleOwner", err)
	}
	f.wantState(3, id, "v2")
}

func testInvalidIDs(t *testing.T, f *fixture) {
	ctx := context.Background()
	rec := store.Record{Kind: "test", State: []byte("x")}
	for _, id := range []string{"a.b", "*", ">", "", strings.Repeat("x", 65), "has space", "héllo", "a\x00b", "a/b"} {
		if _, err := f.s.Create(ctx, f.a, id, store.Record{Kind: "test"}); !errors.Is(err, store.ErrInvalidID) {
			t.Errorf("Create(%q): err = %v, want ErrInvalidID", id, err)
		}
		if _, err := f.s.Write(ctx, f.a, id, rec); !errors.Is(err, store.ErrInvalidID) {
			t.Errorf("Write(%q): err = %v, want ErrInvalidID", id, err)
		}
		if _, err := f.s.End(ctx, f.a, id); !errors.Is(err, store.ErrInvalidID) {
			t.Errorf("End(%q): err = %v, want ErrInvalidID", id, err)
		}
		if _, _, err := f.s.Load(ctx, 1, 3, id); !errors.Is(err, store.ErrInvalidID) {
			t.Errorf("Load(%q): err = %v, want ErrInvalidID", id, err)
		}
	}
	if err := store.ValidID(strings.Repeat("x", 64)); err != nil {
		t.Errorf("64-character ID refused: %v", err)
	}
	for sh := uint32(0); sh < shards; sh++ {
		if ids, _ := f.s.Instances(ctx, 1, sh); len(ids) != 0 {
			t.Fatalf("shard %d has %v after invalid writes", sh, ids)
		}
	}
}

func testOversized(t *testing.T, f *fixture) {
	ctx := context.Background()
	id := idIn(3, 7)
	f.create(f.a, id, "small")
	big := store.Record{Kind: "test", State: bytes.Repeat([]byte{7}, store.MaxBlobBytes+1)}
	if _, err := f.s.Write(ctx, f.a, id, big); !errors.Is(err, store.ErrTooLarge) {
		t.Fatalf("oversized Write: err = %v, want ErrTooLarge", err)
	}
	done := make(chan error, 1)
	f.s.WriteAsync(f.a, id, big, func(_ uint64, err error) { done <- err })
	if err := <-done; !errors.Is(err, store.ErrTooLarge) {
		t.Fatalf("oversized WriteAsync: err = %v, want ErrTooLarge", err)
	}
	f.wantState(3, id, "small")
}

func testMalformed(t *testing.T, f *fixture) {
	ctx := context.Background()
	for i, raw := range [][]byte{{0xc1}, []byte("not msgpack"), {0x81, 0xa1, 'v', 0x07}, {}} {
		id := idIn(3, 20+i)
		f.b.PutRaw(t, f.s, 1, 3, id, raw)
		if _, _, err := f.s.Load(ctx, 1, 3, id); !errors.Is(err, store.ErrBadRecord) {
			t.Errorf("Load of %x: err = %v, want ErrBadRecord", raw, err)
		}
	}
}

func testPipelined(t *testing.T, f *fixture) {
	ids := make([]string, 64)
	for i := range ids {
		ids[i] = idIn(3, 100+i)
		f.create(f.a, ids[i], "v0")
	}
	type result struct {
		rev uint64
		err error
	}
	results := make(chan result, len(ids))
	for _, id := range ids {
		f.s.WriteAsync(f.a, id, store.Record{Kind: "test", Tick: 9, State: []byte("v1-" + id)},
			func(rev uint64, err error) { results <- result{rev, err} })
	}
	seen := map[uint64]bool{}
	timeout := time.After(30 * time.Second)
	for range ids {
		select {
		case r := <-results:
			if r.err != nil || r.rev == 0 || seen[r.rev] {
				t.Fatalf("pipelined write: rev %d, err %v", r.rev, r.err)
			}
			seen[r.rev] = true
		case <-timeout:
			t.Fatal("pipelined writes did not complete")
		}
	}
	for _, id := range ids {
		f.wantState(3, id, "v1-"+id)
	}
	f.grant(3, "B", f.a.Token)
	done := make(chan error, 1)
	f.s.WriteAsync(f.a, ids[0], store.Record{Kind: "test", State: []byte("zombie")}, func(_ uint64, err error) { done <- err })
	if err := <-done; !errors.Is(err, store.ErrStaleOwner) {
		t.Fatalf("stale WriteAsync: err = %v, want ErrStaleOwner", err)
	}
	f.wantState(3, ids[0], "v1-"+ids[0])
}

func testWatch(t *testing.T, f *fixture) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := f.s.WatchAssignments(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	next := func() store.AssignmentEvent {
		t.Helper()
		select {
		case ev := <-ch:
			return ev
		case <-time.After(10 * time.Second):
			t.Fatal("no assignment event")
		}
		return store.AssignmentEvent{}
	}
	if ev := next(); ev.Shard != 3 || ev.Revision != f.a.Token || ev.Owner != "A" {
		t.Fatalf("initial event %+v, want shard 3 @%d owned by A", ev, f.a.Token)
	}
	g := f.grant(6, "B", 0) // partition 0, the other bucket
	if ev := next(); ev.Shard != 6 || ev.Revision != g.Token || ev.Owner != "B" {
		t.Fatalf("event %+v, want shard 6 @%d owned by B", ev, g.Token)
	}
	r, err := f.s.Rotate(ctx, f.a)
	if err != nil {
		t.Fatal(err)
	}
	if ev := next(); ev.Shard != 3 || ev.Revision != r.Token || ev.Owner != "A" {
		t.Fatalf("event %+v, want rotation of shard 3 to @%d", ev, r.Token)
	}
	if err := f.s.ReleaseShard(ctx, r); err != nil {
		t.Fatal(err)
	}
	if ev := next(); ev.Shard != 3 || !ev.Deleted {
		t.Fatalf("event %+v, want release of shard 3", ev)
	}
	cancel()
	for range ch { // the channel closes once ctx ends
	}
}

// RunControl runs the control-bucket part of the suite: leases with TTLs, compare-and-delete.
func RunControl(t *testing.T, b Backend) {
	tests := []struct {
		name string
		fn   func(*testing.T, *fixture)
	}{
		{"CreateUpdateDelete", testControlCAS},
		{"LeaseExpiresWithMarker", testLeaseExpiry},
		{"RenewalKeepsLeaseAlive", testLeaseRenewal},
		{"ListAndWatchFilter", testControlList},
		{"FilterAllMatchesEveryKey", testControlListAll},
		{"LatestControl", testLatestControl},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, setup(t, b)) })
	}
}

func testControlCAS(t *testing.T, f *fixture) {
	ctx := context.Background()
	rev, err := f.s.ControlCreate(ctx, "node.n1", []byte(`{"session":"a"}`), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.ControlCreate(ctx, "node.n1", []byte(`{"session":"b"}`), 0); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second create: err = %v, want ErrConflict", err)
	}
	rev2, err := f.s.ControlUpdate(ctx, "node.n1", []byte(`{"session":"a","x":1}`), rev, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.ControlUpdate(ctx, "node.n1", []byte(`{}`), rev, 0); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("stale update: err = %v, want ErrConflict", err)
	}
	// A stale holder's release is a compare-and-delete that fails and changes nothing.
	if err := f.s.ControlDelete(ctx, "node.n1", rev); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("stale release: err = %v, want ErrConflict", err)
	}
	e, err := f.s.ControlGet(ctx, "node.n1")
	if err != nil || e.Revision != rev2 || string(e.Value) != `{"session":"a","x":1}` {
		t.Fatalf("after stale release: %+v, %v", e, err)
	}
	if err := f.s.ControlDelete(ctx, "node.n1", rev2); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.ControlGet(ctx, "node.n1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get after release: err = %v, want ErrNotFound", err)
	}
	if _, err := f.s.ControlCreate(ctx, "node.n1", []byte(`{"session":"c"}`), 0); err != nil {
		t.Fatalf("create after release: %v", err)
	}
	if _, err := f.s.ControlCreate(ctx, "node.n2", nil, 1500*time.Millisecond); err == nil {
		t.Fatal("a TTL of 1.5s was accepted; JetStream counts whole seconds")
	}
}

func testLeaseExpiry(t *testing.T, f *fixture) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := f.s.ControlWatch(ctx, "node.*")
	if err != nil {
		t.Fatal(err)
	}
	rev, err := f.s.ControlCreate(ctx, "node.n1", []byte(`{"session":"a"}`), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.ControlCreate(ctx, "node.n1", []byte(`{"session":"b"}`), time.Second); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("create over a live lease: err = %v, want ErrConflict", err)
	}
	deadline := time.After(10 * time.Second)
	for expired := false; !expired; {
		select {
		case e := <-ch:
			if e.Key == "node.n1" && e.Deleted {
				if !e.Expired || e.Revision <= rev {
					t.Fatalf("marker %+v, want an expiry after revision %d", e, rev)
				}
				expired = true
			}
		case <-deadline:
			t.Fatal("no expiry marker for a 1s lease within 10s")
		}
	}
	if _, err := f.s.ControlGet(ctx, "node.n1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get of an expired lease: err = %v, want ErrNotFound", err)
	}
	if _, err := f.s.ControlCreate(ctx, "node.n1", []byte(`{"session":"b"}`), time.Second); err != nil {
		t.Fatalf("create after expiry: %v", err)
	}
}

// testLeaseRenewal: renewals keep a lease alive, and a watch sees no expiry of it, nor of a key
// without a TTL.
func testLeaseRenewal(t *testing.T, f *fixture) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := f.s.ControlCreate(ctx, "drain.n1", []byte(`{}`), 0); err != nil {
		t.Fatal(err)
	}
	ch, err := f.s.ControlWatch(ctx, ">")
	if err != nil {
		t.Fatal(err)
	}
	rev, err := f.s.ControlCreate(ctx, "leader", []byte(`{"node":"n1"}`), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 8; i++ { // 2.4 s of renewals every 300 ms keep a 1 s lease alive
		time.Sleep(300 * time.Millisecond)
		if rev, err = f.s.ControlUpdate(ctx, "leader", []byte(`{"node":"n1"}`), rev, time.Second); err != nil {
			t.Fatalf("renewal %d: %v", i, err)
		}
	}
	if e, err := f.s.ControlGet(ctx, "leader"); err != nil || e.Revision != rev {
		t.Fatalf("renewed lease: %+v, %v", e, err)
	}
	for {
		select {
		case e := <-ch:
			if e.Deleted {
				t.Fatalf("the watch reported %+v while the lease was renewed", e)
			}
			continue
		default:
		}
		break
	}
}

func testControlList(t *testing.T, f *fixture) {
	ctx := context.Background()
	for _, k := range []string{"node.a", "node.b", "pin.3", "drain.a"} {
		if _, err := f.s.ControlCreate(ctx, k, []byte(`{}`), 0); err != nil {
			t.Fatal(err)
		}
	}
	got, err := f.s.ControlList(ctx, "node.*")
	if err != nil || len(got) != 2 || got[0].Key != "node.a" || got[1].Key != "node.b" {
		t.Fatalf("ControlList(node.*) = %+v, %v", got, err)
	}
	if got, _ := f.s.ControlList(ctx, "missing.*"); len(got) != 0 {
		t.Fatalf("ControlList(missing.*) = %+v", got)
	}
}

// testLatestAssignment: the leader read sees every acknowledged write (values with their grant),
// and ListAssignments covers every shard key, released ones marked Deleted.
func testLatestAssignment(t *testing.T, f *fixture) {
	ctx := context.Background()
	a, rev, err := f.s.LatestAssignment(ctx, 1, 3)
	if err != nil || a != f.a.Assignment || rev != f.a.Token {
		t.Fatalf("LatestAssignment = %+v@%d, %v; want %+v@%d", a, rev, err, f.a.Assignment, f.a.Token)
	}
	if _, _, err := f.s.LatestAssignment(ctx, 1, 4); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("LatestAssignment of an unassigned shard: err = %v, want ErrNotFound", err)
	}
	b := store.Assignment{Owner: "B", Session: "B-session", Grant: "7.1"}
	brev, err := f.s.Assign(ctx, 1, 3, b, f.a.Token)
	if err != nil {
		t.Fatal(err)
	}
	if got, rev, err := f.s.LatestAssignment(ctx, 1, 3); err != nil || got != b || rev != brev {
		t.Fatalf("LatestAssignment after a new grant = %+v@%d, %v; want %+v@%d (grant kept)", got, rev, err, b, brev)
	}
	g5 := f.grant(5, "C", 0)
	if err := f.s.ReleaseShard(ctx, g5); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.s.LatestAssignment(ctx, 1, 5); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("LatestAssignment of a released shard: err = %v, want ErrNotFound", err)
	}
	evs, err := f.s.ListAssignments(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	got := map[uint32]store.AssignmentEvent{}
	for _, ev := range evs {
		got[ev.Shard] = ev
	}
	if len(got) != 2 || got[3].Assignment != b || got[3].Revision != brev || got[3].Deleted || !got[5].Deleted {
		t.Fatalf("ListAssignments = %+v; want shard 3 = %+v@%d and shard 5 deleted", evs, b, brev)
	}
}

// testControlListAll: the filter ">" matches every key, as JetStream's does (the coordinator and
// tickctl status list the whole control bucket with it).
func testControlListAll(t *testing.T, f *fixture) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	keys := []string{"node.a", "pin.3", "drain.a", "move.7", "leader"}
	for _, k := range keys {
		if _, err := f.s.ControlCreate(ctx, k, []byte(`{}`), 0); err != nil {
			t.Fatal(err)
		}
	}
	got, err := f.s.ControlList(ctx, ">")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range got {
		seen[e.Key] = true
	}
	for _, k := range append(keys, store.ClusterKey) {
		if !seen[k] {
			t.Fatalf("ControlList(>) = %d entries, missing %s; want every key", len(got), k)
		}
	}
	ch, err := f.s.ControlWatch(ctx, ">")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.ControlCreate(ctx, "weight.b", []byte(`{"weight":2}`), 0); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(5 * time.Second)
	for replayed := map[string]bool{}; ; {
		select {
		case e := <-ch:
			replayed[e.Key] = true
			if e.Key == "weight.b" {
				for _, k := range keys {
					if !replayed[k] {
						t.Fatalf("ControlWatch(>) delivered weight.b without replaying %s first", k)
					}
				}
				return
			}
		case <-deadline:
			t.Fatal("ControlWatch(>) did not deliver a new key within 5s")
		}
	}
}

// testLatestControl: the leader read of a control key sees every acknowledged write.
func testLatestControl(t *testing.T, f *fixture) {
	ctx := context.Background()
	rev, err := f.s.ControlCreate(ctx, "leader", []byte(`{"node":"n1"}`), 0)
	if err != nil {
		t.Fatal(err)
	}
	rev2, err := f.s.ControlUpdate(ctx, "leader", []byte(`{"node":"n1","x":1}`), rev, 0)
	if err != nil {
		t.Fatal(err)
	}
	e, err := f.s.LatestControl(ctx, "leader")
	if err != nil || e.Revision != rev2 || string(e.Value) != `{"node":"n1","x":1}` {
		t.Fatalf("LatestControl = %+v, %v; want revision %d", e, err, rev2)
	}
	if err := f.s.ControlDelete(ctx, "leader", rev2); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.LatestControl(ctx, "leader"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("LatestControl of a deleted key: err = %v, want ErrNotFound", err)
	}
	if _, err := f.s.LatestControl(ctx, "missing"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("LatestControl of a missing key: err = %v, want ErrNotFound", err)
	}
}

// BlobCollector is a store whose blobs can be garbage-collected (both backends are).
type BlobCollector interface {
	CollectBlobs(ctx context.Context, grace time.Duration, dryRun bool) (store.GCResult, error)
}

// testBlobs: a state over BlobThreshold round-trips through a blob named after the grant and the
// tick, uploaded before the fenced write; Register keeps the pointer; a zombie's upload is never
// referenced and is collected, the referenced blob never is; a small state drops the pointer.
func testBlobs(t *testing.T, f *fixture) {
	ctx := context.Background()
	id := idIn(3, 8)
	f.create(f.a, id, "small")
	big := func(b byte) []byte { return bytes.Repeat([]byte{b, 'x', 'y'}, store.BlobThreshold/3+100) }
	if _, err := f.s.Write(ctx, f.a, id, store.Record{Kind: "test", Tick: 2, State: big(1)}); err != nil {
		t.Fatalf("Write of a %d-byte state: %v", len(big(1)), err)
	}
	r, rev := f.mustLoad(3, id)
	if !bytes.Equal(r.State, big(1)) || r.Blob == nil || r.Blob.Name != store.BlobName(id, 1, f.a.Token, 2) || r.Blob.Size != len(big(1)) {
		t.Fatalf("loaded %d bytes with blob %+v; want the state back from blob %s", len(r.State), r.Blob, store.BlobName(id, 1, f.a.Token, 2))
	}
	done := make(chan error, 1)
	f.s.WriteAsync(f.a, id, store.Record{Kind: "test", Tick: 3, State: big(2)}, func(_ uint64, err error) { done <- err })
	if err := <-done; err != nil {
		t.Fatalf("WriteAsync of a large state: %v", err)
	}
	r, rev = f.mustLoad(3, id)
	if !bytes.Equal(r.State, big(2)) {
		t.Fatal("WriteAsync's large state did not round-trip")
	}
	if _, err := f.s.Register(ctx, f.a, id, r, rev); err != nil {
		t.Fatalf("Register of a record whose state is a blob: %v", err)
	}
	if r2, _ := f.mustLoad(3, id); !bytes.Equal(r2.State, big(2)) || r2.Blob == nil || r2.Blob.Name != r.Blob.Name {
		t.Fatalf("after Register: blob %+v, %d bytes; want the same pointer and state", r2.Blob, len(r2.State))
	}
	b := f.grant(3, "B", f.a.Token)
	if _, err := f.s.Write(ctx, b, id, store.Record{Kind: "test", Tick: 4, State: big(3)}); err != nil {
		t.Fatalf("B's Write: %v", err)
	}
	if _, err := f.s.Write(ctx, f.a, id, store.Record{Kind: "test", Tick: 9, State: big(4)}); !errors.Is(err, store.ErrStaleOwner) {
		t.Fatalf("zombie A's Write of a large state: %v, want ErrStaleOwner", err)
	}
	if r, _ := f.mustLoad(3, id); !bytes.Equal(r.State, big(3)) {
		t.Fatal("the zombie's upload replaced the current state")
	}
	c, ok := f.s.(BlobCollector)
	if !ok {
		t.Fatalf("%T cannot collect its blobs", f.s)
	}
	res, err := c.CollectBlobs(ctx, time.Hour, false)
	if err != nil || len(res.Deleted) != 0 || res.Referenced != 1 {
		t.Fatalf("collect with a 1h grace: %+v, %v; want nothing deleted, 1 referenced", res, err)
	}
	res, err = c.CollectBlobs(ctx, 0, true)
	if err != nil || len(res.Deleted) == 0 {
		t.Fatalf("dry run: %+v, %v", res, err)
	}
	res, err = c.CollectBlobs(ctx, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	zombie := store.BlobName(id, 1, f.a.Token, 9)
	deleted := map[string]bool{}
	for _, n := range res.Deleted {
		deleted[n] = true
	}
	if !deleted[zombie] || deleted[store.BlobName(id, 1, b.Token, 4)] || res.Referenced != 1 {
		t.Fatalf("collected %v (referenced %d); want the zombie's %s among them and never B's referenced blob", res.Deleted, res.Referenced, zombie)
	}
	if r, _ := f.mustLoad(3, id); !bytes.Equal(r.State, big(3)) {
		t.Fatal("the current state was lost to the collection")
	}
	if _, err := f.s.Write(ctx, b, id, store.Record{Kind: "test", Tick: 5, State: []byte("small again")}); err != nil {
		t.Fatal(err)
	}
	if r, _ := f.mustLoad(3, id); string(r.State) != "small again" || r.Blob != nil {
		t.Fatalf("a small state after a blob: %q, blob %+v; want it inline", r.State, r.Blob)
	}
}

// BlobCounter is a store that counts its blob uploads (both backends do).
type BlobCounter interface {
	BlobStats() store.BlobStats
}

// uploads returns a function that fails the test unless the store uploaded n blobs since the last
// call (or since it was made).
func (f *fixture) uploads() func(what string, n uint64) {
	c, ok := f.s.(BlobCounter)
	if !ok {
		f.t.Fatalf("%T does not count its blob uploads", f.s)
	}
	last := c.BlobStats().Uploads
	return func(what string, n uint64) {
		f.t.Helper()
		now := c.BlobStats().Uploads
		if now-last != n {
			f.t.Fatalf("%s: %d blobs uploaded, want %d", what, now-last, n)
		}
		last = now
	}
}

// wantBlob loads id and wants state from the blob named name.
func (f *fixture) wantBlob(id string, state []byte, name string) {
	f.t.Helper()
	r, _ := f.mustLoad(3, id)
	if !bytes.Equal(r.State, state) || r.Blob == nil || r.Blob.Name != name {
		f.t.Fatalf("loaded %d bytes from blob %+v; want %d bytes from %s", len(r.State), r.Blob, len(state), name)
	}
}

// testBlobsByChange (DESIGN 8, issue 35): a large state is uploaded only when its bytes differ from
// those of the stored record's blob; an unchanged one keeps the pointer, whichever way it is
// written (Write, WriteAsync, WriteBatch) and across a registration. Anything that breaks the
// chain of "the record this write replaces points at that blob" uploads again: a state equal to
// an older blob's, a new token without a registration, an end and a new creation.
func testBlobsByChange(t *testing.T, f *fixture) {
	ctx := context.Background()
	id := idIn(3, 9)
	f.create(f.a, id, "small")
	big := func(b byte) []byte { return bytes.Repeat([]byte{b, 'q', 'r'}, store.BlobThreshold/3+100) }
	rec := func(tick uint64, state []byte) store.Record {
		return store.Record{Kind: "test", Tick: tick, State: state}
	}
	want := f.uploads()
	if _, err := f.s.Write(ctx, f.a, id, rec(2, big(1))); err != nil {
		t.Fatal(err)
	}
	want("first large state", 1)
	first := store.BlobName(id, 1, f.a.Token, 2)
	for tick := uint64(3); tick < 13; tick++ {
		if _, err := f.s.Write(ctx, f.a, id, rec(tick, big(1))); err != nil {
			t.Fatal(err)
		}
	}
	want("10 idle checkpoints", 0)
	done := make(chan error, 1)
	f.s.WriteAsync(f.a, id, rec(13, big(1)), func(_ uint64, err error) { done <- err })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want("an idle pipelined write", 0)
	if bw, ok := f.s.(store.BatchWriter); ok {
		bw.WriteBatch(f.a, []store.BatchWrite{{ID: id, Rec: rec(14, big(1))}}, func(_ int, _ uint64, err error) { done <- err })
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		want("an idle batched write", 0)
	}
	f.wantBlob(id, big(1), first)
	r, rev := f.mustLoad(3, id)
	if r.Tick < 13 {
		t.Fatalf("the kept pointer's record is at tick %d, want the last write's", r.Tick)
	}
	if _, err := f.s.Write(ctx, f.a, id, rec(20, big(2))); err != nil {
		t.Fatal(err)
	}
	want("a changed state", 1)
	f.wantBlob(id, big(2), store.BlobName(id, 1, f.a.Token, 20))
	if _, err := f.s.Write(ctx, f.a, id, rec(21, big(1))); err != nil {
		t.Fatal(err)
	}
	want("a state equal to an older blob's, not the stored record's", 1)
	f.wantBlob(id, big(1), store.BlobName(id, 1, f.a.Token, 21))
	_ = rev

	// A rotation, then the load and registration a rebuild does: the registered pointer is kept.
	rot, err := f.s.Rotate(ctx, f.a)
	if err != nil {
		t.Fatal(err)
	}
	r, rev = f.mustLoad(3, id)
	if _, err := f.s.Register(ctx, rot, id, r, rev); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.Write(ctx, rot, id, rec(22, big(1))); err != nil {
		t.Fatal(err)
	}
	want("unchanged after a rotation and registration", 0)
	f.wantBlob(id, big(1), store.BlobName(id, 1, f.a.Token, 21))

	// A new owner's first write without a registration, and a zombie's: both upload; the zombie's
	// refused write changes nothing of what the new owner keeps.
	b := f.grant(3, "B", rot.Token)
	if _, err := f.s.Write(ctx, b, id, rec(23, big(1))); err != nil {
		t.Fatal(err)
	}
	want("a new token's first write", 1)
	if _, err := f.s.Write(ctx, rot, id, rec(30, big(1))); !errors.Is(err, store.ErrStaleOwner) {
		t.Fatalf("zombie's write: %v, want ErrStaleOwner", err)
	}
	want("a zombie's write", 1)
	if _, err := f.s.Write(ctx, b, id, rec(24, big(1))); err != nil {
		t.Fatal(err)
	}
	want("the new owner's unchanged state after the zombie's attempt", 0)
	f.wantBlob(id, big(1), store.BlobName(id, 1, b.Token, 23))

	// An end and a new life: the old life's blob is not the new record's.
	if _, err := f.s.End(ctx, b, id); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.Create(ctx, b, id, store.Record{Kind: "test"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.Write(ctx, b, id, rec(1, big(1))); err != nil {
		t.Fatal(err)
	}
	want("the same state in a new life", 1)
	f.wantBlob(id, big(1), store.BlobName(id, 1, b.Token, 1))
	// A small state drops the pointer; the same large state after it is uploaded again.
	if _, err := f.s.Write(ctx, b, id, rec(2, []byte("small"))); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.Write(ctx, b, id, rec(3, big(1))); err != nil {
		t.Fatal(err)
	}
	want("a large state after a small one", 1)
}

// testKeptBlobCollected: a blob kept by many records is older than any grace, yet never collected
// while the current record points at it; the blobs it replaced are.
func testKeptBlobCollected(t *testing.T, f *fixture) {
	ctx := context.Background()
	c, ok := f.s.(BlobCollector)
	if !ok {
		t.Fatalf("%T cannot collect its blobs", f.s)
	}
	id := idIn(3, 10)
	f.create(f.a, id, "small")
	big := func(b byte) []byte { return bytes.Repeat([]byte{b, 's', 't'}, store.BlobThreshold/3+100) }
	want := f.uploads()
	for tick, b := range []byte{1, 2, 2, 2} {
		if _, err := f.s.Write(ctx, f.a, id, store.Record{Kind: "test", Tick: uint64(tick + 2), State: big(b)}); err != nil {
			t.Fatal(err)
		}
	}
	want("two states over four writes", 2)
	kept := store.BlobName(id, 1, f.a.Token, 3)
	res, err := c.CollectBlobs(ctx, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Deleted) != 1 || res.Deleted[0] != store.BlobName(id, 1, f.a.Token, 2) || res.Referenced != 1 {
		t.Fatalf("collected %v, %d referenced; want only the replaced blob, the kept one referenced", res.Deleted, res.Referenced)
	}
	if _, err := f.s.Write(ctx, f.a, id, store.Record{Kind: "test", Tick: 9, State: big(2)}); err != nil {
		t.Fatal(err)
	}
	want("unchanged after the collection", 0)
	f.wantBlob(id, big(2), kept)
	if res, err := c.CollectBlobs(ctx, 0, false); err != nil || len(res.Deleted) != 0 {
		t.Fatalf("second collection: %+v, %v; want nothing deleted", res, err)
	}
	f.wantBlob(id, big(2), kept)
}
