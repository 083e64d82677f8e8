package natskv_test

import (
	"bytes"
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/natskv"
)

// freezer is an in-process connection provider whose client→server stream freezes (the process
// is SIGSTOPped) the first time it is about to send a frame containing trigger, until thaw.
type freezer struct {
	srv     *natsserver.Server
	mu      sync.Mutex
	trigger []byte
	frozen  chan struct{}
	thaw    chan struct{}
	once    sync.Once
}

func (f *freezer) InProcessConn() (net.Conn, error) {
	c, err := f.srv.InProcessConn()
	if err != nil {
		return nil, err
	}
	return &freezeConn{Conn: c, f: f}, nil
}

type freezeConn struct {
	net.Conn
	f *freezer
}

func (c *freezeConn) Write(b []byte) (int, error) {
	c.f.mu.Lock()
	hit := c.f.trigger != nil && bytes.Contains(b, c.f.trigger)
	if hit {
		c.f.trigger = nil
	}
	c.f.mu.Unlock()
	if hit {
		close(c.f.frozen)
		<-c.f.thaw
	}
	return c.Conn.Write(b)
}

func openFreezable(t *testing.T, srv *natsserver.Server, trigger string) (*natskv.Store, *freezer) {
	t.Helper()
	f := &freezer{srv: srv, trigger: []byte(trigger), frozen: make(chan struct{}), thaw: make(chan struct{})}
	nc, err := natskv.Connect("", nats.InProcessServer(f))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	s, err := natskv.Open(nc, natskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, f
}

func newFreezeWorld(t *testing.T, trigger string) (*restoreWorld, *freezer) {
	t.Helper()
	ctx := context.Background()
	srv, err := natsserver.Start(natsserver.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	op1, f := openFreezable(t, srv, trigger)
	w := &restoreWorld{op1: op1, op2: openOn(t, srv)}
	boot := openOn(t, srv)
	if _, err := boot.Bootstrap(ctx, store.Cluster{Shards: 8, Partitions: 1, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	a := store.Assignment{Owner: "A", Session: "a1", Grant: "1.1"}
	tok, err := boot.Assign(ctx, 1, 3, a, 0)
	if err != nil {
		t.Fatal(err)
	}
	w.g = store.Grant{Epoch: 1, Shard: 3, Token: tok, Assignment: a}
	for i := 0; w.id == "" || store.ShardOf(w.id, 8) != 3; i++ {
		w.id = "i" + string(rune('a'+i%26)) + time.Duration(i).String()
	}
	if _, err := boot.Create(ctx, w.g, w.id, store.Record{Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	if _, err := boot.Write(ctx, w.g, w.id, store.Record{Kind: "k", Tick: 1, State: []byte("backed up")}); err != nil {
		t.Fatal(err)
	}
	if w.backup, err = boot.Backup(ctx, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // a failing test must not leave the frozen restorer blocked
		f.release()
	})
	return w, f
}

// the first restore passes its claim check for the "buckets" step and freezes as it sends
// the delete of epoch 2's bucket (a GC pause, SIGSTOP, a slow link: to the operator it looks
// crashed). A takeover finishes the restore, the cluster writes acknowledged state into epoch 2.
// The first restore wakes: its delete lands.
func TestTakeoverVsFrozenRestorerAtBucketDelete(t *testing.T) {
	ctx := context.Background()
	w, f := newFreezeWorld(t, "$JS.API.STREAM.DELETE.KV_"+store.DataBucket(2, 0))
	first := make(chan error, 1)
	go func() {
		_, err := w.op1.Restore(ctx, w.backup, natskv.RestoreOptions{Operator: "op1"})
		first <- err
	}()
	select {
	case <-f.frozen:
	case err := <-first:
		t.Fatalf("first restore ended before freezing: %v", err)
	}
	cl, err := w.op2.Restore(ctx, w.backup, natskv.RestoreOptions{Operator: "op2", Takeover: true})
	if err != nil || cl.Epoch != 3 {
		t.Fatalf("takeover = %+v, %v; want epoch 3 (the one after the epoch the frozen restorer claimed)", cl, err)
	}
	g := w.goLive(t, w.op2)
	w.wantLive(t, w.op2, g) // live before the frozen restorer wakes
	f.release()
	err = <-first
	t.Logf("first restore after waking: %v", err)
	w.wantLive(t, w.op2, g)
}

// the first restore passes its "records" check and freezes as it sends its first record put.
// A takeover finishes, the cluster writes acknowledged state; the first wakes: its put lands.
func TestTakeoverVsFrozenRestorerAtRecordPut(t *testing.T) {
	ctx := context.Background()
	w, f := newFreezeWorld(t, "$KV."+store.DataBucket(2, 0)+".inst.")
	first := make(chan error, 1)
	go func() {
		_, err := w.op1.Restore(ctx, w.backup, natskv.RestoreOptions{Operator: "op1"})
		first <- err
	}()
	select {
	case <-f.frozen:
	case err := <-first:
		t.Fatalf("first restore ended before freezing: %v", err)
	}
	cl, err := w.op2.Restore(ctx, w.backup, natskv.RestoreOptions{Operator: "op2", Takeover: true})
	if err != nil || cl.Epoch != 3 {
		t.Fatalf("takeover = %+v, %v; want epoch 3 (the one after the epoch the frozen restorer claimed)", cl, err)
	}
	g := w.goLive(t, w.op2)
	w.wantLive(t, w.op2, g)
	f.release()
	err = <-first
	t.Logf("first restore after waking: %v", err)
	w.wantLive(t, w.op2, g)
}

// release thaws the frozen connection (once).
func (f *freezer) release() { f.once.Do(func() { close(f.thaw) }) }
