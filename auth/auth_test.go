package auth_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/auth"
)

// TestInitFiles: one credentials file per role, mode 0600, each naming its user and role; a second
// Init into the same directory is refused; a loose mode is warned about.
func TestInitFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "auth")
	if _, err := auth.Init(dir); err != nil {
		t.Fatal(err)
	}
	for _, r := range auth.Roles {
		f := auth.CredsFile(dir, string(r))
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v", f, fi.Mode().Perm())
		}
		u, err := auth.ReadCreds(f)
		if err != nil || u.Name != string(r) || u.Role != r {
			t.Errorf("%s: %+v %v", f, u, err)
		}
		if w := auth.LooseMode(f); w != "" {
			t.Errorf("%s: %s", f, w)
		}
	}
	if _, err := auth.Init(dir); err == nil {
		t.Error("a second Init over existing credentials")
	}
	f := auth.CredsFile(dir, "gateway")
	if err := os.Chmod(f, 0o644); err != nil {
		t.Fatal(err)
	}
	var warned string
	if _, err := auth.ClientOptions(f, func(w string) { warned = w }); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(warned, "mode -rw-r--r--") || !strings.Contains(warned, "chmod 600") {
		t.Errorf("loose mode warning: %q", warned)
	}
	if _, err := auth.NewUser(dir, auth.Gateway, "a.b"); err == nil {
		t.Error("a user name with a dot (two subject tokens) accepted")
	}
}

// TestServerConfForNatsServer: server.conf is a plain nats-server configuration: a server started
// from it with server.ProcessConfigFile (and JetStream) accepts the gateway's credentials with its
// inbox prefix, and refuses a client without.
func TestServerConfForNatsServer(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "auth")
	if _, err := auth.Init(dir); err != nil {
		t.Fatal(err)
	}
	// The resolver's directory, ./jwt, is relative to the server's working directory.
	t.Chdir(t.TempDir())
	main := filepath.Join(dir, "nats.conf") // include is relative to the including file
	conf := "listen: 127.0.0.1:-1\njetstream: { store_dir: " + `"` + filepath.Join(t.TempDir(), "js") + `"` + " }\ninclude " + auth.ServerConf + "\n"
	if err := os.WriteFile(main, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(main)
	if err != nil {
		t.Fatal(err)
	}
	opts.NoLog, opts.NoSigs = true, true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	defer s.Shutdown()
	if !s.ReadyForConnections(10e9) {
		t.Fatal("not ready")
	}
	copts, err := auth.ClientOptions(auth.CredsFile(dir, "gateway"), nil)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(s.ClientURL(), copts...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.SubscribeSync(auth.InboxPrefix("gateway") + ".x"); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if nc, err := nats.Connect(s.ClientURL()); err == nil {
		nc.Close()
		t.Fatal("a client without credentials connected")
	}
}
