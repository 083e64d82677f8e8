package natskv_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/natskv"
)

// streamOf reads a stream's info through a plain JetStream client.
func streamOf(t *testing.T, js jetstream.JetStream, name string) *jetstream.StreamInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	return info
}

// distinctLeaders polls the leaders of epoch's P data streams until they are P distinct servers,
// and fails with what it saw if that does not happen within the deadline.
func distinctLeaders(t *testing.T, js jetstream.JetStream, epoch uint64, partitions uint32) []string {
	t.Helper()
	var leaders []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		leaders = leaders[:0]
		for p := range partitions {
			info := streamOf(t, js, "KV_"+store.DataBucket(epoch, p))
			leaders = append(leaders, info.Cluster.Leader)
		}
		seen := slices.Clone(leaders)
		slices.Sort(seen)
		if !slices.Contains(seen, "") && len(slices.Compact(seen)) == int(partitions) {
			return leaders
		}
		if time.Now().After(deadline) {
			t.Fatalf("epoch %d: the leaders of its %d partitions are %q, want %d distinct servers", epoch, partitions, leaders, partitions)
		}
	}
}

// TestR3BucketsSpreadLeaders: on a cluster of three JetStream servers, a store opened with the
// default options creates a cluster of 3 replicas and 3 partitions: the record says so, every data
// bucket, the control bucket and the blobs have 3 replicas, the data streams allow atomic batch
// publishes, and the partitions' stream leaders are three distinct servers. Another client with
// the default options (tickctl) restores a backup: the new epoch's buckets are R3 and spread too.
func TestR3BucketsSpreadLeaders(t *testing.T) {
	srvs, err := natsserver.StartCluster(3, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, s := range srvs {
			s.Stop()
		}
	}()
	var urls []string
	for _, s := range srvs {
		urls = append(urls, s.ClientURL())
	}
	open := func() *natskv.Store {
		nc, err := natskv.Connect(strings.Join(urls, ","))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		st, err := natskv.Open(nc, natskv.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st := open()
	start := time.Now()
	cl, err := st.Bootstrap(ctx, store.Cluster{Shards: 8, Partitions: 3, Epoch: 1, Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if got, err := open().Cluster(ctx); err != nil || got != cl || cl.Replicas != 3 || cl.Partitions != 3 {
		t.Fatalf("cluster record %+v (%v), Bootstrap said %+v; want 3 replicas, 3 partitions", got, err, cl)
	}
	nc, err := natskv.Connect(strings.Join(urls, ","))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	leaders := distinctLeaders(t, js, 1, 3)
	t.Logf("epoch 1: partition leaders %v (bootstrap %v)", leaders, took.Round(time.Millisecond))
	if _, err := st.Blobs(ctx).PutBlob("x/1-1-1", []byte("large")); err != nil {
		t.Fatal(err)
	}
	check := func(epoch uint64) {
		t.Helper()
		for p := range uint32(3) {
			info := streamOf(t, js, "KV_"+store.DataBucket(epoch, p))
			if info.Config.Replicas != 3 || !info.Config.AllowAtomicPublish || len(info.Cluster.Replicas) != 2 {
				t.Errorf("%s: replicas %d (%d peers besides the leader), atomic publish %v; want 3, 2, true",
					info.Config.Name, info.Config.Replicas, len(info.Cluster.Replicas), info.Config.AllowAtomicPublish)
			}
		}
	}
	check(1)
	for _, name := range []string{"KV_" + store.ControlBucket, "OBJ_" + store.BlobBucket} {
		if info := streamOf(t, js, name); info.Config.Replicas != 3 {
			t.Errorf("%s: %d replicas, want 3", name, info.Config.Replicas)
		}
	}
	ps, err := st.PartitionStreams(ctx, 1, 3)
	if err != nil || len(ps) != 3 || ps[0].Replicas != 3 || ps[0].Leader != leaders[0] || len(ps[0].Peers) != 3 || ps[0].Current < 2 {
		t.Fatalf("PartitionStreams = %+v, %v", ps, err)
	}

	op := open() // an operator's client, default options: it has never been told about replicas
	b, err := store.TakeBackup(ctx, op, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b.Cluster.Replicas != 3 || b.Cluster.Partitions != 3 {
		t.Fatalf("backup of %+v, want its 3 replicas and 3 partitions recorded", b.Cluster)
	}
	if cl, err = op.Restore(ctx, b, natskv.RestoreOptions{}); err != nil || cl.Epoch != 2 || cl.Replicas != 3 {
		t.Fatalf("Restore = %+v, %v", cl, err)
	}
	check(2)
	t.Logf("epoch 2 (restored): partition leaders %v", distinctLeaders(t, js, 2, 3))
}

// TestDataBucketsOnOneServer: on one server, a cluster created without replicas records none
// (read as 1) and makes R1 data buckets that allow atomic batch publishes and keep the history
// asked for, above the KV API's 64 too; a restore makes the next epoch's buckets alike; and a
// backup restores only into a cluster of its shape, replicas included.
func TestDataBucketsOnOneServer(t *testing.T) {
	srv, err := natsserver.Start(natsserver.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	nc, err := natskv.Connect("", srv.ConnectOption())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	st, err := natskv.Open(nc, natskv.Options{History: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := st.Bootstrap(ctx, store.Cluster{Shards: 8, Partitions: 2, Epoch: 1})
	if err != nil || cl.Replicas != 0 || cl.ReplicasOr1() != 1 {
		t.Fatalf("Bootstrap = %+v, %v; want no replicas recorded (1)", cl, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	check := func(epoch uint64) {
		t.Helper()
		for p := range uint32(2) {
			info := streamOf(t, js, "KV_"+store.DataBucket(epoch, p))
			if info.Config.Replicas != 1 || !info.Config.AllowAtomicPublish || info.Config.MaxMsgsPerSubject != 100 {
				t.Errorf("%s: replicas %d, atomic publish %v, history %d; want 1, true, 100", info.Config.Name,
					info.Config.Replicas, info.Config.AllowAtomicPublish, info.Config.MaxMsgsPerSubject)
			}
		}
	}
	check(1)
	b, err := store.TakeBackup(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Restore(ctx, b, natskv.RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	check(2)
	for _, other := range []store.Cluster{
		{Shards: 8, Partitions: 2, Epoch: 1, Replicas: 3},
		{Shards: 8, Partitions: 1, Epoch: 1},
	} {
		b.Cluster = other
		_, err := st.Restore(ctx, b, natskv.RestoreOptions{})
		want := fmt.Sprintf("backup of a cluster with 8 shards/%d partitions/%d replicas; this one has 8/2/1", other.Partitions, other.ReplicasOr1())
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("restore of a backup of %+v: %v, want %q", other, err, want)
		}
	}
}
