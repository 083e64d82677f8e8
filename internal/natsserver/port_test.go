package natsserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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

// A fatal that is not a taken port (JetStream cannot use its data directory) is reported at once
// too, and startCluster does not take it for a taken port: no retry (from a review).
func TestStartErrorThatIsNotATakenPort(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Start(Config{DataDir: filepath.Join(file, "data")})
	if err == nil {
		s.Stop()
		t.Fatal("started on a data directory under a file")
	}
	var se *StartError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "JetStream") {
		t.Errorf("%T %v, want a StartError saying JetStream could not start", err, err)
	}
	if portTaken(err) {
		t.Errorf("%v taken for a taken port", err)
	}
}

// StartCluster on a directory holding a cluster's data (a restart), with a route port taken on
// the first attempt: the retry keeps the data (a first version removed every server's directory
// before retrying: "stream not found", from a review).
func TestStartClusterRetryKeepsExistingData(t *testing.T) {
	dir := t.TempDir()
	srvs, err := startCluster(3, dir, freeAddr)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect("", nats.InProcessServer(srvs[0].Server))
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "KEEP", Subjects: []string{"keep"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "keep", []byte("v")); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	for _, s := range srvs {
		s.Stop()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	picks := 0
	srvs, err = startCluster(3, dir, func() (string, error) {
		if picks++; picks == 3 {
			return ln.Addr().String(), nil
		}
		return freeAddr()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, s := range srvs {
			s.Stop()
		}
	}()
	if picks != 6 {
		t.Fatalf("%d ports picked, want 6: the taken one was not retried", picks)
	}
	// Every server still has the stream's files. (Not asked of the restarted cluster through the
	// API: on a loaded machine its stream's leader took over a minute to be elected now and then.)
	for i := range 3 {
		if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("s%d", i), "jetstream", "$G", "streams", "KEEP")); err != nil {
			t.Errorf("server s%d lost stream KEEP's files after a retried route port: %v", i, err)
		}
	}
}
