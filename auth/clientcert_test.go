package auth_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence"
	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/actor/dungeon"
	"github.com/tickfence/tickfence/auth"
	"github.com/tickfence/tickfence/internal/natsserver"
)

// TestClientCertificates: a server that requires client certificates (tickd server --tls-verify)
// refuses a client that presents none, and one whose certificate another CA signed, each with an
// error that names the certificate; a node presenting a certificate from NewClientCert runs.
func TestClientCertificates(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca")
	if _, err := auth.InitTLS(ca, nil); err != nil {
		t.Fatal(err)
	}
	cert, key, err := auth.NewClientCert(ca, "n1")
	if err != nil {
		t.Fatal(err)
	}
	caf := filepath.Join(ca, auth.TLSCA)
	srv, err := natsserver.Start(natsserver.Config{DataDir: filepath.Join(dir, "js"), Listen: "127.0.0.1:0",
		TLSCert: filepath.Join(ca, auth.TLSCert), TLSKey: filepath.Join(ca, auth.TLSCertKey), TLSCA: caf, TLSVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	url := srv.ClientURL()

	noCert, _ := auth.TLSClientOptions(caf, "", "")
	if nc, err := nats.Connect(url, append(noCert, nats.MaxReconnects(0))...); err == nil {
		nc.Close()
		t.Fatal("a client without a certificate connected")
	} else if err = auth.ExplainTLS(err, false); !strings.Contains(err.Error(), "--tls-cert") {
		t.Errorf("without a client certificate: %v; want an error naming the certificate", err)
	}
	other := filepath.Join(dir, "other")
	if _, err := auth.InitTLS(other, nil); err != nil {
		t.Fatal(err)
	}
	ocert, okey, err := auth.NewClientCert(other, "n1")
	if err != nil {
		t.Fatal(err)
	}
	foreign, _ := auth.TLSClientOptions(caf, ocert, okey)
	if nc, err := nats.Connect(url, append(foreign, nats.MaxReconnects(0))...); err == nil {
		nc.Close()
		t.Fatal("a client certificate of another CA connected")
	} else if err = auth.ExplainTLS(err, true); !strings.Contains(err.Error(), "refused this client's certificate") && !strings.Contains(err.Error(), "unknown certificate authority") {
		t.Errorf("with another CA's client certificate: %v; want an error naming the certificate", err)
	}
	if _, err := auth.TLSClientOptions(caf, cert, ""); err == nil {
		t.Error("a certificate without its key accepted")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := tickfence.Options{Kinds: []actor.Kind{dungeon.Kind{}}, NodeID: "n1", NATS: url, TLSCA: caf, Shards: 8}
	if n, err := tickfence.Start(ctx, opts); err == nil {
		n.Close()
		t.Fatal("a node without a client certificate started")
	} else if !strings.Contains(err.Error(), "--tls-cert") {
		t.Errorf("a node without a client certificate: %v; want it to say the server requires one", err)
	}
	opts.TLSCert, opts.TLSKey = cert, key
	n, err := tickfence.Start(ctx, opts)
	if err != nil {
		t.Fatalf("a node with its client certificate: %v", err)
	}
	n.Close()
}
