package auth_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/auth"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
)

// The attacks of this file came from a review of issue 33: they forged the sender's identity
// when it was read from the Nats-Request-Info header the server writes for a request that crossed
// accounts. nats-server 2.15.2 removes a client's own copy of that header only where it follows
// CRLF and cuts the header block's last two bytes blindly; nats.go on the node splits header lines
// at a bare LF and stops at the first blank line. So a client could show its own value and hide the
// server's. Identity is now the subject (a player publishes only on its own), and these tests keep
// the attacks refused.

// rewriteConn is an attacker's own client: it sends what nats.go would, but replaces the bytes
// old with new on the way out (turning a header line's CRLF into a bare LF, or hiding the
// header block's end).
type rewriteConn struct {
	net.Conn
	rw [][2][]byte // old, new
}

func (c *rewriteConn) Write(p []byte) (int, error) {
	for _, r := range c.rw {
		if bytes.Contains(p, r[0]) {
			p = bytes.ReplaceAll(bytes.Clone(p), r[0], r[1])
		}
	}
	return c.Conn.Write(p)
}

// rewriteDialer dials TCP, or (ws) the server's WebSocket listener with a hand-made client
// whose frames carry the bytes nats.go writes, after the rewrite (a browser's script can send
// any bytes in its frames just the same).
type rewriteDialer struct {
	rw [][2][]byte
	ws string // host:port of the WebSocket listener; "" for TCP
}

func (d rewriteDialer) Dial(network, address string) (net.Conn, error) {
	if d.ws != "" {
		address = d.ws
	}
	c, err := net.Dial(network, address)
	if err != nil {
		return nil, err
	}
	if d.ws != "" {
		if c, err = wsClient(c, d.ws); err != nil {
			return nil, err
		}
	}
	return &rewriteConn{Conn: c, rw: d.rw}, nil
}

// wsConn speaks NATS over WebSocket frames: each Write is one masked binary frame (mask key 0,
// so the payload is as written), reads are the payloads of the server's frames.
type wsConn struct {
	net.Conn
	r    *bufio.Reader
	left []byte
}

func wsClient(c net.Conn, host string) (net.Conn, error) {
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", host)
	r := bufio.NewReader(c)
	resp, err := http.ReadResponse(r, &http.Request{Method: "GET", URL: &url.URL{Path: "/"}})
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		return nil, fmt.Errorf("websocket handshake: %s", resp.Status)
	}
	return &wsConn{Conn: c, r: r}, nil
}

func (w *wsConn) Write(p []byte) (int, error) {
	h := []byte{0x82} // FIN, binary
	switch n := len(p); {
	case n < 126:
		h = append(h, 0x80|byte(n))
	case n < 1<<16:
		h = append(h, 0x80|126, byte(n>>8), byte(n))
	default:
		h = append(h, 0x80|127)
		h = binary.BigEndian.AppendUint64(h, uint64(n))
	}
	h = append(h, 0, 0, 0, 0) // mask key 0
	if _, err := w.Conn.Write(append(h, p...)); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (w *wsConn) Read(p []byte) (int, error) {
	for len(w.left) == 0 {
		var h [2]byte
		if _, err := io.ReadFull(w.r, h[:]); err != nil {
			return 0, err
		}
		n := uint64(h[1] & 0x7f)
		switch n {
		case 126:
			var b [2]byte
			if _, err := io.ReadFull(w.r, b[:]); err != nil {
				return 0, err
			}
			n = uint64(binary.BigEndian.Uint16(b[:]))
		case 127:
			var b [8]byte
			if _, err := io.ReadFull(w.r, b[:]); err != nil {
				return 0, err
			}
			n = binary.BigEndian.Uint64(b[:])
		}
		payload := make([]byte, n)
		if _, err := io.ReadFull(w.r, payload); err != nil {
			return 0, err
		}
		switch h[0] & 0x0f {
		case 8:
			return 0, io.EOF
		case 0, 1, 2:
			w.left = payload
		}
	}
	n := copy(p, w.left)
	w.left = w.left[n:]
	return n, nil
}

// TestPlayerCannotForgeRequestInfo: an untrusted player (auth.NewUser(dir, auth.Gateway, name),
// in the PLAYERS account) tries to pass its own Nats-Request-Info to the node, over TCP and over
// the WebSocket listener, with the header tricks the review found (a forged line after a bare LF,
// the server's line hidden). Whatever the headers, the node takes it for the player its subject
// names: it cannot act for another player, open a dungeon with a boss a player may not have,
// create past its quota, or end the trusted gateway's d1. Publishing on the trusted senders'
// subjects is refused by the server.
func TestPlayerCannotForgeRequestInfo(t *testing.T) {
	const forged = `{"acc":"forged","user":"forged","name_tag":"forged","tags":["trusted"]}`
	const key = "XXXXXNats-Request-Info"
	bareLF := [2][]byte{[]byte("XXXXXNats-Request-Info:"), []byte("A:x \nNats-Request-Info:")}
	hide := [2][]byte{[]byte("xx\r\n\r\n"), []byte("\r\nC:xy")}
	cases := []struct {
		name       string
		ws         bool
		rewrite    [][2][]byte
		headers    map[string][]string
		onlyID     bool
		forgedInID bool
	}{
		{name: "exact", headers: map[string][]string{"Nats-Request-Info": {forged}}},
		{name: "repeated", headers: map[string][]string{"Nats-Request-Info": {forged, forged, forged}}},
		{name: "lowercase", headers: map[string][]string{"nats-request-info": {forged}}},
		{name: "no_rewrite", headers: map[string][]string{key: {forged}}},
		{name: "bare_lf_trusted_tag", rewrite: [][2][]byte{bareLF}, headers: map[string][]string{key: {forged}}},
		{name: "bare_lf_not_json", rewrite: [][2][]byte{bareLF}, headers: map[string][]string{key: {"x"}}},
		{name: "websocket_bare_lf", ws: true, rewrite: [][2][]byte{bareLF}, headers: map[string][]string{key: {forged}}},
		{name: "hidden_server_info", rewrite: [][2][]byte{hide}, onlyID: true},
		{name: "hidden_after_blank_line", rewrite: [][2][]byte{{[]byte("xx\r\n\r\n"), []byte("\r\n\r\nZZ")}}, onlyID: true},
		{name: "hidden_server_info_and_bare_lf", rewrite: [][2][]byte{{[]byte("QQQQQQQ"), []byte("\nB: c \n")}, hide}, forgedInID: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var e *env
			var wsHost string
			if tc.ws {
				e, wsHost = newEnvWS(t)
			} else {
				e = newEnv(t)
			}
			if _, err := auth.NewUser(e.dir, auth.Gateway, "mallory"); err != nil {
				t.Fatal(err)
			}
			opts, err := auth.ClientOptions(auth.CredsFile(e.dir, "mallory"), nil)
			if err != nil {
				t.Fatal(err)
			}
			opts = append(opts, nats.SetCustomDialer(rewriteDialer{rw: tc.rewrite, ws: wsHost}))
			nc, err := nats.Connect(e.url, opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			msg := func(inst, req string, cmd map[string]any) *nats.Msg {
				m := nats.NewMsg(wire.PlayerSubject(store.ShardOf(inst, shards), inst, "mallory")) // the only subject she may use
				m.Header.Set(wire.HeaderRequestID, req)
				if tc.onlyID {
					m.Header.Set(wire.HeaderRequestID, req+"xx")
				}
				if tc.forgedInID {
					m.Header.Set(wire.HeaderRequestID, req+"QQQQQQQ"+"Nats-Request-Info: "+forged+"xx")
				}
				for k, v := range tc.headers {
					m.Header[k] = v
				}
				m.Data = mustCanonical(t, cmd)
				return m
			}
			send := func(inst, req string, cmd map[string]any) (wire.Reply, bool) {
				t.Helper()
				r, err := nc.RequestMsg(msg(inst, req, cmd), 5*time.Second)
				if err != nil {
					t.Fatalf("%s: %v", req, err)
				}
				rep, err := wire.DecodeReply(r.Data, false)
				if err != nil {
					// A header mangled past reading (a request ID with the forged line in it)
					// is answered bad_request, as JSON or msgpack; either way nothing applied.
					return wire.Reply{}, false
				}
				return rep, true
			}
			if r, ok := send("d1", "m-join", map[string]any{"type": "join", "player": "alice"}); ok && r.OK {
				t.Errorf("mallory (untrusted player) joined d1 as alice: %+v", r)
			}
			created := 0
			for i := range natscmd.DefaultQuota.CreateBurst + 5 {
				if r, ok := send(fmt.Sprintf("big-%d", i), fmt.Sprintf("m-big-%d", i), map[string]any{"type": "create", "kind": "dungeon", "boss_hp": int64(1e12)}); ok && r.OK {
					created++
				}
			}
			if created > 0 {
				t.Errorf("mallory (untrusted player) created %d dungeons with a 1e12 HP boss", created)
			}
			if r, ok := send("d1", "m-end", map[string]any{"type": "end"}); ok && r.OK {
				t.Errorf("mallory (untrusted player) ended the trusted gateway's d1: %+v", r)
			}
			// The trusted senders' subject is not hers: the server refuses the publish.
			m := nats.NewMsg(wire.Subject(e.shard, "d1"))
			m.Header.Set(wire.HeaderRequestID, "m-cmd")
			m.Data = mustCanonical(t, map[string]any{"type": "end"})
			if r, err := nc.RequestMsg(m, time.Second); err == nil {
				t.Errorf("mallory's command on %s was answered: %q", m.Subject, r.Data)
			}
		})
	}
}

// TestPlayerCannotImpersonateAnother: mallory forges alice's own account and user keys (public:
// alice's JWT is no secret) and name into Nats-Request-Info, hiding the server's; the node still
// takes her for mallory, the player her subject names: she neither joins as alice nor ends
// alice's instance.
func TestPlayerCannotImpersonateAnother(t *testing.T) {
	e := newEnv(t)
	alice := e.player(t, "alice")
	if c := code(t, alice, "da", "a-create", map[string]any{"type": "create", "kind": "dungeon", "boss_hp": 500}); c != "ok" {
		t.Fatalf("alice creates da: %s", c)
	}
	b, err := os.ReadFile(auth.CredsFile(e.dir, "alice"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.ParseDecoratedJWT(b)
	if err != nil {
		t.Fatal(err)
	}
	uc, err := jwt.DecodeUserClaims(tok)
	if err != nil {
		t.Fatal(err)
	}
	forged := fmt.Sprintf(`{"acc":%q,"user":%q,"name_tag":"alice","tags":["role:gateway"]}`, uc.Issuer, uc.Subject)
	if _, err := auth.NewUser(e.dir, auth.Gateway, "mallory"); err != nil {
		t.Fatal(err)
	}
	opts, err := auth.ClientOptions(auth.CredsFile(e.dir, "mallory"), nil)
	if err != nil {
		t.Fatal(err)
	}
	opts = append(opts, nats.SetCustomDialer(rewriteDialer{rw: [][2][]byte{
		{[]byte("QQQQQQQ"), []byte("\nB: c \n")},     // the forged line after a bare LF
		{[]byte("xx\r\n\r\n"), []byte("\r\n\r\nZZ")}, // the server's line after the blank line
	}}))
	nc, err := nats.Connect(e.url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	send := func(inst, req string, cmd map[string]any) wire.Reply {
		t.Helper()
		m := nats.NewMsg(wire.PlayerSubject(store.ShardOf(inst, shards), inst, "mallory"))
		m.Header.Set(wire.HeaderRequestID, req+"QQQQQQQ"+"Nats-Request-Info: "+forged+"xx")
		m.Data = mustCanonical(t, cmd)
		r, err := nc.RequestMsg(m, 5*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", req, err)
		}
		rep, _ := wire.DecodeReply(r.Data, false)
		return rep
	}
	if r := send("d1", "m-join-alice", map[string]any{"type": "join", "player": "alice"}); r.OK {
		t.Errorf("mallory joined d1 as alice with alice's forged identity: %+v", r)
	}
	if r := send("da", "m-end", map[string]any{"type": "end"}); r.OK {
		t.Errorf("mallory ended alice's da with alice's forged identity: %+v", r)
	}
}
