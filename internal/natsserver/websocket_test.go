package natsserver_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/auth"
	"github.com/tickfence/tickfence/internal/natsserver"
)

// TestWebSocketOptions: a WebSocket listener follows the loopback rule of Listen, and without
// auth needs the origins of the pages allowed to use it ("*" for any); with auth it needs none.
func TestWebSocketOptions(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:4223", ":4223", "10.1.2.3:4223"} {
		_, err := natsserver.Options(natsserver.Config{WebSocket: addr, WebSocketOrigins: []string{"*"}})
		if err == nil || !strings.Contains(err.Error(), "without authentication") || !strings.Contains(err.Error(), "--insecure") {
			t.Errorf("websocket %s without auth: %v", addr, err)
		}
		if _, err := natsserver.Options(natsserver.Config{WebSocket: addr, Insecure: true}); err != nil {
			t.Errorf("websocket %s --insecure: %v", addr, err)
		}
	}
	if _, err := natsserver.Options(natsserver.Config{WebSocket: "127.0.0.1:4223"}); err == nil || !strings.Contains(err.Error(), "origin") {
		t.Errorf("websocket without auth or origins: %v", err)
	}
	for _, bad := range []string{"127.0.0.1:9464", "ftp://x:1", "http://x:1/demo/"} {
		if _, err := natsserver.Options(natsserver.Config{WebSocket: "127.0.0.1:4223", WebSocketOrigins: []string{bad}}); err == nil {
			t.Errorf("origin %q accepted", bad)
		}
	}
	o, err := natsserver.Options(natsserver.Config{WebSocket: "127.0.0.1:4223", WebSocketOrigins: []string{"http://127.0.0.1:9464", "https://demo.example"}})
	if err != nil {
		t.Fatal(err)
	}
	if o.Websocket.Host != "127.0.0.1" || o.Websocket.Port != 4223 || !o.Websocket.NoTLS || len(o.Websocket.AllowedOrigins) != 2 {
		t.Errorf("websocket options: %+v", o.Websocket)
	}
	if o, err := natsserver.Options(natsserver.Config{WebSocket: "127.0.0.1:4223", WebSocketOrigins: []string{"*"}}); err != nil || len(o.Websocket.AllowedOrigins) != 0 {
		t.Errorf("origin *: %v, %v", err, o.Websocket.AllowedOrigins)
	}
	dir := filepath.Join(t.TempDir(), "auth")
	if _, err := auth.Init(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := natsserver.Options(natsserver.Config{WebSocket: "0.0.0.0:4223", AuthDir: dir}); err != nil {
		t.Errorf("websocket with auth: %v", err)
	}
}

// TestWebSocketRoundTrip: a real server's WebSocket listener carries a request with headers to
// a TCP client and its reply back (what the player page does), and refuses the handshake of a
// page from an origin it was not given.
func TestWebSocketRoundTrip(t *testing.T) {
	srv, err := natsserver.Start(natsserver.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", WebSocket: "127.0.0.1:0",
		WebSocketOrigins: []string{"http://page.example:8080"}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	wsURL := srv.WebSocketURL()
	if !strings.HasPrefix(wsURL, "ws://127.0.0.1:") || strings.HasSuffix(wsURL, ":0") || strings.HasSuffix(wsURL, ":-1") {
		t.Fatalf("WebSocketURL %q", wsURL)
	}
	tcp, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	if _, err := tcp.Subscribe("tickfence.cmd.1.x", func(m *nats.Msg) {
		r := nats.NewMsg(m.Reply)
		r.Header.Set("Content-Type", "application/json")
		r.Data = []byte(`{"ok":true,"result":"` + m.Header.Get("Tickfence-Request-Id") + `"}`)
		_ = m.RespondMsg(r)
	}); err != nil {
		t.Fatal(err)
	}
	if err := tcp.Flush(); err != nil {
		t.Fatal(err)
	}
	ws, err := nats.Connect(wsURL)
	if err != nil {
		t.Fatalf("connect over WebSocket: %v", err)
	}
	defer ws.Close()
	req := nats.NewMsg("tickfence.cmd.1.x")
	req.Header.Set("Tickfence-Request-Id", "web-1")
	req.Data = []byte(`{"type":"attack","player":"zed"}`)
	resp, err := ws.RequestMsg(req, 5*time.Second)
	if err != nil {
		t.Fatalf("request over WebSocket: %v", err)
	}
	if string(resp.Data) != `{"ok":true,"result":"web-1"}` || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("reply %q %v", resp.Data, resp.Header)
	}

	host := strings.TrimPrefix(wsURL, "ws://")
	for origin, want := range map[string]int{"http://page.example:8080": http.StatusSwitchingProtocols, "http://evil.example": http.StatusForbidden} {
		if got := handshake(t, host, origin); got != want {
			t.Errorf("handshake from origin %s: status %d, want %d", origin, got, want)
		}
	}
}

// handshake sends a browser's WebSocket upgrade request with an Origin header and returns the
// status of the answer.
func handshake(t *testing.T, host, origin string) int {
	t.Helper()
	c, err := net.DialTimeout("tcp", host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nOrigin: %s\r\n\r\n", host, origin)
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: "GET", URL: &url.URL{Path: "/"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
