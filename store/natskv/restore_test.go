package natskv_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/natskv"
)

// restoreWorld is a real embedded server with two operators' connections, a cluster of 8 shards
// whose shard 3 is granted to A and holds one instance, and a backup of it.
type restoreWorld struct {
	op1, op2 *natskv.Store
	g        store.Grant
	id       string
	backup   store.Backup
}

func openOn(t *testing.T, srv *natsserver.Server) *natskv.Store {
	t.Helper()
	nc, err := natskv.Connect("", srv.ConnectOption())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	s, err := natskv.Open(nc, natskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newRestoreWorld(t *testing.T) *restoreWorld {
	t.Helper()
	ctx := context.Background()
	srv, err := natsserver.Start(natsserver.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatalf("embedded NATS server: %v", err)
	}
	t.Cleanup(srv.Stop)
	w := &restoreWorld{op1: openOn(t, srv), op2: openOn(t, srv)}
	if _, err := w.op1.Bootstrap(ctx, store.Cluster{Shards: 8, Partitions: 1, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	a := store.Assignment{Owner: "A", Session: "a1", Grant: "1.1"}
	tok, err := w.op1.Assign(ctx, 1, 3, a, 0)
	if err != nil {
		t.Fatal(err)
	}
	w.g = store.Grant{Epoch: 1, Shard: 3, Token: tok, Assignment: a}
	for i := 0; w.id == "" || store.ShardOf(w.id, 8) != 3; i++ {
		w.id = fmt.Sprintf("i%d", i)
	}
	if _, err := w.op1.Create(ctx, w.g, w.id, store.Record{Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.op1.Write(ctx, w.g, w.id, store.Record{Kind: "k", Tick: 1, State: []byte("backed up")}); err != nil {
		t.Fatal(err)
	}
	if w.backup, err = w.op1.Backup(ctx, nil); err != nil {
		t.Fatal(err)
	}
	return w
}

// pauseAt makes a Step hook that stops the restore at the first step of that name until resume
// is closed; paused is closed when it gets there.
func pauseAt(name string) (step func(string) error, paused, resume chan struct{}) {
	paused, resume = make(chan struct{}), make(chan struct{})
	first := true
	return func(s string) error {
		if s == name && first {
			first = false
			close(paused)
			<-resume
		}
		return nil
	}, paused, resume
}

// goLive makes the live epoch (the restored one) carry acknowledged state: shard 3 granted to B,
// the instance loaded, registered and written. It returns B's grant.
func (w *restoreWorld) goLive(t *testing.T, st *natskv.Store) store.Grant {
	t.Helper()
	ctx := context.Background()
	cl, err := st.Cluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e := cl.Epoch
	cur, rev, err := st.LatestAssignment(ctx, e, 3)
	if err != nil {
		t.Fatal(err)
	}
	_ = cur
	b := store.Assignment{Owner: "B", Session: "b1", Grant: "9.1"}
	tok, err := st.Assign(ctx, e, 3, b, rev)
	if err != nil {
		t.Fatal(err)
	}
	g := store.Grant{Epoch: e, Shard: 3, Token: tok, Assignment: b}
	rec, lrev, err := st.Load(ctx, e, 3, w.id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Register(ctx, g, w.id, rec, lrev); err != nil {
		t.Fatal(err)
	}
	rec.Tick, rec.State = 2, []byte("live")
	if _, err := st.Write(ctx, g, w.id, rec); err != nil {
		t.Fatal(err)
	}
	return g
}

// wantLive checks that the grant's epoch is live and still holds the live state and B's grant.
func (w *restoreWorld) wantLive(t *testing.T, st *natskv.Store, g store.Grant) {
	t.Helper()
	ctx := context.Background()
	if cl, err := st.Cluster(ctx); err != nil || cl.Epoch != g.Epoch {
		t.Fatalf("cluster = %+v, %v; want epoch %d", cl, err, g.Epoch)
	}
	if rec, _, err := st.Load(ctx, g.Epoch, 3, w.id); err != nil || string(rec.State) != "live" {
		t.Fatalf("epoch %d instance = %q, %v; want the acknowledged %q", g.Epoch, rec.State, err, "live")
	}
	if a, tok, err := st.LatestAssignment(ctx, g.Epoch, 3); err != nil || a != g.Assignment || tok != g.Token {
		t.Fatalf("shard 3 in epoch %d = %+v@%d, %v; want the live grant %+v@%d", g.Epoch, a, tok, err, g.Assignment, g.Token)
	}
}

// TestSecondRestoreRefusedWhileOneRuns (issue 9.4): two operators restore the same backup at
// once. The second is refused before it seals or deletes anything, naming the first; the first
// finishes, and epoch 2 then carries acknowledged state nobody overwrites.
func TestSecondRestoreRefusedWhileOneRuns(t *testing.T) {
	ctx := context.Background()
	w := newRestoreWorld(t)
	step, paused, resume := pauseAt("records")
	first := make(chan error, 1)
	go func() {
		_, err := w.op1.Restore(ctx, w.backup, natskv.RestoreOptions{Operator: "op1", Step: step})
		first <- err
	}()
	<-paused
	_, err := w.op2.Restore(ctx, w.backup, natskv.RestoreOptions{Operator: "op2"})
	var claimed *store.RestoreClaimedError
	if !errors.As(err, &claimed) || !errors.Is(err, store.ErrRestoreClaimed) || claimed.Claim.Operator != "op1" || claimed.Claim.Epoch != 2 {
		close(resume)
		<-first
		t.Fatalf("second restore while the first runs: err = %v; want ErrRestoreClaimed naming op1 and epoch 2", err)
	}
	close(resume)
	if err := <-first; err != nil {
		t.Fatalf("first restore: %v", err)
	}
	g := w.goLive(t, w.op2)
	w.wantLive(t, w.op1, g)
	if _, err := w.op1.LatestControl(ctx, store.RestoreKey); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("restore claim after a finished restore: %v; want it released", err)
	}
}

// TestTakenOverRestoreStopsBeforeClobbering (issue 9.4): the first restore stalls (the operator
// thinks it crashed); a second takes it over and finishes, and the cluster writes acknowledged
// state into the new epoch. When the first wakes, it must stop at its next step — not overwrite
// the live records with the backup and revoke every grant before its epoch CAS fails.
func TestTakenOverRestoreStopsBeforeClobbering(t *testing.T) {
	ctx := context.Background()
	w := newRestoreWorld(t)
	step, paused, resume := pauseAt("records")
	first := make(chan error, 1)
	go func() {
		_, err := w.op1.Restore(ctx, w.backup, natskv.RestoreOptions{Operator: "op1", Step: step})
		first <- err
	}()
	<-paused
	cl, err := w.op2.Restore(ctx, w.backup, natskv.RestoreOptions{Operator: "op2", Takeover: true})
	if err != nil || cl.Epoch != 3 {
		close(resume)
		<-first
		t.Fatalf("takeover restore = %+v, %v; want epoch 3, after the one the taken-over restore claimed", cl, err)
	}
	g := w.goLive(t, w.op2)
	close(resume)
	if err := <-first; !errors.Is(err, store.ErrRestoreClaimLost) {
		t.Fatalf("the restore that was taken over: err = %v; want ErrRestoreClaimLost", err)
	}
	w.wantLive(t, w.op2, g)
}

// TestCrashedRestoreIsTakenOver (issue 9.4): a restore crashes after sealing epoch 1 and making
// epoch 2's buckets. The cluster cannot write anywhere until it is finished: a plain retry is
// refused (the claim names the crashed operator), undoing is refused (a sealed stream stays
// sealed), and an explicit takeover finishes it.
func TestCrashedRestoreIsTakenOver(t *testing.T) {
	ctx := context.Background()
	w := newRestoreWorld(t)
	crash := errors.New("operator's machine lost power")
	_, err := w.op1.Restore(ctx, w.backup, natskv.RestoreOptions{Operator: "op1", Step: func(s string) error {
		if s == "records" {
			return crash
		}
		return nil
	}})
	if !errors.Is(err, crash) {
		t.Fatalf("crashing restore: err = %v", err)
	}
	if _, err := w.op2.Restore(ctx, w.backup, natskv.RestoreOptions{Operator: "op1-retry"}); !errors.Is(err, store.ErrRestoreClaimed) {
		t.Fatalf("retry without takeover: err = %v; want ErrRestoreClaimed", err)
	}
	if _, err := store.AbandonRestore(ctx, w.op2); err == nil {
		t.Fatal("abandoning a restore that sealed epoch 1 was accepted")
	}
	cl, err := w.op2.Restore(ctx, w.backup, natskv.RestoreOptions{Operator: "op1-retry", Takeover: true})
	if err != nil || cl.Epoch != 3 {
		t.Fatalf("takeover = %+v, %v; want epoch 3, after the one the crashed restore claimed", cl, err)
	}
	if rec, _, err := w.op2.Load(ctx, 3, 3, w.id); err != nil || string(rec.State) != "backed up" {
		t.Fatalf("restored record %q, %v", rec.State, err)
	}
	if _, err := w.op1.Write(ctx, w.g, w.id, store.Record{Kind: "k", Tick: 9, State: []byte("zombie")}); !errors.Is(err, store.ErrStaleOwner) {
		t.Fatalf("zombie write into sealed epoch 1: err = %v; want ErrStaleOwner", err)
	}
	if _, err := w.op2.LatestControl(ctx, store.RestoreKey); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("claim after the takeover finished: %v; want released", err)
	}
	g := w.goLive(t, w.op1)
	w.wantLive(t, w.op2, g)
}

// TestCrashedRestoreBeforeSealIsAbandoned: a restore that crashed before sealing anything can be
// undone: its claim is released and epoch 1 carries on.
func TestCrashedRestoreBeforeSealIsAbandoned(t *testing.T) {
	ctx := context.Background()
	w := newRestoreWorld(t)
	crash := errors.New("crash")
	if _, err := w.op1.Restore(ctx, w.backup, natskv.RestoreOptions{Operator: "op1", Step: func(s string) error {
		if s == "seal" {
			return crash
		}
		return nil
	}}); !errors.Is(err, crash) {
		t.Fatalf("crashing restore: err = %v", err)
	}
	held, err := store.AbandonRestore(ctx, w.op2)
	if err != nil || held.Operator != "op1" || held.Epoch != 2 {
		t.Fatalf("AbandonRestore = %+v, %v", held, err)
	}
	if _, err := w.op2.LatestControl(ctx, store.RestoreKey); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("claim after abandon: %v; want released", err)
	}
	if _, err := w.op1.Write(ctx, w.g, w.id, store.Record{Kind: "k", Tick: 2, State: []byte("on")}); err != nil {
		t.Fatalf("epoch 1 after an abandoned restore: %v", err)
	}
}
