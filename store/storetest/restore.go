package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tickfence/tickfence/store"
)

// RunRestore runs the backup and restore cases (DESIGN 6, issue 9.4) on a backend whose stores
// are store.EpochStores: store.Restore into E+1, the seal, the claim refusing a second restore,
// crashed restores taken over or abandoned, and a restore that read epoch E before another one
// finished, which must not touch the live epoch.
func RunRestore(t *testing.T, b Backend) {
	tests := []struct {
		name string
		fn   func(*testing.T, *restoreFixture)
	}{
		{"BackupHoldsLiveKeysByteForByte", testBackup},
		{"SealedEpochRefusesWrites", testSealed},
		{"RestoreIntoNextEpoch", testRestore},
		{"SecondRestoreRefusedWhileOneRuns", testSecondRestoreRefused},
		{"TakenOverRestoreStopsBeforeClobbering", testTakenOverStops},
		{"CrashedRestoreIsTakenOver", testCrashedTakenOver},
		{"CrashedRestoreIsAbandoned", testCrashedAbandoned},
		{"ClaimOfAFinishedRestore", testFinishedClaim},
		{"RestoreRetriedAfterItsCommitLandedChangesNothing", testRetryAfterLostCommit},
		{"RestoreThatReadTheOldEpochLeavesTheLiveOneAlone", testLateRestore},
		{"BackupHoldsTheBlobsItsRecordsPointAt", testBackupBlobs},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newRestoreFixture(t, b)) })
	}
}

// restoreFixture: epoch 1 of the suite's cluster (8 shards, 2 partitions) with one instance in
// shard 3 (partition 1) and one in shard 2 (partition 0), an ended one in shard 3, a backup of
// that, and one more write to shard 3's instance after the backup. op1 and op2 are two operators.
type restoreFixture struct {
	*fixture
	be       Backend
	op1, op2 store.EpochStore
	a2       store.Grant // shard 2 granted to A
	id3, id2 string
	ended    string
	backup   store.Backup
}

func newRestoreFixture(t *testing.T, b Backend) *restoreFixture {
	t.Helper()
	ctx := context.Background()
	f := &restoreFixture{fixture: setup(t, b), be: b}
	var ok bool
	if f.op1, ok = f.s.(store.EpochStore); !ok {
		t.Fatalf("%T is not a store.EpochStore", f.s)
	}
	f.op2 = f.op1
	if b.Peer != nil {
		if f.op2, ok = b.Peer(t, f.s).(store.EpochStore); !ok {
			t.Fatalf("peer of %T is not a store.EpochStore", f.s)
		}
	}
	f.a2 = f.grant(2, "A", 0)
	f.id3, f.id2, f.ended = idIn(3, 1), idIn(2, 1), idIn(3, 2)
	f.create(f.a, f.id3, "backed up")
	f.create(f.a2, f.id2, "backed up 2")
	f.create(f.a, f.ended, "ended")
	if _, err := f.s.End(ctx, f.a, f.ended); err != nil {
		t.Fatal(err)
	}
	var err error
	if f.backup, err = store.TakeBackup(ctx, f.op1, nil); err != nil {
		t.Fatalf("TakeBackup: %v", err)
	}
	if _, err := f.s.Write(ctx, f.a, f.id3, store.Record{Kind: "test", Tick: 2, State: []byte("after the backup")}); err != nil {
		t.Fatal(err)
	}
	return f
}

// pauseAt makes a Step hook that stops a restore at the first step of that name until resume is
// closed; paused is closed when it gets there.
func pauseAt(name string) (step func(string) error, paused, resume chan struct{}) {
	paused, resume = make(chan struct{}), make(chan struct{})
	var once sync.Once
	return func(s string) error {
		if s == name {
			once.Do(func() { close(paused); <-resume })
		}
		return nil
	}, paused, resume
}

// restoreAsync runs a restore in a goroutine; the channel gets its outcome.
func restoreAsync(s store.EpochStore, b store.Backup, opt store.RestoreOptions) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := store.Restore(context.Background(), s, b, opt)
		done <- err
	}()
	return done
}

// goLive makes the live epoch carry acknowledged state: shard 3 granted to B, its instance
// loaded, registered and written. It returns B's grant.
func (f *restoreFixture) goLive(t *testing.T, st store.Store) store.Grant {
	t.Helper()
	ctx := context.Background()
	cl, err := st.Cluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, rev, err := st.LatestAssignment(ctx, cl.Epoch, 3)
	if err != nil {
		t.Fatalf("epoch %d shard 3: %v", cl.Epoch, err)
	}
	b := store.Assignment{Owner: "B", Session: "b1", Grant: "9.1"}
	tok, err := st.Assign(ctx, cl.Epoch, 3, b, rev)
	if err != nil {
		t.Fatalf("grant shard 3 in epoch %d: %v", cl.Epoch, err)
	}
	g := store.Grant{Epoch: cl.Epoch, Shard: 3, Token: tok, Assignment: b}
	rec, lrev, err := st.Load(ctx, cl.Epoch, 3, f.id3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Register(ctx, g, f.id3, rec, lrev); err != nil {
		t.Fatal(err)
	}
	rec.Tick, rec.State = 3, []byte("live")
	if _, err := st.Write(ctx, g, f.id3, rec); err != nil {
		t.Fatal(err)
	}
	return g
}

// wantLive checks that the grant's epoch is live and still holds the live state and B's grant.
func (f *restoreFixture) wantLive(t *testing.T, st store.Store, g store.Grant) {
	t.Helper()
	ctx := context.Background()
	if cl, err := st.Cluster(ctx); err != nil || cl.Epoch != g.Epoch {
		t.Fatalf("cluster = %+v, %v; want epoch %d", cl, err, g.Epoch)
	}
	if rec, _, err := st.Load(ctx, g.Epoch, 3, f.id3); err != nil || string(rec.State) != "live" {
		t.Fatalf("epoch %d instance = %q, %v; want the acknowledged %q", g.Epoch, rec.State, err, "live")
	}
	if a, tok, err := st.LatestAssignment(ctx, g.Epoch, 3); err != nil || a != g.Assignment || tok != g.Token {
		t.Fatalf("shard 3 in epoch %d = %+v@%d, %v; want the live grant %+v@%d", g.Epoch, a, tok, err, g.Assignment, g.Token)
	}
}

// wantRestored checks that epoch e is live and holds the backup: both instances as backed up,
// the ended one absent, every shard key unassigned, epoch 1 sealed (a zombie of it writes
// nowhere), and no claim left.
func (f *restoreFixture) wantRestored(t *testing.T, st store.EpochStore, e uint64) {
	t.Helper()
	ctx := context.Background()
	if cl, err := st.Cluster(ctx); err != nil || cl.Epoch != e {
		t.Fatalf("cluster = %+v, %v; want epoch %d", cl, err, e)
	}
	for _, c := range []struct {
		shard     uint32
		id, state string
	}{{3, f.id3, "backed up"}, {2, f.id2, "backed up 2"}} {
		if rec, _, err := st.Load(ctx, e, c.shard, c.id); err != nil || string(rec.State) != c.state {
			t.Fatalf("epoch %d: %s = %q, %v; want the backup's %q", e, c.id, rec.State, err, c.state)
		}
	}
	if _, _, err := st.Load(ctx, e, 3, f.ended); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("epoch %d: the instance ended before the backup: %v; want ErrNotFound", e, err)
	}
	for sh := uint32(0); sh < shards; sh++ {
		if a, _, err := st.LatestAssignment(ctx, e, sh); err != nil || a != (store.Assignment{}) {
			t.Fatalf("epoch %d: shard %d = %+v, %v; want unassigned", e, sh, a, err)
		}
	}
	for p := uint32(0); p < f.cl.Partitions; p++ {
		if sealed, err := st.PartitionSealed(ctx, 1, p); err != nil || !sealed {
			t.Fatalf("epoch 1 partition %d sealed = %v, %v; want sealed", p, sealed, err)
		}
	}
	for p := uint32(0); p < f.cl.Partitions; p++ {
		if sealed, err := st.PartitionSealed(ctx, e, p); err != nil || sealed {
			t.Fatalf("live epoch %d partition %d sealed = %v, %v; want writable", e, p, sealed, err)
		}
	}
	if e, err := st.LatestControl(ctx, store.RestoreKey); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("restore claim after a finished restore: %s, %v; want it released", e.Value, err)
	}
	if _, err := st.Write(ctx, f.a, f.id3, store.Record{Kind: "test", Tick: 9, State: []byte("zombie")}); !errors.Is(err, store.ErrStaleOwner) || !errors.Is(err, store.ErrSealed) {
		t.Fatalf("zombie write into sealed epoch 1: %v; want ErrStaleOwner and ErrSealed", err)
	}
}

// claim reads the restore key.
func claim(t *testing.T, st store.Store) store.RestoreClaim {
	t.Helper()
	e, err := st.LatestControl(context.Background(), store.RestoreKey)
	if err != nil {
		t.Fatalf("restore claim: %v", err)
	}
	var c store.RestoreClaim
	if err := json.Unmarshal(e.Value, &c); err != nil {
		t.Fatalf("restore claim %q: %v", e.Value, err)
	}
	return c
}

func testBackup(t *testing.T, f *restoreFixture) {
	if f.backup.Cluster != f.cl {
		t.Fatalf("backup of cluster %+v; want %+v", f.backup.Cluster, f.cl)
	}
	got := map[string][]byte{}
	for _, e := range f.backup.Entries {
		if _, dup := got[e.Key]; dup {
			t.Fatalf("key %s backed up twice", e.Key)
		}
		got[e.Key] = e.Value
	}
	want := []string{store.ShardKey(2), store.ShardKey(3), store.InstanceKey(3, f.id3), store.InstanceKey(2, f.id2)}
	if len(got) != len(want) {
		t.Fatalf("backup keys %v; want %v (the ended instance left out)", keys(got), want)
	}
	for _, k := range want {
		if got[k] == nil {
			t.Fatalf("backup keys %v; want %v", keys(got), want)
		}
	}
	rec, err := store.DecodeRecord(got[store.InstanceKey(3, f.id3)])
	if err != nil || string(rec.State) != "backed up" || rec.Token != f.a.Token {
		t.Fatalf("backed up record %+v, %v", rec, err)
	}
	var a store.Assignment
	if err := json.Unmarshal(got[store.ShardKey(3)], &a); err != nil || a != f.a.Assignment {
		t.Fatalf("backed up shard 3 = %+v, %v; want %+v", a, err, f.a.Assignment)
	}
	// Exact bytes: restored into epoch 2, every instance record is the backup's, byte for byte.
	if _, err := store.Restore(context.Background(), f.op1, f.backup, store.RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	n := 0
	for p := uint32(0); p < f.cl.Partitions; p++ {
		err := f.op1.ScanPartition(context.Background(), 2, p, func(key string, value []byte) error {
			if want, ok := got[key]; ok && strings.HasPrefix(key, "inst.") {
				n++
				if !bytes.Equal(value, want) {
					return fmt.Errorf("%s restored as %x; backed up %x", key, value, want)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if n != 2 {
		t.Fatalf("%d instance records in epoch 2; want 2", n)
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// testSealed: a sealed bucket refuses every write, as natskv's sealed stream does; reads go on.
func testSealed(t *testing.T, f *restoreFixture) {
	ctx := context.Background()
	st := f.op1
	if err := st.SealPartition(ctx, 1, 3%f.cl.Partitions); err != nil {
		t.Fatal(err)
	}
	if err := st.SealPartition(ctx, 1, 3%f.cl.Partitions); err != nil {
		t.Fatalf("sealing a sealed bucket: %v", err)
	}
	if sealed, err := st.PartitionSealed(ctx, 1, 1); err != nil || !sealed {
		t.Fatalf("partition 1 sealed = %v, %v", sealed, err)
	}
	if sealed, err := st.PartitionSealed(ctx, 1, 0); err != nil || sealed {
		t.Fatalf("partition 0 sealed = %v, %v; want writable", sealed, err)
	}
	if _, err := st.PartitionSealed(ctx, 7, 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("PartitionSealed of a bucket that does not exist: %v; want ErrNotFound", err)
	}
	rec, rev := f.mustLoad(3, f.id3)
	fenced := func(name string, err error) {
		t.Helper()
		var stale *store.StaleOwnerError
		if !errors.Is(err, store.ErrStaleOwner) || !errors.Is(err, store.ErrSealed) || !errors.As(err, &stale) || !stale.Sealed {
			t.Fatalf("%s into a sealed bucket: %v; want a sealed *store.StaleOwnerError (ErrStaleOwner and ErrSealed)", name, err)
		}
	}
	plain := func(name string, err error) {
		t.Helper()
		if !errors.Is(err, store.ErrSealed) || errors.Is(err, store.ErrStaleOwner) || errors.Is(err, store.ErrConflict) ||
			errors.Is(err, store.ErrUnknownOutcome) || errors.Is(err, store.ErrNotFound) {
			t.Fatalf("%s into a sealed bucket: %v; want ErrSealed only", name, err)
		}
	}
	_, err := st.Write(ctx, f.a, f.id3, store.Record{Kind: "test", Tick: 5})
	fenced("Write", err)
	stale := f.a
	stale.Token += 1000
	_, err = st.Write(ctx, stale, f.id3, store.Record{Kind: "test", Tick: 5})
	fenced("Write under a stale token", err)
	done := make(chan error, 1)
	st.WriteAsync(f.a, f.id3, store.Record{Kind: "test", Tick: 5}, func(_ uint64, err error) { done <- err })
	fenced("WriteAsync", <-done)
	_, err = st.End(ctx, f.a, f.id3)
	fenced("End", err)
	_, err = st.Register(ctx, f.a, f.id3, rec, rev)
	plain("Register", err)
	_, err = st.Create(ctx, f.a, idIn(3, 9), store.Record{Kind: "test"})
	plain("Create", err)
	_, err = st.Assign(ctx, 1, 3, store.Assignment{Owner: "B", Session: "b"}, f.a.Token)
	plain("Assign", err)
	_, err = st.Assign(ctx, 1, 5, store.Assignment{Owner: "B", Session: "b"}, 0)
	plain("Assign of a new shard key", err)
	_, err = st.Rotate(ctx, f.a)
	plain("Rotate", err)
	plain("ReleaseShard", st.ReleaseShard(ctx, f.a))
	_, err = st.PutData(ctx, 1, 1, store.InstanceKey(3, f.id3), []byte("x"))
	plain("PutData", err)
	// Reads go on; nothing changed.
	f.wantState(3, f.id3, "after the backup")
	if a, tok, err := st.LatestAssignment(ctx, 1, 3); err != nil || a != f.a.Assignment || tok != f.a.Token {
		t.Fatalf("shard 3 = %+v@%d, %v; want %+v@%d", a, tok, err, f.a.Assignment, f.a.Token)
	}
	if ids, err := st.Instances(ctx, 1, 3); err != nil || len(ids) != 1 || ids[0] != f.id3 {
		t.Fatalf("Instances(3) = %v, %v", ids, err)
	}
	// The other partition takes writes.
	if _, err := st.Write(ctx, f.a2, f.id2, store.Record{Kind: "test", Tick: 5, State: []byte("p0")}); err != nil {
		t.Fatalf("write to the unsealed partition: %v", err)
	}
}

// testRestore: the rule of DESIGN 6 on both backends.
func testRestore(t *testing.T, f *restoreFixture) {
	ctx := context.Background()
	cl, err := store.Restore(ctx, f.op1, f.backup, store.RestoreOptions{Operator: "op1", FromEpoch: 1})
	if err != nil || cl.Epoch != 2 || cl.Shards != shards || cl.Partitions != f.cl.Partitions {
		t.Fatalf("Restore = %+v, %v; want epoch 2", cl, err)
	}
	f.wantRestored(t, f.op2, 2)
	// Every shard key of epoch 2 was written after every restored record: no token of epoch 1,
	// nor any restored revision, is valid there.
	for _, c := range []struct {
		shard uint32
		id    string
	}{{3, f.id3}, {2, f.id2}} {
		_, rrev, _ := f.op2.Load(ctx, 2, c.shard, c.id)
		if _, tok, err := f.op2.LatestAssignment(ctx, 2, c.shard); err != nil || tok <= rrev {
			t.Fatalf("epoch 2: shard %d at revision %d, %v; want above the restored record's %d", c.shard, tok, err, rrev)
		}
	}
	g1 := f.a
	g1.Epoch = 2
	if _, err := f.op2.Write(ctx, g1, f.id3, store.Record{Kind: "test", Tick: 9}); !errors.Is(err, store.ErrStaleOwner) {
		t.Fatalf("an epoch 1 token in epoch 2: %v; want ErrStaleOwner", err)
	}
	g := f.goLive(t, f.op2)
	f.wantLive(t, f.op1, g)
	if _, err := store.Restore(ctx, f.op1, f.backup, store.RestoreOptions{FromEpoch: 1}); !errors.Is(err, store.ErrEpochMoved) {
		t.Fatalf("the same restore again, meant for epoch 1: %v; want ErrEpochMoved", err)
	}
	f.wantLive(t, f.op1, g)
	bad := f.backup
	bad.Cluster.Shards++
	if _, err := store.Restore(ctx, f.op1, bad, store.RestoreOptions{}); err == nil {
		t.Fatal("a backup of another cluster shape was restored")
	}
	f.wantLive(t, f.op1, g)
}

// testSecondRestoreRefused: two operators restore the same backup at once. The second is
// refused before it seals or deletes anything, naming the first; the first finishes, and epoch 2
// then carries acknowledged state nobody overwrites.
func testSecondRestoreRefused(t *testing.T, f *restoreFixture) {
	ctx := context.Background()
	step, paused, resume := pauseAt("seal")
	first := restoreAsync(f.op1, f.backup, store.RestoreOptions{Operator: "op1", Step: step})
	<-paused
	_, err := store.Restore(ctx, f.op2, f.backup, store.RestoreOptions{Operator: "op2"})
	var claimed *store.RestoreClaimedError
	if !errors.As(err, &claimed) || !errors.Is(err, store.ErrRestoreClaimed) || claimed.Claim.Operator != "op1" ||
		claimed.Claim.Epoch != 2 || claimed.Claim.FromEpoch != 1 {
		close(resume)
		<-first
		t.Fatalf("second restore while the first runs: %v; want ErrRestoreClaimed naming op1, epoch 1 into 2", err)
	}
	for p := uint32(0); p < f.cl.Partitions; p++ {
		if sealed, err := f.op2.PartitionSealed(ctx, 1, p); err != nil || sealed {
			close(resume)
			<-first
			t.Fatalf("after the refused restore, epoch 1 partition %d sealed = %v, %v; want untouched", p, sealed, err)
		}
	}
	close(resume)
	if err := <-first; err != nil {
		t.Fatalf("first restore: %v", err)
	}
	f.wantRestored(t, f.op2, 2)
	g := f.goLive(t, f.op2)
	f.wantLive(t, f.op1, g)
}

// testTakenOverStops: the first restore stalls (the operator thinks it crashed); a second takes
// it over and finishes, and the cluster writes acknowledged state into the new epoch. When the
// first wakes, it must stop at its next step — not overwrite the live records with the backup
// and revoke every grant before its epoch CAS fails.
func testTakenOverStops(t *testing.T, f *restoreFixture) {
	ctx := context.Background()
	step, paused, resume := pauseAt("records")
	first := restoreAsync(f.op1, f.backup, store.RestoreOptions{Operator: "op1", Step: step})
	<-paused
	cl, err := store.Restore(ctx, f.op2, f.backup, store.RestoreOptions{Operator: "op2", Takeover: true})
	if err != nil || cl.Epoch != 3 {
		close(resume)
		<-first
		t.Fatalf("takeover = %+v, %v; want epoch 3, after the one the taken-over restore claimed", cl, err)
	}
	f.wantRestored(t, f.op2, 3)
	g := f.goLive(t, f.op2)
	close(resume)
	if err := <-first; !errors.Is(err, store.ErrRestoreClaimLost) {
		t.Fatalf("the restore that was taken over: %v; want ErrRestoreClaimLost", err)
	}
	f.wantLive(t, f.op2, g)
}

// crashAt makes a Step hook that cancels the restore's ctx (its process dies) at the nth time
// it reaches step name.
func crashAt(cancel context.CancelFunc, name string, nth int) func(string) error {
	seen := 0
	return func(s string) error {
		if s == name {
			if seen++; seen == nth {
				cancel()
			}
		}
		return nil
	}
}

var crashPoints = []struct {
	step string
	nth  int
}{{"seal", 1}, {"buckets", 1}, {"buckets", 2}, {"records", 1}, {"shards", 1}, {"epoch", 1}}

// testCrashedTakenOver: a restore dies at each of its steps. The cluster stays at epoch 1; a
// plain retry is refused (the claim names the dead operator); undoing is refused once epoch 1 is
// sealed (a sealed bucket stays sealed); an explicit takeover finishes it into epoch 3.
func testCrashedTakenOver(t *testing.T, f *restoreFixture) {
	for i, cp := range crashPoints {
		t.Run(fmt.Sprintf("%s#%d", cp.step, cp.nth), func(t *testing.T) {
			f := f
			if i > 0 {
				f = newRestoreFixture(t, f.be)
			}
			ctx := context.Background()
			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			_, err := store.Restore(cctx, f.op1, f.backup, store.RestoreOptions{Operator: "op1", Step: crashAt(cancel, cp.step, cp.nth)})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("restore that died at %s: %v; want context.Canceled", cp.step, err)
			}
			if cl, err := f.op2.Cluster(ctx); err != nil || cl.Epoch != 1 {
				t.Fatalf("cluster after the crash = %+v, %v; want epoch 1", cl, err)
			}
			if c := claim(t, f.op2); c.Operator != "op1" || c.FromEpoch != 1 || c.Epoch != 2 {
				t.Fatalf("claim after the crash = %+v; want op1's, epoch 1 into 2", c)
			}
			_, err = store.Restore(ctx, f.op2, f.backup, store.RestoreOptions{Operator: "op1-retry"})
			var claimed *store.RestoreClaimedError
			if !errors.As(err, &claimed) || claimed.Claim.Operator != "op1" {
				t.Fatalf("retry without takeover: %v; want ErrRestoreClaimed naming op1", err)
			}
			if cp.step != "seal" {
				if _, err := store.AbandonRestore(ctx, f.op2); err == nil {
					t.Fatal("abandoning a restore that sealed epoch 1 was accepted")
				}
				if c := claim(t, f.op2); c.Operator != "op1" {
					t.Fatalf("claim after a refused undo = %+v; want op1's still", c)
				}
			}
			cl, err := store.Restore(ctx, f.op2, f.backup, store.RestoreOptions{Operator: "op1-retry", Takeover: true, FromEpoch: 1})
			if err != nil || cl.Epoch != 3 {
				t.Fatalf("takeover = %+v, %v; want epoch 3, after the one the crashed restore claimed", cl, err)
			}
			f.wantRestored(t, f.op2, 3)
			g := f.goLive(t, f.op1)
			f.wantLive(t, f.op2, g)
		})
	}
}

// testCrashedAbandoned: a restore that died before it sealed anything is undone: its claim is
// released, the buckets it made are gone, epoch 1 carries on, and a later restore works.
func testCrashedAbandoned(t *testing.T, f *restoreFixture) {
	ctx := context.Background()
	if _, err := store.AbandonRestore(ctx, f.op2); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("AbandonRestore with no restore claimed: %v; want ErrNotFound", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	_, err := store.Restore(cctx, f.op1, f.backup, store.RestoreOptions{Operator: "op1", Step: crashAt(cancel, "seal", 1)})
	cancel()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("restore that died before the seal: %v", err)
	}
	held, err := store.AbandonRestore(ctx, f.op2)
	if err != nil || held.Operator != "op1" || held.Epoch != 2 || held.FromEpoch != 1 {
		t.Fatalf("AbandonRestore = %+v, %v; want op1's claim of epoch 2", held, err)
	}
	if e, err := f.op2.LatestControl(ctx, store.RestoreKey); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("claim after abandon: %s, %v; want released", e.Value, err)
	}
	if _, err := f.op1.Write(ctx, f.a, f.id3, store.Record{Kind: "test", Tick: 3, State: []byte("on")}); err != nil {
		t.Fatalf("epoch 1 after an abandoned restore: %v", err)
	}

	// Without the seal, a restore that dies after making epoch 2's buckets can be undone too:
	// they are deleted.
	cctx, cancel = context.WithCancel(ctx)
	_, err = store.Restore(cctx, f.op1, f.backup, store.RestoreOptions{Operator: "op1", SkipSeal: true, Step: crashAt(cancel, "shards", 1)})
	cancel()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("unsealed restore that died: %v", err)
	}
	if _, _, err := f.op2.Load(ctx, 2, 3, f.id3); err != nil {
		t.Fatalf("the dead restore's record in epoch 2: %v; want it there before the undo", err)
	}
	if _, err := store.AbandonRestore(ctx, f.op2); err != nil {
		t.Fatalf("AbandonRestore: %v", err)
	}
	for p := uint32(0); p < f.cl.Partitions; p++ {
		if _, err := f.op2.PartitionSealed(ctx, 2, p); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("epoch 2 partition %d after the undo: %v; want deleted", p, err)
		}
	}
	if _, err := f.op1.Write(ctx, f.a, f.id3, store.Record{Kind: "test", Tick: 4, State: []byte("on")}); err != nil {
		t.Fatalf("epoch 1 after an abandoned restore: %v", err)
	}
	// A new restore makes epoch 2 afresh.
	if cl, err := store.Restore(ctx, f.op2, f.backup, store.RestoreOptions{Operator: "op2"}); err != nil || cl.Epoch != 2 {
		t.Fatalf("restore after the undo = %+v, %v", cl, err)
	}
	f.wantRestored(t, f.op1, 2)
}

// testFinishedClaim: a claim whose epoch is live already (its restore died between the epoch
// CAS and releasing the claim) is finished: a new restore replaces it without a takeover, and an
// undo only clears it.
func testFinishedClaim(t *testing.T, f *restoreFixture) {
	ctx := context.Background()
	if _, err := store.Restore(ctx, f.op1, f.backup, store.RestoreOptions{Operator: "op1"}); err != nil {
		t.Fatal(err)
	}
	left, _ := json.Marshal(store.RestoreClaim{FromEpoch: 1, Epoch: 2, Operator: "gone"})
	if _, err := f.op1.ControlCreate(ctx, store.RestoreKey, left, 0); err != nil {
		t.Fatal(err)
	}
	if cl, err := store.Restore(ctx, f.op2, f.backup, store.RestoreOptions{Operator: "op2"}); err != nil || cl.Epoch != 3 {
		t.Fatalf("restore over a finished restore's claim = %+v, %v; want epoch 3", cl, err)
	}
	f.wantRestored(t, f.op1, 3)
	left, _ = json.Marshal(store.RestoreClaim{FromEpoch: 2, Epoch: 3, Operator: "gone"})
	if _, err := f.op1.ControlCreate(ctx, store.RestoreKey, left, 0); err != nil {
		t.Fatal(err)
	}
	if held, err := store.AbandonRestore(ctx, f.op2); err != nil || held.Operator != "gone" {
		t.Fatalf("AbandonRestore of a finished restore's claim = %+v, %v", held, err)
	}
	f.wantRestored(t, f.op1, 3)
}

// lostCommit loses the answer to the first update of the cluster record that lands: a restore's
// commit went through, and the restorer was told its outcome is unknown.
type lostCommit struct {
	store.EpochStore
	once sync.Once
}

func (l *lostCommit) ControlUpdate(ctx context.Context, key string, v []byte, rev uint64, ttl time.Duration) (uint64, error) {
	r, err := l.EpochStore.ControlUpdate(ctx, key, v, rev, ttl)
	lost := false
	if key == store.ClusterKey && err == nil {
		l.once.Do(func() { lost = true })
	}
	if lost {
		return 0, fmt.Errorf("answer lost: %w", store.ErrUnknownOutcome)
	}
	return r, err
}

// lostRelease fails the first release of the restore key (nothing deleted): a restore that
// committed and answered leaves its claim behind.
type lostRelease struct {
	store.EpochStore
	once sync.Once
}

func (l *lostRelease) ControlDelete(ctx context.Context, key string, rev uint64) error {
	lost := false
	if key == store.RestoreKey {
		l.once.Do(func() { lost = true })
	}
	if lost {
		return fmt.Errorf("delete %s: connection reset", key)
	}
	return l.EpochStore.ControlDelete(ctx, key, rev)
}

// testRetryAfterLostCommit: a restore's commit (the epoch CAS) lands but its answer is lost, so it
// fails with ErrUnknownOutcome and leaves its claim; epoch 2 then acknowledges writes. A retry
// with the same RestoreOptions.ID must see that its restore committed: success at epoch 2, the
// claim released, epoch 2 neither sealed nor refilled (restoring again would seal the live epoch,
// drop what it acknowledged, and leave it sealed if that redo stopped half way). So must a retry
// of a restore that crashed and was taken over, once the takeover committed. A restore with
// another ID or none is a new one and restores again (into epoch 3), a claim left behind by a
// restore that committed notwithstanding.
func testRetryAfterLostCommit(t *testing.T, f *restoreFixture) {
	ctx := context.Background()
	lostCommitThenLive := func(t *testing.T, opt store.RestoreOptions) (*restoreFixture, store.Grant) {
		f := newRestoreFixture(t, f.be)
		if _, err := store.Restore(ctx, &lostCommit{EpochStore: f.op1}, f.backup, opt); !errors.Is(err, store.ErrUnknownOutcome) {
			t.Fatalf("restore whose commit answer was lost: %v; want ErrUnknownOutcome", err)
		}
		g := f.goLive(t, f.op1)
		if g.Epoch != 2 {
			t.Fatalf("the lost commit landed: live epoch %d, want 2", g.Epoch)
		}
		return f, g
	}
	unchanged := func(t *testing.T, f *restoreFixture, g store.Grant) {
		t.Helper()
		f.wantLive(t, f.op2, g)
		for p := uint32(0); p < f.cl.Partitions; p++ {
			if sealed, err := f.op2.PartitionSealed(ctx, g.Epoch, p); err != nil || sealed {
				t.Fatalf("live epoch %d partition %d sealed = %v, %v", g.Epoch, p, sealed, err)
			}
		}
		if e, err := f.op2.LatestControl(ctx, store.RestoreKey); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("claim after the retry: %s, %v; want released", e.Value, err)
		}
	}
	t.Run("same ID", func(t *testing.T) {
		f, g := lostCommitThenLive(t, store.RestoreOptions{Operator: "op1", ID: "r1", FromEpoch: 1})
		// The caller pinned epoch 1 as well; its ID is checked first.
		cl, err := store.Restore(ctx, f.op2, f.backup, store.RestoreOptions{Operator: "op1", ID: "r1", FromEpoch: 1})
		if err != nil || cl.Epoch != 2 || cl.RestoredBy != "r1@2" {
			t.Fatalf("retry after the lost commit = %+v, %v; want epoch 2 restored by r1, nil (it committed)", cl, err)
		}
		unchanged(t, f, g)
		if cl, err := store.Restore(ctx, f.op2, f.backup, store.RestoreOptions{Operator: "op1", ID: "r2"}); err != nil || cl.Epoch != 3 {
			t.Fatalf("a new restore after it = %+v, %v; want epoch 3", cl, err)
		}
		f.wantRestored(t, f.op2, 3)
	})
	for _, other := range []store.RestoreOptions{{Operator: "op1", ID: "r2"}, {Operator: "op1"}, {}} {
		t.Run(fmt.Sprintf("new restore ID %q operator %q", other.ID, other.Operator), func(t *testing.T) {
			f, _ := lostCommitThenLive(t, store.RestoreOptions{Operator: "op1", ID: "r1"})
			if cl, err := store.Restore(ctx, f.op2, f.backup, other); err != nil || cl.Epoch != 3 {
				t.Fatalf("= %+v, %v; want epoch 3 (a new restore)", cl, err)
			}
			f.wantRestored(t, f.op2, 3)
		})
	}
	for _, opt := range []store.RestoreOptions{{Operator: "op1", FromEpoch: 2}, {Operator: "op2", Takeover: true, FromEpoch: 2}} {
		t.Run(fmt.Sprintf("claim left by a committed restore, then one by %s takeover %v", opt.Operator, opt.Takeover), func(t *testing.T) {
			f := newRestoreFixture(t, f.be)
			if cl, err := store.Restore(ctx, &lostRelease{EpochStore: f.op1}, f.backup, store.RestoreOptions{Operator: "op1", ID: "r1"}); err != nil || cl.Epoch != 2 {
				t.Fatalf("first restore = %+v, %v", cl, err)
			}
			if c := claim(t, f.op2); c.ID != "r1" || c.Epoch != 2 {
				t.Fatalf("claim left behind = %+v; want r1's into epoch 2", c)
			}
			f.goLive(t, f.op1)
			if cl, err := store.Restore(ctx, f.op2, f.backup, opt); err != nil || cl.Epoch != 3 {
				t.Fatalf("new restore over it = %+v, %v; want epoch 3", cl, err)
			}
			f.wantRestored(t, f.op2, 3)
		})
	}
	t.Run("taken over", func(t *testing.T) {
		f := newRestoreFixture(t, f.be)
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		_, err := store.Restore(cctx, f.op1, f.backup, store.RestoreOptions{Operator: "op1", ID: "a", Step: crashAt(cancel, "records", 1)})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("restore that died: %v", err)
		}
		_, err = store.Restore(ctx, &lostCommit{EpochStore: f.op2}, f.backup, store.RestoreOptions{Operator: "op2", ID: "t", Takeover: true})
		if !errors.Is(err, store.ErrUnknownOutcome) {
			t.Fatalf("takeover whose commit answer was lost: %v; want ErrUnknownOutcome", err)
		}
		g := f.goLive(t, f.op1)
		if g.Epoch != 3 {
			t.Fatalf("the takeover's lost commit landed: live epoch %d, want 3", g.Epoch)
		}
		for _, id := range []string{"a", "t"} {
			cl, err := store.Restore(ctx, f.op2, f.backup, store.RestoreOptions{Operator: "x", ID: id, Takeover: id == "t"})
			if err != nil || cl.Epoch != 3 || cl.RestoredBy != "t@3 a@3" {
				t.Fatalf("retry of %s = %+v, %v; want epoch 3 restored by \"t@3 a@3\", nil", id, cl, err)
			}
			unchanged(t, f, g)
		}
	})
	// Superseded: r1's commit landed unanswered, r2 then replaced epoch 2 with 3, which acknowledged
	// writes; r1's retry must change nothing and say so (a reviewer's case: it sealed epoch 3).
	t.Run("superseded since", func(t *testing.T) {
		f, _ := lostCommitThenLive(t, store.RestoreOptions{Operator: "op1", ID: "r1"})
		if cl, err := store.Restore(ctx, f.op2, f.backup, store.RestoreOptions{Operator: "op2", ID: "r2"}); err != nil || cl.Epoch != 3 || cl.RestoredBy != "r2@3 r1@2" {
			t.Fatalf("second restore = %+v, %v; want epoch 3 restored by \"r2@3 r1@2\"", cl, err)
		}
		g3 := f.goLive(t, f.op2)
		if _, err := store.Restore(ctx, f.op1, f.backup, store.RestoreOptions{Operator: "op1", ID: "r1"}); !errors.Is(err, store.ErrEpochMoved) {
			t.Fatalf("retry of r1 after epoch 3 replaced its epoch 2: %v; want ErrEpochMoved", err)
		}
		f.wantLive(t, f.op2, g3)
	})
	// An ID reused for a new restore that names, as the epoch to replace, the one that ID made:
	// not a retry (its first call named epoch 1). Refused rather than answered done (a reviewer's
	// case: it reported success and restored nothing).
	t.Run("ID reused with FromEpoch of its own epoch", func(t *testing.T) {
		f := newRestoreFixture(t, f.be)
		if cl, err := store.Restore(ctx, f.op1, f.backup, store.RestoreOptions{Operator: "op1", ID: "r1", FromEpoch: 1}); err != nil || cl.Epoch != 2 {
			t.Fatalf("first = %+v, %v", cl, err)
		}
		g := f.goLive(t, f.op1)
		if cl, err := store.Restore(ctx, f.op1, f.backup, store.RestoreOptions{Operator: "op1", ID: "r1", FromEpoch: 2}); err == nil {
			t.Fatalf("a new restore with a reused ID = %+v, nil; want refused", cl)
		}
		f.wantLive(t, f.op2, g)
	})
	// A takeover of a takeover: each of the three IDs' retries is done; a finished claim replaced
	// by a new restore carries none of their IDs into its epoch (but the history keeps them).
	t.Run("takeover chain", func(t *testing.T) {
		f := newRestoreFixture(t, f.be)
		for _, o := range []store.RestoreOptions{{Operator: "a", ID: "a"}, {Operator: "t1", ID: "t1", Takeover: true}} {
			cctx, cancel := context.WithCancel(ctx)
			o.Step = crashAt(cancel, "records", 1)
			if _, err := store.Restore(cctx, f.op1, f.backup, o); !errors.Is(err, context.Canceled) {
				t.Fatalf("%s: %v", o.ID, err)
			}
			cancel()
		}
		cl, err := store.Restore(ctx, f.op2, f.backup, store.RestoreOptions{Operator: "t2", ID: "t2", Takeover: true})
		if err != nil || cl.RestoredBy != fmt.Sprintf("t2@%d a@%d t1@%d", cl.Epoch, cl.Epoch, cl.Epoch) {
			t.Fatalf("t2 = %+v, %v", cl, err)
		}
		g := f.goLive(t, f.op1)
		for _, id := range []string{"a", "t1", "t2"} {
			if cl, err := store.Restore(ctx, f.op2, f.backup, store.RestoreOptions{ID: id}); err != nil || cl.Epoch != g.Epoch {
				t.Fatalf("retry %s = %+v, %v", id, cl, err)
			}
			f.wantLive(t, f.op2, g)
		}
		if cl, err := store.Restore(ctx, &lostRelease{EpochStore: f.op2}, f.backup, store.RestoreOptions{ID: "n"}); err != nil || !strings.HasPrefix(cl.RestoredBy, fmt.Sprintf("n@%d t2@", cl.Epoch)) {
			t.Fatalf("n = %+v, %v; want n alone for its epoch", cl, err)
		}
	})
	for _, bad := range []string{"two words", "a@b"} {
		if _, err := store.Restore(ctx, f.op1, f.backup, store.RestoreOptions{ID: bad}); err == nil {
			t.Fatalf("restore ID %q was accepted", bad)
		}
	}
}

// pauseAfterClusterRead holds the first restore that runs on it right after it read the cluster
// record: the restore has read epoch E and not claimed anything yet.
type pauseAfterClusterRead struct {
	store.EpochStore
	once           sync.Once
	paused, resume chan struct{}
}

func (p *pauseAfterClusterRead) LatestControl(ctx context.Context, key string) (store.Entry, error) {
	e, err := p.EpochStore.LatestControl(ctx, key)
	if key == store.ClusterKey {
		p.once.Do(func() { close(p.paused); <-p.resume })
	}
	return e, err
}

// testLateRestore (issue 9.4): two restores read epoch 1; the first finishes and epoch 2 carries
// acknowledged state; the second then runs on. It must stop before it seals, deletes or writes
// anything — without the claim it deletes and refills the live epoch and revokes every grant,
// and only its final epoch CAS fails, after the damage.
func testLateRestore(t *testing.T, f *restoreFixture) {
	race := func(t *testing.T, f *restoreFixture, skipClaim bool) (store.Grant, error) {
		late := &pauseAfterClusterRead{EpochStore: f.op2, paused: make(chan struct{}), resume: make(chan struct{})}
		second := restoreAsync(late, f.backup, store.RestoreOptions{Operator: "op2", SkipClaim: skipClaim})
		<-late.paused
		if _, err := store.Restore(context.Background(), f.op1, f.backup, store.RestoreOptions{Operator: "op1", SkipClaim: skipClaim}); err != nil {
			close(late.resume)
			<-second
			t.Fatalf("first restore: %v", err)
		}
		g := f.goLive(t, f.op1)
		close(late.resume)
		return g, <-second
	}
	t.Run("with the claim", func(t *testing.T) {
		g, err := race(t, f, false)
		if !errors.Is(err, store.ErrRestoreClaimLost) {
			t.Fatalf("the restore that read epoch 1 before the other finished: %v; want ErrRestoreClaimLost", err)
		}
		f.wantLive(t, f.op2, g)
		for p := uint32(0); p < f.cl.Partitions; p++ {
			if sealed, err := f.op2.PartitionSealed(context.Background(), 2, p); err != nil || sealed {
				t.Fatalf("live epoch 2 partition %d sealed = %v, %v", p, sealed, err)
			}
		}
		if e, err := f.op2.LatestControl(context.Background(), store.RestoreKey); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("claim after the late restore stopped: %s, %v; want released", e.Value, err)
		}
	})
	t.Run("without the claim", func(t *testing.T) {
		f := newRestoreFixture(t, f.be)
		_, err := race(t, f, true)
		if err == nil {
			t.Fatal("the late restore's epoch CAS succeeded")
		}
		rec, _, lerr := f.op2.Load(context.Background(), 2, 3, f.id3)
		a, _, aerr := f.op2.LatestAssignment(context.Background(), 2, 3)
		if lerr != nil || string(rec.State) != "backed up" || aerr != nil || a.Owner != "" {
			t.Fatalf("without the claim the live epoch should be clobbered (the demonstration needs it): %q, %v; shard 3 %+v, %v",
				rec.State, lerr, a, aerr)
		}
	})
}

// testBackupBlobs: a record whose state is a blob is backed up with the blob; after the blob was
// collected (the instance moved on to a small state), the restore brings the state back.
func testBackupBlobs(t *testing.T, f *restoreFixture) {
	ctx := context.Background()
	big := bytes.Repeat([]byte("blob"), store.BlobThreshold/4+10)
	id := idIn(3, 9)
	f.create(f.a, id, "small")
	if _, err := f.s.Write(ctx, f.a, id, store.Record{Kind: "test", Tick: 2, State: big}); err != nil {
		t.Fatal(err)
	}
	b, err := store.TakeBackup(ctx, f.op1, nil)
	if err != nil {
		t.Fatalf("TakeBackup: %v", err)
	}
	if len(b.Blobs) != 1 {
		t.Fatalf("the backup holds %d blobs, want 1", len(b.Blobs))
	}
	if _, err := f.s.Write(ctx, f.a, id, store.Record{Kind: "test", Tick: 3, State: []byte("small again")}); err != nil {
		t.Fatal(err)
	}
	c, ok := f.s.(BlobCollector)
	if !ok {
		t.Fatalf("%T cannot collect its blobs", f.s)
	}
	if res, err := c.CollectBlobs(ctx, 0, false); err != nil || len(res.Deleted) != 1 {
		t.Fatalf("collect: %+v, %v; want the unreferenced blob deleted", res, err)
	}
	if _, err := store.Restore(ctx, f.op1, b, store.RestoreOptions{Operator: "op1", FromEpoch: 1}); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	r, _, err := f.op2.Load(ctx, 2, 3, id)
	if err != nil || !bytes.Equal(r.State, big) {
		t.Fatalf("restored state: %d bytes, %v; want the %d-byte blob back", len(r.State), err, len(big))
	}
}
