// Package netproxy is a TCP proxy for fault tests: put between two processes (a node and its
// server, or two servers' routes), it cuts the link, delays it, or holds its bytes and delivers
// them later — a network partition or a slow link made in the test process, without root,
// network namespaces or a dependency.
package netproxy

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Options of a proxy. The zero value listens on 127.0.0.1:0 and dials from any local address.
type Options struct {
	// Listen is the address to accept connections on.
	Listen string
	// Source is the local IP the proxy dials the target from (e.g. "127.0.0.2"). A server that
	// tells its peers the address a connection came from (NATS routes gossip it) then points them
	// at an address where nothing listens instead of around the proxy.
	Source string
}

// Proxy forwards every connection it accepts to one target address. Its methods may be called
// from any goroutine.
type Proxy struct {
	ln     net.Listener
	target string
	dialer net.Dialer
	wg     sync.WaitGroup // the accept loop and every link

	mu     sync.Mutex
	cut    bool
	delay  time.Duration
	held   chan struct{} // non-nil while held; Release closes it
	links  map[*link]struct{}
	closed bool
}

// New starts a proxy to target on 127.0.0.1:0.
func New(target string) (*Proxy, error) { return Start(target, Options{}) }

// Start starts a proxy to target.
func Start(target string, o Options) (*Proxy, error) {
	if o.Listen == "" {
		o.Listen = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, links: map[*link]struct{}{}}
	if o.Source != "" {
		ip := net.ParseIP(o.Source)
		if ip == nil {
			ln.Close()
			return nil, errors.New("netproxy: source " + o.Source + " is not an IP address")
		}
		p.dialer.LocalAddr = &net.TCPAddr{IP: ip}
	}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address the proxy listens on (HOST:PORT).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Cut closes every connection and refuses new ones (accepted, then closed at once) until Heal.
// Bytes held are dropped.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.cut = true
	links := p.linksLocked()
	p.mu.Unlock()
	for _, l := range links {
		l.kill()
	}
}

// Delay forwards each chunk read from either side d after it was read (0: at once).
func (p *Proxy) Delay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// Hold stops forwarding: connections stay open and what either side sends is kept (in the proxy,
// then in the kernel's buffers), as on a link that loses every packet while TCP retransmits.
// New connections are accepted and connect to the target only on Release.
func (p *Proxy) Hold() {
	p.mu.Lock()
	if p.held == nil {
		p.held = make(chan struct{})
	}
	p.mu.Unlock()
}

// Release ends a Hold: what was kept is delivered, in order.
func (p *Proxy) Release() {
	p.mu.Lock()
	if p.held != nil {
		close(p.held)
		p.held = nil
	}
	p.mu.Unlock()
}

// Heal ends a Cut, a Delay and a Hold.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.cut = false
	p.delay = 0
	p.mu.Unlock()
	p.Release()
}

// Conns is the number of connections the proxy is forwarding (or holding).
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

// Greetings are the first bytes (up to 1 KiB) the client of each open connection sent, in no
// particular order: a test tells connections apart by them (a NATS client's CONNECT line carries
// the name it was given).
func (p *Proxy) Greetings() []string {
	p.mu.Lock()
	links := p.linksLocked()
	p.mu.Unlock()
	out := make([]string, 0, len(links))
	for _, l := range links {
		l.mu.Lock()
		out = append(out, string(l.greeting))
		l.mu.Unlock()
	}
	return out
}

// Close stops accepting, closes every connection and waits for the proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	links := p.linksLocked()
	p.mu.Unlock()
	err := p.ln.Close()
	for _, l := range links {
		l.kill()
	}
	p.wg.Wait()
	return err
}

func (p *Proxy) linksLocked() []*link {
	out := make([]*link, 0, len(p.links))
	for l := range p.links {
		out = append(out, l)
	}
	return out
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		l := newLink(c)
		p.mu.Lock()
		refuse := p.cut || p.closed
		if !refuse {
			p.links[l] = struct{}{}
			p.wg.Add(1)
		}
		p.mu.Unlock()
		if refuse {
			c.Close()
			continue
		}
		go p.serve(l)
	}
}

// serve connects a link to the target and forwards both ways until both sides have closed or
// the link is killed.
func (p *Proxy) serve(l *link) {
	defer p.wg.Done()
	defer func() {
		l.kill()
		p.mu.Lock()
		delete(p.links, l)
		p.mu.Unlock()
	}()
	if !p.waitReleased(l) {
		return
	}
	s, err := p.dialer.DialContext(l.ctx, "tcp", p.target) // a Cut or Close ends the dial
	if err != nil || !l.setServer(s) {
		return
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(l, l.client, s, l.greet) }()
	go func() { defer wg.Done(); p.pipe(l, s, l.client, nil) }()
	wg.Wait()
}

// waitReleased waits while the proxy holds; false if the link was killed meanwhile.
func (p *Proxy) waitReleased(l *link) bool {
	for {
		p.mu.Lock()
		held := p.held
		p.mu.Unlock()
		if held == nil {
			return true
		}
		select {
		case <-held:
		case <-l.done:
			return false
		}
	}
}

func (p *Proxy) currentDelay() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.delay
}

type chunk struct {
	data []byte
	at   time.Time // when it was read
}

// pipe forwards src to dst: a reader goroutine reads ahead into a small queue (so a hold keeps
// reading for a while, then the kernel's buffers fill), and this goroutine writes each chunk once
// its delay has passed and the proxy does not hold. An end of src is passed on as a half-close;
// any other error kills the link. seen, if set, is given every chunk read.
func (p *Proxy) pipe(l *link, src, dst net.Conn, seen func([]byte)) {
	queue := make(chan chunk, 64)
	go func() {
		defer close(queue)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 && seen != nil {
				seen(buf[:n])
			}
			if n > 0 {
				select {
				case queue <- chunk{data: buf[:n], at: time.Now()}:
				case <-l.done:
					return
				}
			}
			if err != nil {
				if !errors.Is(err, io.EOF) {
					l.kill()
				}
				return
			}
		}
	}()
	var timer *time.Timer
	for c := range queue {
		if wait := time.Until(c.at.Add(p.currentDelay())); wait > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			select {
			case <-timer.C:
			case <-l.done:
				drain(queue)
				return
			}
		}
		if !p.waitReleased(l) {
			drain(queue)
			return
		}
		if _, err := dst.Write(c.data); err != nil {
			l.kill()
			drain(queue)
			return
		}
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}

// drain waits for a pipe's reader to stop (the link is killed, so its read fails).
func drain(queue <-chan chunk) {
	for range queue {
	}
}

// link is one proxied connection: the accepted client side and, once dialed, the target side.
type link struct {
	client net.Conn
	ctx    context.Context // ended by kill
	done   <-chan struct{} // ctx.Done()
	cancel context.CancelFunc

	mu       sync.Mutex
	server   net.Conn
	killed   bool
	greeting []byte // the first bytes the client sent
}

// greetingSize is how much of what a client sends first a proxy keeps: enough for a protocol's
// greeting (a NATS client's CONNECT line names the client).
const greetingSize = 1024

// greet keeps the start of what the client sends.
func (l *link) greet(b []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := greetingSize - len(l.greeting); n > 0 {
		l.greeting = append(l.greeting, b[:min(n, len(b))]...)
	}
}

func newLink(client net.Conn) *link {
	ctx, cancel := context.WithCancel(context.Background())
	return &link{client: client, ctx: ctx, done: ctx.Done(), cancel: cancel}
}

// setServer records the dialed side; false (and the connection closed) if the link was killed.
func (l *link) setServer(s net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.killed {
		s.Close()
		return false
	}
	l.server = s
	return true
}

// kill closes both sides at once (idempotent).
func (l *link) kill() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.killed {
		return
	}
	l.killed = true
	l.cancel()
	l.client.Close()
	if l.server != nil {
		l.server.Close()
	}
}
