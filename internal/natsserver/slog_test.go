package natsserver

import (
	"bufio"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/auth"
	"github.com/tickfence/tickfence/internal/syncbuf"
)

// TestSlogLogger: the server's own log goes to slog as JSON (tickd server --log-json): a client
// refused for speaking plain text to a TLS listener is an error line of component nats-server,
// and the start-up banner (notices) stays out of an info-level log.
func TestSlogLogger(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca")
	if _, err := auth.InitTLS(ca, nil); err != nil {
		t.Fatal(err)
	}
	var out syncbuf.Buffer
	log := slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelInfo}))
	s, err := Start(Config{DataDir: filepath.Join(dir, "js"), Listen: "127.0.0.1:0", TLSCert: filepath.Join(ca, auth.TLSCert),
		TLSKey: filepath.Join(ca, auth.TLSCertKey), TLSCA: filepath.Join(ca, auth.TLSCA), Logger: SlogLogger(log)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if _, err := nats.Connect(s.ClientURL(), nats.Timeout(2*time.Second)); err == nil {
		t.Fatal("a client without TLS connected")
	}
	var refused map[string]any
	for deadline := time.Now().Add(10 * time.Second); refused == nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no error line about the refused client in:\n%s", out.String())
		}
		sc := bufio.NewScanner(strings.NewReader(out.String()))
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Fatalf("not a JSON line: %q", sc.Text())
			}
			if m["level"] == "DEBUG" {
				t.Fatalf("a debug line in an info-level log: %v", m)
			}
			if msg, _ := m["msg"].(string); m["level"] == "ERROR" && m["component"] == "nats-server" && strings.Contains(msg, "TLS") {
				refused = m
			}
		}
	}
	t.Logf("refused client: %v", refused)
}
