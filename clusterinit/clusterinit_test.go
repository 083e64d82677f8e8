package clusterinit_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickfence/tickfence/auth"
	"github.com/tickfence/tickfence/clusterinit"
	"github.com/tickfence/tickfence/coordinator"
	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/natskv"
)

func connect(t *testing.T) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	srv, err := natsserver.Start(natsserver.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	nc, err := natskv.Connect("", srv.ConnectOption())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// TestInitMakesEverythingOnce: a first Init makes every part of the storage, shaped as asked, and
// reports each as it goes; a second changes nothing and reports every part as there.
func TestInitMakesEverythingOnce(t *testing.T) {
	nc, js := connect(t)
	var seen []natskv.Step
	res, err := clusterinit.Init(ctx(t), nc, clusterinit.Options{Shards: 8, Partitions: 2, History: 3,
		Progress: func(s natskv.Step) { seen = append(seen, s) }})
	if err != nil {
		t.Fatal(err)
	}
	if want := (store.Cluster{Shards: 8, Partitions: 2, Replicas: 1, Epoch: 1}); res.Cluster != want {
		t.Errorf("cluster %+v, want %+v", res.Cluster, want)
	}
	if len(seen) != len(res.Steps) || !res.Changed() {
		t.Errorf("progress %d steps, result %d, changed %v", len(seen), len(res.Steps), res.Changed())
	}
	made := map[string]string{}
	for _, s := range res.Steps {
		made[s.Name] = s.State
	}
	for _, name := range []string{store.ControlBucket, store.ClusterKey, store.DataBucket(1, 0), store.DataBucket(1, 1), store.BlobBucket,
		natscmd.EffectsStream, auth.AuditStream} {
		if made[name] != natskv.StepCreated {
			t.Errorf("%s: %q, want created (steps %+v)", name, made[name], res.Steps)
		}
	}
	for p := range uint32(2) {
		s, err := js.Stream(ctx(t), "KV_"+store.DataBucket(1, p))
		if err != nil {
			t.Fatal(err)
		}
		cfg := s.CachedInfo().Config
		if cfg.AllowRollup || !cfg.AllowAtomicPublish || cfg.MaxMsgsPerSubject != 3 || !cfg.DenyDelete {
			t.Errorf("data bucket p%d: rollup %v, atomic %v, history %d, deny delete %v", p, cfg.AllowRollup, cfg.AllowAtomicPublish,
				cfg.MaxMsgsPerSubject, cfg.DenyDelete)
		}
	}
	again, err := clusterinit.Init(ctx(t), nc, clusterinit.Options{Shards: 8, Partitions: 2, Require: coordinator.Require{Shards: true}})
	if err != nil {
		t.Fatal(err)
	}
	if again.Changed() || again.Cluster != res.Cluster || len(again.Steps) != 7 { // control, record, 2 data buckets, blobs, effects, audit
		t.Errorf("second init: changed %v, %+v, steps %+v", again.Changed(), again.Cluster, again.Steps)
	}
	// Another shape, asked for: refused, naming it; not asked for: the cluster as it is.
	var se *coordinator.ShapeError
	if _, err := clusterinit.Init(ctx(t), nc, clusterinit.Options{Shards: 16, Require: coordinator.Require{Shards: true}}); !errors.As(err, &se) {
		t.Errorf("init with another shard count: %v, want a ShapeError", err)
	}
	if r, err := clusterinit.Init(ctx(t), nc, clusterinit.Options{Shards: 16}); err != nil || r.Cluster.Shards != 8 {
		t.Errorf("init not requiring the shard count: %+v %v", r.Cluster, err)
	}
}

// TestInitHardensAnOlderCluster: a cluster made before Init (data buckets allowing roll-ups, a
// control bucket with delete markers, which takes roll-ups; no effects or audit stream) gets what
// is missing, and its live data buckets and its control bucket refuse roll-ups; the records stay.
func TestInitHardensAnOlderCluster(t *testing.T) {
	nc, js := connect(t)
	name := store.DataBucket(1, 0)
	// What an older node made: a KV bucket (roll-ups allowed) and the record.
	kv, err := js.CreateKeyValue(ctx(t), jetstream.KeyValueConfig{Bucket: name})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx(t), "inst.0.d1", []byte("state")); err != nil {
		t.Fatal(err)
	}
	ctl, err := js.CreateKeyValue(ctx(t), jetstream.KeyValueConfig{Bucket: store.ControlBucket, LimitMarkerTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ctl.Create(ctx(t), store.ClusterKey, []byte(`{"shards":8,"partitions":1,"epoch":1}`)); err != nil {
		t.Fatal(err)
	}
	res, err := clusterinit.Init(ctx(t), nc, clusterinit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]string{}
	for _, s := range res.Steps {
		states[s.Name] = s.State
	}
	for name, want := range map[string]string{store.ControlBucket: natskv.StepUpdated, store.ClusterKey: natskv.StepExists, name: natskv.StepUpdated,
		natscmd.EffectsStream: natskv.StepCreated, auth.AuditStream: natskv.StepCreated, store.BlobBucket: natskv.StepCreated} {
		if states[name] != want {
			t.Errorf("%s: %q, want %q (%+v)", name, states[name], want, res.Steps)
		}
	}
	if res.Cluster.Shards != 8 {
		t.Errorf("cluster %+v: want the recorded 8 shards", res.Cluster)
	}
	s, _ := js.Stream(ctx(t), "KV_"+name)
	if s.CachedInfo().Config.AllowRollup {
		t.Error("the live data bucket still allows roll-ups")
	}
	if e, err := kv.Get(ctx(t), "inst.0.d1"); err != nil || string(e.Value()) != "state" {
		t.Errorf("the record after init: %v", err)
	}
	if err := kv.Purge(ctx(t), "inst.0.d1"); err == nil {
		t.Error("a KV purge of a record was taken")
	}
	cs, _ := js.Stream(ctx(t), "KV_"+store.ControlBucket)
	if cfg := cs.CachedInfo().Config; cfg.AllowRollup || cfg.SubjectDeleteMarkerTTL != 0 || !cfg.AllowMsgTTL {
		t.Errorf("the control bucket: roll-ups %v, markers %v, TTLs %v; want no roll-ups, no markers, TTLs", cfg.AllowRollup, cfg.SubjectDeleteMarkerTTL, cfg.AllowMsgTTL)
	}
	if err := ctl.Purge(ctx(t), store.ClusterKey); err == nil {
		t.Error("a KV purge of the cluster record was taken")
	}
	if e, err := ctl.Get(ctx(t), store.ClusterKey); err != nil || len(e.Value()) == 0 {
		t.Errorf("the cluster record after init: %v", err)
	}
}

// TestInitRefusesWhatTickfenceWouldNotMake: a stream of tickfence's name on other subjects, and a
// control bucket whose cluster record is gone while another epoch's data buckets exist (a restore
// happened: making epoch 1 again would serve what it replaced), are errors that change nothing.
func TestInitRefusesWhatTickfenceWouldNotMake(t *testing.T) {
	t.Run("foreign stream", func(t *testing.T) {
		nc, js := connect(t)
		if _, err := js.CreateStream(ctx(t), jetstream.StreamConfig{Name: natscmd.EffectsStream, Subjects: []string{"other.>"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := clusterinit.Init(ctx(t), nc, clusterinit.Options{Shards: 8}); err == nil || !strings.Contains(err.Error(), "not made by tickfence") {
			t.Errorf("init beside a foreign effects stream: %v", err)
		}
	})
	t.Run("lost record", func(t *testing.T) {
		nc, js := connect(t)
		if _, err := js.CreateKeyValue(ctx(t), jetstream.KeyValueConfig{Bucket: store.DataBucket(3, 0)}); err != nil {
			t.Fatal(err)
		}
		_, err := clusterinit.Init(ctx(t), nc, clusterinit.Options{Shards: 8})
		if err == nil || !strings.Contains(err.Error(), store.DataBucket(3, 0)) {
			t.Fatalf("init with epoch 3's bucket and no record: %v", err)
		}
		if _, err := js.Stream(ctx(t), "KV_"+store.DataBucket(1, 0)); !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Errorf("epoch 1's bucket after the refusal: %v, want none", err)
		}
	})
}
