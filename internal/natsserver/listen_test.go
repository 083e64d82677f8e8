package natsserver

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/tickfence/tickfence/auth"
)

// TestNonLoopbackNeedsAuth: a listen address other than loopback without an auth directory is
// refused, saying why, unless Insecure; loopback, Insecure and AuthDir are accepted.
func TestNonLoopbackNeedsAuth(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:4222", ":4222", "10.1.2.3:4222", "[::]:4222"} {
		_, err := Options(Config{Listen: addr})
		if err == nil || !strings.Contains(err.Error(), "without authentication") || !strings.Contains(err.Error(), "--insecure") {
			t.Errorf("listen %s without auth: %v", addr, err)
		}
		if _, err := Options(Config{Listen: addr, Insecure: true}); err != nil {
			t.Errorf("listen %s --insecure: %v", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:4222", "localhost:4222", "[::1]:4222"} {
		if _, err := Options(Config{Listen: addr}); err != nil {
			t.Errorf("listen %s: %v", addr, err)
		}
	}
	dir := filepath.Join(t.TempDir(), "auth")
	if _, err := auth.Init(dir); err != nil {
		t.Fatal(err)
	}
	o, err := Options(Config{Listen: "0.0.0.0:4222", AuthDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if len(o.TrustedOperators) != 1 || o.SystemAccount == "" || o.AccountResolver == nil {
		t.Fatalf("auth options not set: %+v", o)
	}
	if _, err := Options(Config{Listen: "127.0.0.1:4222", AuthDir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "tickctl auth init") {
		t.Errorf("an empty auth directory: %v", err)
	}
}
