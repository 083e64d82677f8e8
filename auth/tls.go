package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Files of InitTLS in an auth directory.
const (
	TLSCA      = "ca.pem"         // the dev CA's certificate: clients' --tls-ca
	tlsCAKey   = "ca-key.pem"     // its key (signs more certificates; keep it secret)
	TLSCert    = "server.pem"     // the servers' certificate (clients and routes)
	TLSCertKey = "server-key.pem" // its key
)

// InitTLS writes a self-signed CA and one server certificate signed by it into dir, for a test or
// a dev cluster: valid for localhost, 127.0.0.1, ::1 and hosts (names or IPs), for server and
// client authentication (routes between the servers use it both ways), for a year. Production
// clusters should use their own CA.
func InitTLS(dir string, hosts []string) ([]string, error) {
	if _, err := os.Stat(filepath.Join(dir, tlsCAKey)); err == nil {
		return nil, fmt.Errorf("%s already holds a CA (%s)", dir, tlsCAKey)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "tickfence dev CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(1, 0, 0), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	srv := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "tickfence server"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(1, 0, 0), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:    []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			srv.IPAddresses = append(srv.IPAddresses, ip)
		} else if h != "" {
			srv.DNSNames = append(srv.DNSNames, h)
		}
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srv, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	var written []string
	for _, f := range []struct {
		cert, key string
		der       []byte
		k         *ecdsa.PrivateKey
	}{{TLSCA, tlsCAKey, caDER, caKey}, {TLSCert, TLSCertKey, srvDER, srvKey}} {
		cert, key := filepath.Join(dir, f.cert), filepath.Join(dir, f.key)
		if err := writeCertAndKey(cert, key, f.der, f.k); err != nil {
			return nil, err
		}
		written = append(written, cert, key)
	}
	return written, nil
}

// writeCertAndKey writes a certificate (DER) and its EC key as PEM files, mode 0600.
func writeCertAndKey(cert, key string, der []byte, k *ecdsa.PrivateKey) error {
	kder, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return err
	}
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
}

// NewClientCert writes a client certificate for name (name.pem, name-key.pem, mode 0600) signed by
// the dev CA of InitTLS in dir, for servers that require client certificates (tickd server
// --tls-verify): clients present it with --tls-cert and --tls-key. It returns the two files.
func NewClientCert(dir, name string) (cert, key string, err error) {
	if !validName.MatchString(name) {
		return "", "", fmt.Errorf("certificate name %q: want 1-64 of A-Z a-z 0-9 _ -", name)
	}
	caCert, caKey, err := readCA(dir)
	if err != nil {
		return "", "", err
	}
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: name},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(1, 0, 0), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
	if err != nil {
		return "", "", err
	}
	cert, key = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	if err := writeCertAndKey(cert, key, der, k); err != nil {
		return "", "", err
	}
	return cert, key, nil
}

// readCA reads the dev CA of InitTLS in dir.
func readCA(dir string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	read := func(name, typ string) ([]byte, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("the dev CA (tickctl auth init DIR --tls): %w", err)
		}
		p, _ := pem.Decode(b)
		if p == nil || p.Type != typ {
			return nil, fmt.Errorf("%s: not a PEM %s", name, typ)
		}
		return p.Bytes, nil
	}
	cb, err := read(TLSCA, "CERTIFICATE")
	if err != nil {
		return nil, nil, err
	}
	kb, err := read(tlsCAKey, "EC PRIVATE KEY")
	if err != nil {
		return nil, nil, err
	}
	c, err := x509.ParseCertificate(cb)
	if err != nil {
		return nil, nil, err
	}
	k, err := x509.ParseECPrivateKey(kb)
	if err != nil {
		return nil, nil, err
	}
	return c, k, nil
}

// ExplainTLS adds what to do to a connection error of a TLS client: a server that requires client
// certificates closes the connection right after the handshake (TLS 1.3 sends the refusal
// later), which nats.go reports only as "connection closed by remote after TLS handshake".
// hasCert says whether the client presented one. Other errors are returned as they are.
func ExplainTLS(err error, hasCert bool) error {
	if err == nil {
		return nil
	}
	s := err.Error()
	switch {
	case strings.Contains(s, "tls: certificate required"):
		return fmt.Errorf("%w: give this client a certificate with --tls-cert and --tls-key", err)
	case !strings.Contains(s, "closed by remote after TLS handshake"):
		return err
	case hasCert:
		return fmt.Errorf("%w: the server refused this client's certificate (signed by a CA it does not trust, expired, or not for client authentication?)", err)
	}
	return fmt.Errorf("%w: the server requires a client certificate (tickd server --tls-verify): give one with --tls-cert and --tls-key", err)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

// TLSClientOptions make a client verify the server against the CA in caFile (and present
// certFile/keyFile if given).
func TLSClientOptions(caFile, certFile, keyFile string) ([]nats.Option, error) {
	if caFile == "" {
		return nil, errors.New("a TLS client needs the CA that signed the servers' certificates (--tls-ca)")
	}
	opts := []nats.Option{nats.RootCAs(caFile)}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("a client certificate needs both --tls-cert and --tls-key")
	}
	if certFile != "" {
		opts = append(opts, nats.ClientCert(certFile, keyFile))
	}
	return opts, nil
}
