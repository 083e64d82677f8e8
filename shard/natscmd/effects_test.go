package natscmd_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/natskv"
)

// TestEffectRepublishedIsStoredOnce: an effect published twice with its key (a new owner sending
// what its record still held) is stored once by the stream's duplicate window, and a consumer
// receives each effect once, with its key, kind and instance.
func TestEffectRepublishedIsStoredOnce(t *testing.T) {
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
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, _ := jetstream.New(nc)
	if _, err := natscmd.EnsureEffectsStream(ctx, js, 1); err != nil {
		t.Fatal(err)
	}
	pub, err := natscmd.NewEffectPublisher(nc)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	send := func(e store.Effect) {
		done := make(chan error, 1)
		pub.Publish("d1", e, func(err error) { done <- err })
		if err := <-done; err != nil {
			t.Fatalf("publish %s: %v", e.Key, err)
		}
	}
	a := store.Effect{Key: store.EffectKey("d1", 1, 1), Kind: "loot", Payload: []byte("sword")}
	b := store.Effect{Key: store.EffectKey("d1", 1, 2), Kind: "loot", Payload: []byte("helm")}
	send(a)
	send(a) // the new owner's republish
	send(b)
	s, err := js.Stream(ctx, natscmd.EffectsStream)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := s.Info(ctx); err != nil || info.State.Msgs != 2 {
		t.Fatalf("stream holds %v messages (%v), want 2", info.State.Msgs, err)
	}
	var mu sync.Mutex
	var got []natscmd.EffectMsg
	cctx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		errc <- natscmd.ConsumeEffects(cctx, nc, "test-loot", []string{"loot"}, func(_ context.Context, m natscmd.EffectMsg) error {
			mu.Lock()
			got = append(got, m)
			mu.Unlock()
			return nil
		})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // a third delivery, if any, would have come
	stop()
	<-errc
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got[0].Key != a.Key || got[1].Key != b.Key || got[0].Instance != "d1" || got[0].Kind != "loot" || string(got[1].Payload) != "helm" {
		t.Fatalf("consumer received %+v, want %s and %s once each", got, a.Key, b.Key)
	}
}
