package natskv_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/natskv"
	"github.com/tickfence/tickfence/store/storetest"
)

// newStore starts a real embedded JetStream server for one test; there is no fallback.
func newStore(t *testing.T) store.Store {
	t.Helper()
	srv, err := natsserver.Start(natsserver.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatalf("embedded NATS server: %v", err)
	}
	t.Cleanup(srv.Stop)
	nc, err := natskv.Connect("", srv.ConnectOption())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	s, err := natskv.Open(nc, natskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Backend{
		New: newStore,
		PutRaw: func(t *testing.T, s store.Store, epoch uint64, shard uint32, id string, data []byte) {
			ns := s.(*natskv.Store)
			if err := ns.PutRaw(context.Background(), epoch, shard, id, data); err != nil {
				t.Fatal(err)
			}
		},
	})
}

func TestControlConformance(t *testing.T) {
	storetest.RunControl(t, storetest.Backend{
		New: newStore,
		PutRaw: func(t *testing.T, s store.Store, epoch uint64, shard uint32, id string, data []byte) {
			ns := s.(*natskv.Store)
			if err := ns.PutRaw(context.Background(), epoch, shard, id, data); err != nil {
				t.Fatal(err)
			}
		},
	})
}

func TestOpenRefusesReconnectBuffer(t *testing.T) {
	srv, err := natsserver.Start(natsserver.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	nc, err := nats.Connect("", srv.ConnectOption())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := natskv.Open(nc, natskv.Options{}); err == nil {
		t.Fatal("Open accepted a connection that buffers publishes while reconnecting")
	}
}
