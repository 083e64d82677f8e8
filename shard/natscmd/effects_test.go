package natscmd_test

import (
	"context"
	"errors"
	"strings"
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
	if _, _, err := natscmd.EnsureEffectsStream(ctx, js, 1); err != nil {
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

// TestConsumerNeverMakesTheEffectsStream: an effects consumer started before the cluster's storage
// exists makes no stream (it would have its shape, not the cluster's: one replica on a 3-server
// cluster, which the nodes then published to) and says at once what is missing and who makes it.
func TestConsumerNeverMakesTheEffectsStream(t *testing.T) {
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
	errc := make(chan error, 1)
	go func() {
		errc <- natscmd.ConsumeEffects(ctx, nc, "early-loot", nil, func(context.Context, natscmd.EffectMsg) error { return nil })
	}()
	var cerr error
	for done := false; !done; {
		select {
		case cerr = <-errc:
			done = true
		case <-ctx.Done():
			t.Fatal("the consumer neither returned nor made the stream")
		case <-time.After(20 * time.Millisecond):
			if _, err := js.Stream(ctx, natscmd.EffectsStream); err == nil {
				t.Fatalf("the consumer made the effects stream %s", natscmd.EffectsStream)
			}
		}
	}
	if !errors.Is(cerr, natscmd.ErrNoEffectsStream) || !strings.Contains(cerr.Error(), natscmd.EffectsStream) ||
		!strings.Contains(cerr.Error(), "cluster init") {
		t.Errorf("the consumer before any stream: %v; want ErrNoEffectsStream naming the stream and tickctl cluster init", cerr)
	}
	if _, err := js.Stream(ctx, natscmd.EffectsStream); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("the effects stream after the consumer: %v, want none", err)
	}
}

// TestEffectsStreamShape: CheckEffectsStream accepts what EffectsStreamConfig makes (and more
// replicas or a longer window), and says what is wrong with anything else, split into what an
// update repairs and what it cannot.
func TestEffectsStreamShape(t *testing.T) {
	good := natscmd.EffectsStreamConfig(3)
	more := good
	more.Replicas, more.Duplicates = 5, time.Hour
	for name, cfg := range map[string]jetstream.StreamConfig{"as made": good, "more replicas, longer window": more} {
		if err := natscmd.CheckEffectsStream(cfg, 3); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	type want struct{ repairable, unrepairable []string }
	for name, c := range map[string]struct {
		edit func(*jetstream.StreamConfig)
		want want
	}{
		"one replica":       {func(c *jetstream.StreamConfig) { c.Replicas = 1 }, want{repairable: []string{"1 replica", "want 3"}}},
		"default window":    {func(c *jetstream.StreamConfig) { c.Duplicates = 2 * time.Minute }, want{repairable: []string{"2m0s", "10m0s"}}},
		"memory":            {func(c *jetstream.StreamConfig) { c.Storage = jetstream.MemoryStorage }, want{unrepairable: []string{"storage"}}},
		"interest":          {func(c *jetstream.StreamConfig) { c.Retention = jetstream.InterestPolicy }, want{unrepairable: []string{"retention"}}},
		"other subjects":    {func(c *jetstream.StreamConfig) { c.Subjects = []string{"tickfence.fx.loot.*"} }, want{unrepairable: []string{"captures"}}},
		"memory, 1 replica": {func(c *jetstream.StreamConfig) { c.Storage, c.Replicas = jetstream.MemoryStorage, 1 }, want{[]string{"replica"}, []string{"storage"}}},
	} {
		cfg := natscmd.EffectsStreamConfig(3)
		c.edit(&cfg)
		err := natscmd.CheckEffectsStream(cfg, 3)
		var se *natscmd.EffectsShapeError
		if !errors.As(err, &se) {
			t.Errorf("%s: %v, want an EffectsShapeError", name, err)
			continue
		}
		for _, part := range [][2][]string{{se.Repairable, c.want.repairable}, {se.Unrepairable, c.want.unrepairable}} {
			got := strings.Join(part[0], "; ")
			if (len(part[0]) == 0) != (len(part[1]) == 0) {
				t.Errorf("%s: %q, want parts %q", name, got, part[1])
			}
			for _, w := range part[1] {
				if !strings.Contains(got, w) {
					t.Errorf("%s: %q, want it to say %q", name, got, w)
				}
			}
		}
		if msg := err.Error(); !strings.Contains(msg, natscmd.EffectsStream) || !strings.Contains(msg, "cluster init") ||
			(len(se.Unrepairable) > 0) != strings.Contains(msg, "nats stream rm") {
			t.Errorf("%s: %q: want the stream's name and what to do", name, msg)
		}
	}
}
