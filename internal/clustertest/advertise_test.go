package clustertest_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/internal/proc"
)

// TestServersAdvertiseNoClientURLs (issue 36, item 5): the harness's `tickd server`s run with
// --no-advertise, so a client learns no server's own client URL: a node reconnects only through
// its proxies, and a partition made with them is one (before, nodes reconnected around it and
// the R3 tests had to restart them: r3.reproxy).
func TestServersAdvertiseNoClientURLs(t *testing.T) {
	srv, err := proc.StartServers(context.Background(), proc.ServersConfig{
		ClusterConfig: proc.ClusterConfig{Bin: tickd, DataDir: t.TempDir(), Lease: lease, Shards: 8}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	nc, err := nats.Connect("nats://" + srv.Member(1).ClientAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	time.Sleep(time.Second) // the servers' INFO updates, if any, arrive by then
	if d := nc.DiscoveredServers(); len(d) > 0 {
		t.Fatalf("a client of s1 learnt other servers' client URLs %v: nodes can reconnect around their proxies", d)
	}
}
