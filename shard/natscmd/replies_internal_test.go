package natscmd

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/store/natskv"
)

// TestPublisherHandsOffWhatItDoesNotPublish: a sender that has used up its rounds returns at
// once, and what is still queued is published all the same.
func TestPublisherHandsOffWhatItDoesNotPublish(t *testing.T) {
	srv, err := natsserver.Start(natsserver.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatalf("embedded NATS server: %v", err)
	}
	t.Cleanup(srv.Stop)
	nc, err := natskv.Connect("", srv.ConnectOption())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	var got atomic.Int64
	if _, err := nc.Subscribe("handoff.*", func(*nats.Msg) { got.Add(1) }); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	var r replies
	if err := r.start(nc); err != nil {
		t.Fatal(err)
	}
	const n = 1000
	r.out.Lock()
	for i := range n {
		tok := uint64(i + 1)
		t := &r.tabs[tok%replyStripes]
		t.mu.Lock()
		t.waiting[tok] = func(answer) {} // awaited: the publisher sends only those
		t.mu.Unlock()
		r.queued = append(r.queued, outgoing{m: nats.NewMsg("handoff." + strconv.Itoa(i)), tok: tok})
	}
	r.publishing = true
	r.out.Unlock()
	r.publish(0) // no rounds left: must hand everything to a goroutine of its own
	deadline := time.Now().Add(10 * time.Second)
	for got.Load() < n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if g := got.Load(); g != n {
		t.Fatalf("%d of %d queued messages published; the rest were stranded", g, n)
	}
	r.out.Lock()
	defer r.out.Unlock()
	if r.publishing || len(r.queued) != 0 {
		t.Fatalf("after the queue drained: publishing %v, %d queued; want false, 0", r.publishing, len(r.queued))
	}
}
