package clusterinit_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickfence/tickfence/clusterinit"
	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/store/natskv"
)

// effectsStep is the effects stream's step of an Init.
func effectsStep(t *testing.T, res clusterinit.Result) natskv.Step {
	t.Helper()
	for _, s := range res.Steps {
		if s.Name == natscmd.EffectsStream {
			return s
		}
	}
	t.Fatalf("no effects stream step in %+v", res.Steps)
	return natskv.Step{}
}

func effectsConfig(t *testing.T, js jetstream.JetStream) (jetstream.StreamConfig, uint64) {
	t.Helper()
	s, err := js.Stream(ctx(t), natscmd.EffectsStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	return info.Config, info.State.Msgs
}

// TestInitRepairsTheEffectsStream: on three servers, an effects consumer started before the cluster
// makes no stream (it used to make one of one replica, which everything after took as found). A
// stream made by hand — one replica, JetStream's default 2-minute duplicate window — holding an
// acknowledged effect is updated by cluster init to the cluster's 3 replicas and the 10-minute
// window (reported as updated, saying what changed), and keeps its effect; a second init finds it
// well shaped.
func TestInitRepairsTheEffectsStream(t *testing.T) {
	srvs, err := natsserver.StartCluster(3, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var urls []string
	for _, s := range srvs {
		t.Cleanup(s.Stop)
		urls = append(urls, s.ClientURL())
	}
	nc, err := natskv.Connect(strings.Join(urls, ","))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)

	cerr := natscmd.ConsumeEffects(ctx(t), nc, "early-loot", nil, func(context.Context, natscmd.EffectMsg) error { return nil })
	if !errors.Is(cerr, natscmd.ErrNoEffectsStream) {
		t.Errorf("a consumer before the cluster: %v, want ErrNoEffectsStream", cerr)
	}
	if _, err := js.Stream(ctx(t), natscmd.EffectsStream); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("the effects stream after an early consumer: %v, want none", err)
	}

	if _, err := js.CreateStream(ctx(t), jetstream.StreamConfig{Name: natscmd.EffectsStream, Subjects: []string{natscmd.EffectsPrefix + ".>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx(t), natscmd.EffectSubject("loot", "d1"), []byte("sword"), jetstream.WithMsgID("d1:1:1")); err != nil {
		t.Fatal(err)
	}
	if cfg, _ := effectsConfig(t, js); cfg.Replicas != 1 || cfg.Duplicates != 2*time.Minute {
		t.Fatalf("the hand-made stream: %d replicas, window %v; want JetStream's defaults 1 and 2m", cfg.Replicas, cfg.Duplicates)
	}

	res, err := clusterinit.Init(ctx(t), nc, clusterinit.Options{Shards: 8, Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	step := effectsStep(t, res)
	if step.State != natskv.StepUpdated || !strings.Contains(step.Note, "replicas 1 → 3") || !strings.Contains(step.Note, "duplicate window 2m0s → 10m0s") {
		t.Errorf("init over the hand-made effects stream: %+v; want updated, saying what changed", step)
	}
	if cfg, msgs := effectsConfig(t, js); cfg.Replicas != 3 || cfg.Duplicates != natscmd.EffectsDuplicates || msgs != 1 {
		t.Errorf("the effects stream after init: %d replicas, window %v, %d effects; want 3, %v, the 1 it held",
			cfg.Replicas, cfg.Duplicates, msgs, natscmd.EffectsDuplicates)
	}
	again, err := clusterinit.Init(ctx(t), nc, clusterinit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s := effectsStep(t, again); s.State != natskv.StepExists || again.Changed() {
		t.Errorf("a second init: %+v (changed %v), want the effects stream as it is", s, again.Changed())
	}
}

// TestInitRefusesAnEffectsStreamItCannotRepair: an effects stream no update can make right — in
// memory, on other subjects, keeping effects only while a consumer is interested — is refused by
// cluster init, naming the stream, what is wrong and what to do; and nothing of it is changed
// (not even what an update could repair).
func TestInitRefusesAnEffectsStreamItCannotRepair(t *testing.T) {
	for name, c := range map[string]struct {
		edit func(*jetstream.StreamConfig)
		says string
	}{
		"memory":         {func(c *jetstream.StreamConfig) { c.Storage = jetstream.MemoryStorage }, "storage is Memory"},
		"other subjects": {func(c *jetstream.StreamConfig) { c.Subjects = []string{natscmd.EffectsPrefix + ".loot.*"} }, "captures"},
		"interest":       {func(c *jetstream.StreamConfig) { c.Retention = jetstream.InterestPolicy }, "retention is Interest"},
	} {
		t.Run(name, func(t *testing.T) {
			nc, js := connect(t)
			cfg := jetstream.StreamConfig{Name: natscmd.EffectsStream, Subjects: []string{natscmd.EffectsPrefix + ".>"}}
			c.edit(&cfg)
			if _, err := js.CreateStream(ctx(t), cfg); err != nil {
				t.Fatal(err)
			}
			_, err := clusterinit.Init(ctx(t), nc, clusterinit.Options{Shards: 8})
			if err == nil {
				t.Fatal("init took the effects stream")
			}
			for _, w := range []string{natscmd.EffectsStream, c.says, "nats stream rm", "cluster init"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("init: %v; want it to say %q", err, w)
				}
			}
			if got, _ := effectsConfig(t, js); got.Duplicates != 2*time.Minute {
				t.Errorf("the refused stream's window is %v: init changed it", got.Duplicates)
			}
		})
	}
}
