package clusterinit_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tickfence/tickfence/clusterinit"
	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/natskv"
)

// TestInitWhileTheClusterForms (issue 36, item 5): three servers of a new JetStream cluster and
// three inits (the three nodes of a new R3, P=3 cluster, started at the same moment) all start at
// once, before the servers have elected a meta leader. Every init waits for the cluster to form
// instead of failing with "context deadline exceeded", and all three find the same cluster.
func TestInitWhileTheClusterForms(t *testing.T) {
	dir := t.TempDir()
	routes := make([]string, 3)
	for i := range routes {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		routes[i] = "nats-route://" + ln.Addr().String()
		ln.Close()
	}
	srvs := make([]*natsserver.Server, 3)
	var wg sync.WaitGroup
	for i := range srvs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := natsserver.Start(natsserver.Config{Name: fmt.Sprintf("s%d", i), DataDir: filepath.Join(dir, fmt.Sprintf("s%d", i)),
				Listen: "127.0.0.1:0", Cluster: strings.TrimPrefix(routes[i], "nats-route://"), Routes: routes})
			if err != nil {
				t.Error(err)
				return
			}
			srvs[i] = s
		}()
	}
	wg.Wait()
	for _, s := range srvs {
		if s != nil {
			t.Cleanup(s.Stop)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	start := time.Now()
	got := make([]store.Cluster, 3)
	for i, s := range srvs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc, err := natskv.Connect(s.ClientURL())
			if err != nil {
				t.Error(err)
				return
			}
			defer nc.Close()
			c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			res, err := clusterinit.Init(c, nc, clusterinit.Options{Shards: 32, Partitions: 3, Replicas: 3,
				Waiting: func(err error, waited time.Duration) {
					t.Logf("init %d waits (%v so far): %v", i, waited.Round(time.Millisecond), err)
				}})
			if err != nil {
				t.Errorf("init %d, on s%d, after %v: %v", i, i, time.Since(start).Round(time.Millisecond), err)
				return
			}
			got[i] = res.Cluster
		}()
	}
	wg.Wait()
	t.Logf("three inits on a forming cluster done after %v", time.Since(start).Round(time.Millisecond))
	for i := range got {
		if got[i] != got[0] {
			t.Errorf("init %d found %+v, init 0 %+v", i, got[i], got[0])
		}
	}
	if got[0].Replicas != 3 || got[0].Partitions != 3 {
		t.Errorf("cluster %+v, want 3 replicas and 3 partitions", got[0])
	}
}
