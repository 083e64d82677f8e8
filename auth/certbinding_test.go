package auth_test

import (
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/auth"
	"github.com/tickfence/tickfence/internal/natsserver"
)

// TestClientCertificateIsNotBoundToItsUser pins a limit of NATS (2.15), not a wish: where the
// server requires client certificates (tickd server --tls-verify) and JWTs (--auth), it checks the
// certificate against its CA and the JWT against its account, each on its own. Nothing ties one
// to the other: node n1's certificate is accepted with the gateway's JWT. verify_and_map, which
// maps a certificate to a user, applies only to users of the server's configuration, never to a
// JWT's; a user JWT can restrict its source addresses (src) and connection types, not its
// certificate; only an auth callout (a service that authenticates the account's users itself,
// and sees their certificates) could bind them. If this fails, NATS learned to bind them: make
// tickfence use it and say so in the README's Security section.
func TestClientCertificateIsNotBoundToItsUser(t *testing.T) {
	dir := t.TempDir()
	adir := filepath.Join(dir, "auth")
	if _, err := auth.Init(adir); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.InitTLS(adir, nil); err != nil {
		t.Fatal(err)
	}
	cert, key, err := auth.NewClientCert(adir, "n1")
	if err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(adir, auth.TLSCA)
	srv, err := natsserver.Start(natsserver.Config{DataDir: filepath.Join(dir, "nats"), Listen: "127.0.0.1:0", AuthDir: adir,
		TLSCert: filepath.Join(adir, auth.TLSCert), TLSKey: filepath.Join(adir, auth.TLSCertKey), TLSCA: ca, TLSVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	tlsOpts, err := auth.TLSClientOptions(ca, cert, key)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := auth.Connect(srv.ClientURL(), auth.CredsFile(adir, "gateway"), nil, append(tlsOpts, nats.MaxReconnects(0))...)
	if err != nil {
		t.Fatalf("the gateway's JWT with node n1's certificate was refused (%v): NATS binds certificates to JWT users now?", err)
	}
	nc.Close()
}
