package natsserver

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/auth"
)

// TestTLS: with auth.InitTLS's dev CA, a client trusting the CA connects over TLS; a client with
// another CA is refused (the certificate is signed by an unknown authority), and so is one without
// TLS; three servers form a JetStream cluster over TLS routes.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca")
	if _, err := auth.InitTLS(ca, nil); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other")
	if _, err := auth.InitTLS(other, nil); err != nil {
		t.Fatal(err)
	}
	cert, key, caf := filepath.Join(ca, auth.TLSCert), filepath.Join(ca, auth.TLSCertKey), filepath.Join(ca, auth.TLSCA)
	s, err := Start(Config{DataDir: filepath.Join(dir, "js"), Listen: "127.0.0.1:0", TLSCert: cert, TLSKey: key, TLSCA: caf})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	url := s.ClientURL()
	opts, err := auth.TLSClientOptions(caf, "", "")
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("client with the right CA: %v", err)
	}
	if !nc.TLSRequired() {
		t.Error("connection without TLS")
	}
	nc.Close()
	wrong, _ := auth.TLSClientOptions(filepath.Join(other, auth.TLSCA), "", "")
	if _, err := nats.Connect(url, wrong...); err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Errorf("client with another CA: %v, want refused: certificate signed by unknown authority", err)
	}
	if _, err := nats.Connect(url, nats.Timeout(2*time.Second)); err == nil {
		t.Error("a client without TLS connected")
	}

	routes := make([]string, 3)
	for i := range routes {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		routes[i] = "nats-route://" + ln.Addr().String()
		ln.Close()
	}
	var srvs []*Server
	defer func() {
		for _, s := range srvs {
			s.Stop()
		}
	}()
	for i := range routes {
		s, err := Start(Config{Name: fmt.Sprintf("s%d", i), DataDir: filepath.Join(dir, fmt.Sprintf("s%d", i)), Listen: "127.0.0.1:0",
			Cluster: strings.TrimPrefix(routes[i], "nats-route://"), Routes: routes, TLSCert: cert, TLSKey: key, TLSCA: caf})
		if err != nil {
			t.Fatal(err)
		}
		srvs = append(srvs, s)
	}
	if err := WaitCluster(srvs, 30*time.Second); err != nil {
		t.Fatal(err)
	}
}
