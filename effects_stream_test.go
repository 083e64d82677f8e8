package tickfence_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickfence/tickfence"
	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/actor/dungeon"
	"github.com/tickfence/tickfence/auth"
	"github.com/tickfence/tickfence/clusterinit"
	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/internal/syncbuf"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/store/natskv"
)

// startAuthCluster starts three clustered servers enforcing the roles of a new auth directory,
// and returns their client URLs (comma-separated) and the directory.
func startAuthCluster(t *testing.T) (string, string) {
	t.Helper()
	dir := t.TempDir()
	adir := filepath.Join(dir, "auth")
	if _, err := auth.Init(adir); err != nil {
		t.Fatal(err)
	}
	var routes []string
	for range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		routes = append(routes, "nats-route://"+ln.Addr().String())
		ln.Close()
	}
	var srvs []*natsserver.Server
	var urls []string
	for i := range routes {
		s, err := natsserver.Start(natsserver.Config{Name: fmt.Sprintf("s%d", i), DataDir: filepath.Join(dir, fmt.Sprint(i)),
			Listen: "127.0.0.1:0", AuthDir: adir, Cluster: strings.TrimPrefix(routes[i], "nats-route://"), Routes: routes})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Stop)
		srvs = append(srvs, s)
		urls = append(urls, s.ClientURL())
	}
	if err := natsserver.WaitCluster(srvs, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	url := strings.Join(urls, ",")
	// In operator mode an account's JetStream is enabled shortly after the cluster forms: under
	// load, a first API call could still be answered "JetStream not enabled for account" (10039).
	opts, err := auth.ClientOptions(auth.CredsFile(adir, string(auth.Admin)), nil)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := natskv.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := js.AccountInfo(ctx)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("JetStream not available to the admin account 30 s after the cluster formed: %v", err)
		}
	}
	return url, adir
}

// initAs runs cluster init on url as the user of creds ("" none).
func initAs(t *testing.T, url, creds string, o clusterinit.Options) (clusterinit.Result, error) {
	t.Helper()
	var opts []nats.Option
	if creds != "" {
		var err error
		if opts, err = auth.ClientOptions(creds, nil); err != nil {
			t.Fatal(err)
		}
	}
	nc, err := natskv.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return clusterinit.Init(ctx, nc, o)
}

// remakeEffects replaces the effects stream, as admin, by one of cfg (a hand-made stream).
func remakeEffects(t *testing.T, url, creds string, cfg jetstream.StreamConfig) {
	t.Helper()
	opts, err := auth.ClientOptions(creds, nil)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := natskv.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, _ := jetstream.New(nc)
	if err := js.DeleteStream(ctx, natscmd.EffectsStream); err != nil {
		t.Fatal(err)
	}
	cfg.Name = natscmd.EffectsStream
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
}

func effectsStep(res clusterinit.Result) natskv.Step {
	for _, s := range res.Steps {
		if s.Name == natscmd.EffectsStream {
			return s
		}
	}
	return natskv.Step{}
}

// TestNodeRefusesAWronglyShapedEffectsStream: on three servers enforcing the roles, a cluster of 3
// replicas whose effects stream has one replica and JetStream's default 2-minute duplicate window
// (what a consumer started before the first node used to make) is refused by a node on its
// credentials — it may not update a stream — with an error naming the stream, what is wrong and
// the command that fixes it; after an admin's cluster init (which reports the stream updated) the
// node starts. A stream no update repairs (memory storage, other subjects) is refused by both,
// saying to remake it.
func TestNodeRefusesAWronglyShapedEffectsStream(t *testing.T) {
	url, adir := startAuthCluster(t)
	admin, node := auth.CredsFile(adir, string(auth.Admin)), auth.CredsFile(adir, string(auth.Node))
	if _, err := initAs(t, url, admin, clusterinit.Options{Shards: 8, Replicas: 3}); err != nil {
		t.Fatalf("cluster init as admin: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	opts := tickfence.Options{Kinds: []actor.Kind{dungeon.Kind{}}, NodeID: "n1", NATS: url, Creds: node}
	start := func() error {
		n, err := tickfence.Start(ctx, opts)
		if err == nil {
			n.Close()
		}
		return err
	}

	remakeEffects(t, url, admin, jetstream.StreamConfig{Subjects: []string{natscmd.EffectsPrefix + ".>"}})
	err := start()
	if err == nil {
		t.Fatal("a node started on a 1-replica effects stream of a 3-replica cluster")
	}
	for _, w := range []string{natscmd.EffectsStream, "1 replica", "want 3", "duplicate window is 2m0s", "admin.creds cluster init"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the node's refusal: %v; want it to say %q", err, w)
		}
	}
	res, err := initAs(t, url, admin, clusterinit.Options{})
	if err != nil {
		t.Fatalf("cluster init over the wrongly shaped stream: %v", err)
	}
	if s := effectsStep(res); s.State != natskv.StepUpdated {
		t.Errorf("cluster init: effects stream %+v, want updated", s)
	}
	if err := start(); err != nil {
		t.Fatalf("a node after the repair: %v", err)
	}

	remakeEffects(t, url, admin, jetstream.StreamConfig{Subjects: []string{natscmd.EffectsPrefix + ".loot.*"},
		Storage: jetstream.MemoryStorage, Replicas: 3, Duplicates: natscmd.EffectsDuplicates})
	err = start()
	if err == nil {
		t.Fatal("a node started on an effects stream in memory, capturing one kind")
	}
	for _, w := range []string{natscmd.EffectsStream, "captures", "storage is Memory", "nats stream rm"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the node's refusal: %v; want it to say %q", err, w)
		}
	}
	if _, err := initAs(t, url, admin, clusterinit.Options{}); err == nil || !strings.Contains(err.Error(), "nats stream rm") {
		t.Errorf("cluster init over an effects stream in memory: %v; want it refused, saying to remake it", err)
	}
}

// TestSelfShapingNodeRepairsTheEffectsStream: a node that shapes its own storage (here: no
// credentials) repairs an effects stream made by hand with the 2-minute duplicate window, and
// says so at WARN; one in memory it refuses to start on.
func TestSelfShapingNodeRepairsTheEffectsStream(t *testing.T) {
	srv, err := natsserver.Start(natsserver.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	nc, err := natskv.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	js, _ := jetstream.New(nc)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: natscmd.EffectsStream, Subjects: []string{natscmd.EffectsPrefix + ".>"}}); err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	n, err := tickfence.Start(ctx, tickfence.Options{Kinds: []actor.Kind{dungeon.Kind{}}, NodeID: "n1", NATS: srv.ClientURL(), Shards: 8,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatalf("a self-shaping node over a hand-made effects stream: %v", err)
	}
	n.Close()
	s, err := js.Stream(ctx, natscmd.EffectsStream)
	if err != nil {
		t.Fatal(err)
	}
	if d := s.CachedInfo().Config.Duplicates; d != natscmd.EffectsDuplicates {
		t.Errorf("the effects stream's window after the node: %v, want %v", d, natscmd.EffectsDuplicates)
	}
	var warned bool
	for _, line := range strings.Split(logs.String(), "\n") {
		warned = warned || strings.Contains(line, "level=WARN") && strings.Contains(line, natscmd.EffectsStream) && strings.Contains(line, "2m0s → 10m0s")
	}
	if !warned {
		t.Errorf("no WARN of the repair; the node logged:\n%s", logs.String())
	}

	if err := js.DeleteStream(ctx, natscmd.EffectsStream); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: natscmd.EffectsStream, Subjects: []string{natscmd.EffectsPrefix + ".>"},
		Storage: jetstream.MemoryStorage, Duplicates: natscmd.EffectsDuplicates}); err != nil {
		t.Fatal(err)
	}
	n, err = tickfence.Start(ctx, tickfence.Options{Kinds: []actor.Kind{dungeon.Kind{}}, NodeID: "n1", NATS: srv.ClientURL(), Shards: 8})
	if err == nil {
		n.Close()
		t.Fatal("a node started on an effects stream in memory")
	}
	if !strings.Contains(err.Error(), natscmd.EffectsStream) || !strings.Contains(err.Error(), "storage is Memory") {
		t.Errorf("the node's refusal: %v; want the stream and its storage named", err)
	}
}
