package netproxy_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tickfence/tickfence/internal/netproxy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo is a TCP server that sends back what it reads and half-closes on EOF.
type echo struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

func newEcho(t *testing.T) *echo {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echo{ln: ln}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.mu.Lock()
			e.conns = append(e.conns, c)
			e.mu.Unlock()
			e.wg.Add(1)
			go func() {
				defer e.wg.Done()
				_, _ = io.Copy(c, c)
				_ = c.(*net.TCPConn).CloseWrite()
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		e.mu.Lock()
		for _, c := range e.conns {
			c.Close()
		}
		e.mu.Unlock()
		e.wg.Wait()
	})
	return e
}

// accepted is how many connections the echo server has accepted.
func (e *echo) accepted() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.conns)
}

func newProxy(t *testing.T, target string) *netproxy.Proxy {
	t.Helper()
	p, err := netproxy.New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t *testing.T, p *netproxy.Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes msg and reads it back within timeout.
func roundTrip(c net.Conn, msg string, timeout time.Duration) (string, error) {
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	return readN(c, len(msg), timeout)
}

func readN(c net.Conn, n int, timeout time.Duration) (string, error) {
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, n)
	_, err := io.ReadFull(c, buf)
	return string(buf), err
}

func mustEcho(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	got, err := roundTrip(c, msg, 5*time.Second)
	if err != nil || got != msg {
		t.Fatalf("round trip of %q: got %q, %v", msg, got, err)
	}
}

// closedSoon reports whether c is closed by the other side within timeout (a read ends with EOF
// or a reset rather than a deadline).
func closedSoon(c net.Conn, timeout time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	_, err := c.Read(make([]byte, 1))
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

func TestForwardsBothWaysAndHalfClose(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, e.ln.Addr().String())
	if p.Target() != e.ln.Addr().String() {
		t.Fatalf("Target() = %s, want %s", p.Target(), e.ln.Addr())
	}
	c := dial(t, p)
	mustEcho(t, c, "hello")
	// A megabyte both ways, in order, while the echo sends it back.
	big := make([]byte, 1<<20)
	_, _ = rand.Read(big)
	go func() {
		_, _ = c.Write(big)
		_ = c.(*net.TCPConn).CloseWrite() // the echo sees EOF, half-closes back: we read EOF
	}()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, big) {
		t.Fatalf("got %d bytes back, want the %d sent, in order", len(got), len(big))
	}
	waitConns(t, p, 0)
}

func waitConns(t *testing.T, p *netproxy.Proxy, want int) {
	t.Helper()
	for start := time.Now(); p.Conns() != want; {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("proxy has %d connections, want %d", p.Conns(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestGreetings(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, e.ln.Addr().String())
	a, b := dial(t, p), dial(t, p)
	mustEcho(t, a, "CONNECT {\"name\":\"a\"}\r\n")
	mustEcho(t, b, "CONNECT {\"name\":\"b\"}")
	mustEcho(t, b, strings.Repeat("x", 2000)) // only the first KiB is kept
	got := p.Greetings()
	slices.Sort(got)
	want := []string{"CONNECT {\"name\":\"a\"}\r\n", ("CONNECT {\"name\":\"b\"}" + strings.Repeat("x", 2000))[:1024]}
	if !slices.Equal(got, want) {
		t.Fatalf("Greetings() = %q, want %q", got, want)
	}
	a.Close()
	waitConns(t, p, 1)
	if got := p.Greetings(); len(got) != 1 || !strings.HasPrefix(got[0], "CONNECT {\"name\":\"b\"}") {
		t.Fatalf("after a connection closed: Greetings() = %q, want b's only", got)
	}
}

func TestCutAndHeal(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, e.ln.Addr().String())
	c1, c2 := dial(t, p), dial(t, p)
	mustEcho(t, c1, "a")
	mustEcho(t, c2, "b")
	p.Cut()
	for i, c := range []net.Conn{c1, c2} {
		if !closedSoon(c, 2*time.Second) {
			t.Fatalf("connection %d still open after Cut", i)
		}
	}
	// New connections are refused until Heal, and never reach the target.
	before := e.accepted()
	c3 := dial(t, p)
	_, _ = c3.Write([]byte("x"))
	if !closedSoon(c3, 2*time.Second) {
		t.Fatal("a connection made while cut was not closed")
	}
	if got := e.accepted(); got != before {
		t.Fatalf("the target accepted %d connections while cut", got-before)
	}
	waitConns(t, p, 0)
	p.Heal()
	mustEcho(t, dial(t, p), "after heal")
}

func TestDelay(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, e.ln.Addr().String())
	c := dial(t, p)
	mustEcho(t, c, "warm")
	const d = 150 * time.Millisecond
	p.Delay(d)
	start := time.Now()
	mustEcho(t, c, "slow")
	if rt := time.Since(start); rt < 2*d { // delayed on the way there and on the way back
		t.Fatalf("round trip with Delay(%v) took %v, want at least %v", d, rt, 2*d)
	}
	// Chunks are delayed, not serialised: many in flight arrive about d apart from when sent.
	start = time.Now()
	for i := 0; i < 10; i++ {
		_, _ = c.Write([]byte("z"))
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := readN(c, 10, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 2*d+time.Second {
		t.Fatalf("10 chunks 10 ms apart took %v with Delay(%v): delays add up", took, d)
	}
	p.Delay(0)
	start = time.Now()
	mustEcho(t, c, "fast")
	if rt := time.Since(start); rt >= d {
		t.Fatalf("round trip after Delay(0) took %v", rt)
	}
}

func TestHoldRelease(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, e.ln.Addr().String())
	c := dial(t, p)
	mustEcho(t, c, "before")
	p.Hold()
	p.Hold() // idempotent
	if _, err := c.Write([]byte("held-1 ")); err != nil {
		t.Fatal(err)
	}
	// A connection made during the hold is accepted but reaches the target only on Release.
	before := e.accepted()
	c2 := dial(t, p)
	if _, err := c2.Write([]byte("held-2")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("more")); err != nil {
		t.Fatal(err)
	}
	if got, err := readN(c, 1, 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read %q (%v) through a held proxy", got, err)
	}
	if got := e.accepted(); got != before {
		t.Fatalf("the target accepted %d connections during the hold", got-before)
	}
	if p.Conns() != 2 {
		t.Fatalf("held proxy has %d connections, want 2 (held, not closed)", p.Conns())
	}
	p.Release()
	if got, err := readN(c, len("held-1 more"), 5*time.Second); err != nil || got != "held-1 more" {
		t.Fatalf("after Release: got %q, %v; want the held bytes in order", got, err)
	}
	if got, err := readN(c2, len("held-2"), 5*time.Second); err != nil || got != "held-2" {
		t.Fatalf("connection made during the hold: got %q, %v", got, err)
	}
	p.Release() // no hold: nothing happens
	mustEcho(t, c, "after")
}

func TestCutDropsHeldBytes(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, e.ln.Addr().String())
	c := dial(t, p)
	mustEcho(t, c, "x")
	p.Hold()
	_, _ = c.Write([]byte("lost"))
	p.Cut()
	if !closedSoon(c, 2*time.Second) {
		t.Fatal("held connection still open after Cut")
	}
	p.Heal()
	c2 := dial(t, p)
	mustEcho(t, c2, "fresh")
}

func TestTargetDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p := newProxy(t, addr)
	if !closedSoon(dial(t, p), 2*time.Second) {
		t.Fatal("a connection to a proxy whose target is down was not closed")
	}
	waitConns(t, p, 0)
}

func TestSource(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p, err := netproxy.Start(ln.Addr().String(), netproxy.Options{Listen: "127.0.0.1:0", Source: "127.0.0.2"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := dial(t, p)
	_, _ = c.Write([]byte("x"))
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if ip := s.RemoteAddr().(*net.TCPAddr).IP.String(); ip != "127.0.0.2" {
		t.Fatalf("the target saw a connection from %s, want 127.0.0.2", ip)
	}
	if _, err := netproxy.Start("x", netproxy.Options{Source: "not-an-ip"}); err == nil {
		t.Fatal("Start accepted a source that is not an IP")
	}
}

func TestCloseEndsEverything(t *testing.T) {
	e := newEcho(t)
	p, err := netproxy.New(e.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, p)
	mustEcho(t, c, "x")
	p.Hold()
	held := dial(t, p) // waiting to dial
	_, _ = held.Write([]byte("y"))
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []net.Conn{c, held} {
		if !closedSoon(c, 2*time.Second) {
			t.Fatal("connection open after Close")
		}
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Fatal("proxy still accepts after Close")
	}
}
