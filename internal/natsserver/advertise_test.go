package natsserver

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestNoAdvertise (issue 36, item 5): a client of a clustered server learns the other servers'
// client URLs (and may reconnect there, around a proxy or a partition) unless the servers run
// with NoAdvertise (tickd server --no-advertise); then it knows only the URL it was given.
func TestNoAdvertise(t *testing.T) {
	for _, noAdvertise := range []bool{false, true} {
		t.Run(fmt.Sprint("NoAdvertise=", noAdvertise), func(t *testing.T) {
			dir := t.TempDir()
			routes := make([]string, 3)
			for i := range routes {
				addr, err := freeAddr()
				if err != nil {
					t.Fatal(err)
				}
				routes[i] = "nats-route://" + addr
			}
			var srvs []*Server
			for i := range routes {
				s, err := Start(Config{Name: fmt.Sprintf("s%d", i), DataDir: filepath.Join(dir, fmt.Sprintf("s%d", i)), Listen: "127.0.0.1:0",
					Cluster: strings.TrimPrefix(routes[i], "nats-route://"), Routes: routes, NoAdvertise: noAdvertise})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(s.Stop)
				srvs = append(srvs, s)
			}
			if err := WaitCluster(srvs, 30*time.Second); err != nil {
				t.Fatal(err)
			}
			nc, err := nats.Connect(srvs[0].ClientURL())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			var others []string
			for _, s := range srvs[1:] {
				others = append(others, strings.TrimPrefix(s.ClientURL(), "nats://"))
			}
			// The routes' INFO updates reach the client a moment after the cluster forms.
			var found []string
			for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				found = nil
				for _, u := range nc.DiscoveredServers() {
					if slices.Contains(others, strings.TrimPrefix(u, "nats://")) {
						found = append(found, u)
					}
				}
				if !noAdvertise && len(found) == len(others) {
					break
				}
			}
			switch {
			case noAdvertise && len(found) > 0:
				t.Errorf("with NoAdvertise the client learnt %v", found)
			case !noAdvertise && len(found) != len(others):
				t.Errorf("without NoAdvertise the client learnt %v of %v: the test no longer shows what NoAdvertise changes", found, others)
			}
		})
	}
}
