package natsserver

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
)

// A port another process holds: the server cannot listen on it, logs that as fatal and never
// becomes ready. Start says so, naming the listener, instead of waiting out its 30 s for nothing
// (CI failed once that way: "nats server did not become ready within 30s" for the third server of
// a test cluster, whose route port, picked free, was taken before it listened).
func TestStartOnATakenPortSaysSo(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	taken := ln.Addr().String()
	for _, cfg := range []Config{
		{Name: "c", DataDir: t.TempDir(), Listen: "127.0.0.1:0", Cluster: taken, Routes: []string{"nats-route://" + taken}},
		{DataDir: t.TempDir(), Listen: taken},
	} {
		s, err := Start(cfg)
		if err == nil {
			s.Stop()
			t.Fatalf("%+v: started on a taken port", cfg)
		}
		if !strings.Contains(err.Error(), "address already in use") || !strings.Contains(err.Error(), fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)) {
			t.Errorf("%+v: %v, want the listener's error naming the port", cfg, err)
		}
	}
}

// StartCluster picks its route ports free and then starts the servers; a port taken in between
// (another test's listener, a client's ephemeral port) fails only that attempt: it picks again.
func TestStartClusterPicksAgainWhenARoutePortIsTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var mu sync.Mutex
	picks := 0
	pick := func() (string, error) {
		mu.Lock()
		defer mu.Unlock()
		picks++
		if picks == 3 { // the third server's route port of the first attempt
			return ln.Addr().String(), nil
		}
		return freeAddr()
	}
	srvs, err := startCluster(3, t.TempDir(), pick)
	if err != nil {
		t.Fatalf("a taken route port on the first attempt: %v", err)
	}
	for _, s := range srvs {
		s.Stop()
	}
	if picks != 6 {
		t.Errorf("%d ports picked, want 6 (3, then 3 again)", picks)
	}
}
