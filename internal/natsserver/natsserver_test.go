package natsserver_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickfence/tickfence/internal/natsserver"
)

// readmeConfig is the plain nats-server config the README gives operators who run their own NATS:
// the fenced block after the marker line.
func readmeConfig(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	const marker = "<!-- nats-server.conf: checked by internal/natsserver's TestReadmeConfig -->"
	_, rest, ok := strings.Cut(string(b), marker)
	if !ok {
		t.Fatalf("README.md lacks the marker %q before the nats-server config", marker)
	}
	_, rest, ok = strings.Cut(rest, "```")
	if ok {
		_, rest, ok = strings.Cut(rest, "\n") // the fence's language tag
	}
	conf, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("README.md: no fenced block after the nats-server config marker")
	}
	return conf
}

func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return ports
}

// replaceOnce replaces old, which must occur exactly n times, so that the README cannot drift from
// what this test checks without failing it.
func replaceOnce(t *testing.T, s, old, new string, n int) string {
	t.Helper()
	if c := strings.Count(s, old); c != n {
		t.Fatalf("the README's nats-server config has %q %d times, want %d:\n%s", old, c, n, s)
	}
	return strings.ReplaceAll(s, old, new)
}

// TestReadmeConfig loads the README's nats-server config for three servers (ports and paths
// replaced by this machine's), checks that it sets what tickd server sets — cluster name, routes,
// JetStream with its store directory, sync always, a 1 MiB max payload — and then runs the three
// servers from those options until they form a JetStream cluster that places an R3 bucket.
func TestReadmeConfig(t *testing.T) {
	conf := readmeConfig(t)
	dir := t.TempDir()
	clientPorts, routePorts := freePorts(t, 3), freePorts(t, 3)
	var srvs []*server.Server
	t.Cleanup(func() {
		for _, s := range srvs {
			s.Shutdown()
			s.WaitForShutdown()
		}
	})
	for i := range 3 {
		c := replaceOnce(t, conf, "server_name: nats-1", fmt.Sprintf("server_name: nats-%d", i+1), 1)
		c = replaceOnce(t, c, "listen: 0.0.0.0:4222", fmt.Sprintf("listen: 127.0.0.1:%d", clientPorts[i]), 1)
		c = replaceOnce(t, c, "listen: 0.0.0.0:6222", fmt.Sprintf("listen: 127.0.0.1:%d", routePorts[i]), 1)
		c = replaceOnce(t, c, "store_dir: /var/lib/nats", "store_dir: "+filepath.Join(dir, fmt.Sprint(i)), 1)
		for k := range 3 {
			c = replaceOnce(t, c, fmt.Sprintf("nats-route://nats-%d:6222", k+1), fmt.Sprintf("nats-route://127.0.0.1:%d", routePorts[k]), 1)
		}
		file := filepath.Join(dir, fmt.Sprintf("nats-%d.conf", i+1))
		if err := os.WriteFile(file, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
		opts, err := server.ProcessConfigFile(file)
		if err != nil {
			t.Fatalf("the README's nats-server config: %v\n%s", err, c)
		}
		// What tickd server sets (natsserver.Options) for the same server.
		want, err := natsserver.Options(natsserver.Config{Name: fmt.Sprintf("nats-%d", i+1), DataDir: filepath.Join(dir, fmt.Sprint(i)),
			Sync: true, Listen: fmt.Sprintf("127.0.0.1:%d", clientPorts[i]), Cluster: fmt.Sprintf("127.0.0.1:%d", routePorts[i]),
			Routes: []string{"nats-route://127.0.0.1:1", "nats-route://127.0.0.1:2", "nats-route://127.0.0.1:3"}})
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case opts.ServerName != want.ServerName:
			t.Errorf("server_name %q, want %q", opts.ServerName, want.ServerName)
		case !opts.JetStream || opts.StoreDir != want.StoreDir:
			t.Errorf("jetstream %v, store_dir %q; want on, %q", opts.JetStream, opts.StoreDir, want.StoreDir)
		case !opts.SyncAlways:
			t.Error("sync_interval is not always: the durable profile fsyncs every write")
		case opts.MaxPayload != want.MaxPayload:
			t.Errorf("max_payload %d, want %d (as the embedded server)", opts.MaxPayload, want.MaxPayload)
		case opts.Cluster.Name != want.Cluster.Name || opts.Cluster.Port != want.Cluster.Port:
			t.Errorf("cluster %q on port %d, want %q on %d", opts.Cluster.Name, opts.Cluster.Port, want.Cluster.Name, want.Cluster.Port)
		case len(opts.Routes) != 3 || opts.Routes[i].Host != fmt.Sprintf("127.0.0.1:%d", routePorts[i]):
			t.Errorf("routes %v, want the three servers' (its own among them)", opts.Routes)
		case opts.Port != clientPorts[i]:
			t.Errorf("client port %d, want %d", opts.Port, clientPorts[i])
		}
		if t.Failed() {
			t.FailNow()
		}
		opts.NoSigs = true
		s, err := server.NewServer(opts)
		if err != nil {
			t.Fatal(err)
		}
		srvs = append(srvs, s)
		go s.Start()
	}
	var urls []string
	for i, s := range srvs {
		if !s.ReadyForConnections(30 * time.Second) { // three servers starting on a loaded machine
			t.Fatalf("server %d not ready in 30s", i)
		}
		urls = append(urls, s.ClientURL())
	}
	nc, err := nats.Connect(strings.Join(urls, ","))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// The cluster has formed once it places an R3 bucket (retried while it elects its meta leader).
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		actx, acancel := context.WithTimeout(ctx, 2*time.Second) // a request sent before the meta leader is never answered
		kv, err := js.CreateKeyValue(actx, jetstream.KeyValueConfig{Bucket: "readme-r3", Replicas: 3})
		acancel()
		if err == nil {
			st, err := kv.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if info := st.(*jetstream.KeyValueBucketStatus).StreamInfo(); info.Config.Replicas != 3 || info.Cluster.Name != "tickfence" {
				t.Fatalf("R3 bucket on the README's cluster: replicas %d, cluster %q", info.Config.Replicas, info.Cluster.Name)
			}
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the README's three servers did not form a JetStream cluster that places an R3 bucket: %v (last: %v)", ctx.Err(), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestClusterConfig checks tickd server's cluster settings: a clustered server must be named, routes
// must be route URLs, and StartCluster forms a cluster whose servers know their route URLs.
func TestClusterConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  natsserver.Config
		want string
	}{
		{natsserver.Config{Cluster: "127.0.0.1:0"}, "needs a name of its own"},
		{natsserver.Config{Name: "a", Cluster: "127.0.0.1:0", Routes: []string{"127.0.0.1:6222"}}, "want nats-route://HOST:PORT"},
		{natsserver.Config{Name: "a", Cluster: "127.0.0.1:0", Routes: []string{"http://h:1"}}, "want nats-route://HOST:PORT"},
		{natsserver.Config{Name: "a", Cluster: "nope"}, "cluster listen address"},
		{natsserver.Config{Name: "a", Routes: []string{"nats://h:1"}}, "need a cluster listen address"},
	} {
		if _, err := natsserver.Options(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Options(%+v): %v, want an error saying %q", tc.cfg, err, tc.want)
		}
	}
	opts, err := natsserver.Options(natsserver.Config{Name: "a", Cluster: "127.0.0.1:6222", Routes: []string{"nats://h1:6222", "nats-route://h2:6222"}})
	if err != nil || opts.Cluster.Name != natsserver.DefaultClusterName || len(opts.Routes) != 2 || opts.ServerName != "a" {
		t.Fatalf("Options: %+v, %v", opts, err)
	}
	srvs, err := natsserver.StartCluster(3, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, s := range srvs {
			s.Stop()
		}
	}()
	for _, s := range srvs {
		if !strings.HasPrefix(s.RouteURL(), "nats-route://127.0.0.1:") || s.ClusterName() != natsserver.DefaultClusterName {
			t.Errorf("%s: route URL %q, cluster %q", s.Name(), s.RouteURL(), s.ClusterName())
		}
	}
}
