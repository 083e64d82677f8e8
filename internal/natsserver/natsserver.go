// Package natsserver runs the embedded NATS JetStream server that tickd starts by default and that
// the tests start for real (never a fake).
package natsserver

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/auth"
)

// Config of an embedded server.
type Config struct {
	// DataDir holds JetStream's files; reused on restart.
	DataDir string
	// Listen is HOST:PORT to accept clients on; empty keeps the server in-process only.
	Listen string
	// Sync makes JetStream fsync every write (the durable profile; slower).
	Sync bool
	// Name of the server (defaults to a random one standalone). Required with Cluster: JetStream's
	// peers know each other by name, so it must be unique in the cluster and the same on every
	// restart.
	Name string
	// Cluster is HOST:PORT to accept routes from the other servers of a JetStream cluster on (port
	// 0: a free one); empty: a standalone server.
	Cluster string
	// Routes are the URLs of the cluster's servers, nats-route://HOST:PORT or nats://HOST:PORT;
	// the server's own may be among them (it ignores a route to itself).
	Routes []string
	// ClusterName names the cluster (default DefaultClusterName); every server of it uses the same.
	ClusterName string
	// NoAdvertise keeps the other servers' client URLs from this server's clients (nats-server's
	// cluster no_advertise): a client then reconnects only to the URLs it was given, so a client
	// cut off from them stays cut off (a partition means what it says) and a client behind a proxy
	// or NAT never tries addresses it cannot reach. Lame duck mode then names no other server
	// either: clients move to the others of their own list.
	NoAdvertise bool
	// AuthDir is an auth directory (tickctl auth init): the server enforces its roles, and every
	// client needs one of its credentials (package auth). Empty: no authentication.
	AuthDir string
	// TLSCert and TLSKey make the server speak TLS to clients and, on a cluster, to its routes
	// (both ways: each route presents the certificate and verifies the other's against TLSCA).
	// TLSCA also makes clients present a certificate signed by it when TLSVerify.
	TLSCert, TLSKey, TLSCA string
	TLSVerify              bool
	// Insecure lets a server without AuthDir listen on an address other than loopback.
	Insecure bool
	// WebSocket is HOST:PORT to accept NATS clients over WebSocket on (browsers: the player demo
	// page); empty: none. The same loopback rule as Listen. It speaks TLS (wss) with TLSCert.
	WebSocket string
	// WebSocketOrigins are the web page origins (scheme://host:port) whose scripts may connect
	// over WebSocket; "*" accepts any. Without AuthDir at least one is required: any page a
	// browser on this machine visits could otherwise open the socket and rewrite shards.
	// Clients that send no Origin (not browsers) are always accepted.
	WebSocketOrigins []string
	// LameDuck is how long GracefulStop's lame duck mode takes to close the server's clients, after
	// a grace period of a fifth of it (at most 2 s) in which they are told it is going; 0: 5 s.
	LameDuck time.Duration
	// Logger receives the server's own log (permission violations, refused clients); nil: none.
	Logger server.Logger
}

// DefaultLameDuck is Config.LameDuck's default.
const DefaultLameDuck = 5 * time.Second

// DefaultClusterName is the JetStream cluster's name unless Config.ClusterName says otherwise.
const DefaultClusterName = "tickfence"

// Server is a running embedded server.
type Server struct {
	*server.Server
	cfg      Config
	stopping atomic.Bool // GracefulStop began: not ready for anything any more
}

// Options are the NATS server options of cfg: JetStream with its files in DataDir, fsync on every
// write with Sync, a 1 MiB max payload, and a cluster block with Cluster. A plain nats-server
// config with the same settings is in the README ("Your own NATS servers").
func Options(cfg Config) (*server.Options, error) {
	opts := &server.Options{
		ServerName:         cfg.Name,
		JetStream:          true,
		StoreDir:           cfg.DataDir,
		SyncAlways:         cfg.Sync,
		NoSigs:             true,
		NoLog:              true,
		DontListen:         cfg.Listen == "",
		MaxPayload:         1 << 20,
		JetStreamMaxMemory: 1 << 30,
	}
	ld := cfg.LameDuck
	if ld <= 0 {
		ld = DefaultLameDuck
	}
	opts.LameDuckDuration, opts.LameDuckGracePeriod = ld, min(ld/5, 2*time.Second)
	if cfg.Listen != "" {
		host, port, err := hostPort(cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("nats listen address %q: %w", cfg.Listen, err)
		}
		if cfg.AuthDir == "" && !cfg.Insecure && !Loopback(host) {
			return nil, fmt.Errorf("refusing to listen on %s without authentication: anyone who reaches it could reassign shards, "+
				"overwrite records and delete buckets; give --auth DIR (made by tickctl auth init DIR), listen on 127.0.0.1, "+
				"or --insecure on a network you trust", cfg.Listen)
		}
		opts.Host, opts.Port = host, port
	}
	if cfg.WebSocket != "" {
		if err := webSocketOptions(opts, cfg); err != nil {
			return nil, err
		}
	}
	if cfg.AuthDir != "" {
		if err := auth.ServerOptions(opts, cfg.AuthDir); err != nil {
			return nil, err
		}
	}
	if cfg.TLSCert != "" || cfg.TLSKey != "" {
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: cfg.TLSCert, KeyFile: cfg.TLSKey, CaFile: cfg.TLSCA, Verify: cfg.TLSVerify})
		if err != nil {
			return nil, fmt.Errorf("TLS: %w", err)
		}
		opts.TLSConfig, opts.TLSTimeout, opts.TLSVerify = tc, 5, cfg.TLSVerify
		if cfg.WebSocket != "" {
			opts.Websocket.TLSConfig, opts.Websocket.NoTLS = tc.Clone(), false
		}
	} else if cfg.TLSVerify {
		return nil, errors.New("TLS client verification needs the server's certificate and key")
	}
	if cfg.Cluster == "" {
		if len(cfg.Routes) > 0 || cfg.ClusterName != "" {
			return nil, errors.New("routes and a cluster name need a cluster listen address (HOST:PORT for the routes)")
		}
		return opts, nil
	}
	if cfg.Name == "" {
		return nil, errors.New("a server of a JetStream cluster needs a name of its own, unique in the cluster and the same " +
			"on every restart: JetStream's peers know each other by name")
	}
	host, port, err := hostPort(cfg.Cluster)
	if err != nil {
		return nil, fmt.Errorf("cluster listen address %q: %w", cfg.Cluster, err)
	}
	name := cfg.ClusterName
	if name == "" {
		name = DefaultClusterName
	}
	opts.Cluster = server.ClusterOpts{Name: name, Host: host, Port: port, NoAdvertise: cfg.NoAdvertise}
	if cfg.TLSCert != "" {
		if cfg.TLSCA == "" {
			return nil, errors.New("TLS on a cluster needs the CA (routes verify each other's certificate)")
		}
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: cfg.TLSCert, KeyFile: cfg.TLSKey, CaFile: cfg.TLSCA, Verify: true})
		if err != nil {
			return nil, fmt.Errorf("route TLS: %w", err)
		}
		tc.RootCAs = tc.ClientCAs // a route is a client of its peer too: it verifies the peer against the same CA
		opts.Cluster.TLSConfig, opts.Cluster.TLSTimeout = tc, 5
	}
	for _, r := range cfg.Routes {
		u, err := url.Parse(r)
		if err != nil || (u.Scheme != "nats-route" && u.Scheme != "nats") || u.Hostname() == "" || u.Port() == "" {
			return nil, fmt.Errorf("route %q: want nats-route://HOST:PORT (or nats://HOST:PORT)", r)
		}
		opts.Routes = append(opts.Routes, u)
	}
	return opts, nil
}

// webSocketOptions sets the WebSocket listener of cfg (see Config.WebSocket): plain ws:// unless
// TLS is configured (Options then gives it the clients' TLS config).
func webSocketOptions(opts *server.Options, cfg Config) error {
	host, port, err := hostPort(cfg.WebSocket)
	if err != nil {
		return fmt.Errorf("websocket listen address %q: %w", cfg.WebSocket, err)
	}
	if cfg.AuthDir == "" && !cfg.Insecure && !Loopback(host) {
		return fmt.Errorf("refusing to accept WebSocket clients on %s without authentication: anyone who reaches it could reassign "+
			"shards, overwrite records and delete buckets; give --auth DIR (made by tickctl auth init DIR), listen on 127.0.0.1, "+
			"or --insecure on a network you trust", cfg.WebSocket)
	}
	var origins []string
	anyOrigin := false
	for _, o := range cfg.WebSocketOrigins {
		if o = strings.TrimSpace(o); o == "" {
			continue
		}
		if o == "*" {
			anyOrigin = true
			continue
		}
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" {
			return fmt.Errorf("websocket origin %q: want scheme://host[:port] of the page, e.g. http://127.0.0.1:9464, or *", o)
		}
		origins = append(origins, o)
	}
	if anyOrigin {
		origins = nil
	} else if len(origins) == 0 && cfg.AuthDir == "" && !cfg.Insecure {
		return fmt.Errorf("a WebSocket listener without authentication needs the origins of the pages allowed to use it " +
			"(tickd server --websocket-origin, tickd --nats-websocket-origin: http://HOST:PORT of the demo page, or * for any): otherwise any web page a browser on this " +
			"machine visits could connect to it and rewrite shards and records")
	}
	opts.Websocket = server.WebsocketOpts{Host: host, Port: port, NoTLS: true, AllowedOrigins: origins,
		HandshakeTimeout: 5 * time.Second}
	return nil
}

// Loopback says whether host (an IP or a name) is a loopback address only; "" and 0.0.0.0 are every
// interface.
func Loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// hostPort splits HOST:PORT; port 0 is a free one.
func hostPort(addr string) (string, int, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return "", 0, fmt.Errorf("port %q", port)
	}
	if p == 0 {
		p = server.RANDOM_PORT
	}
	return host, p, nil
}

// Start starts the server and waits until it accepts connections (a clustered server does not
// wait for its peers: see WaitCluster).
func Start(cfg Config) (*Server, error) {
	opts, err := Options(cfg)
	if err != nil {
		return nil, err
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("nats server: %w", err)
	}
	fatal := &fatalLog{next: cfg.Logger, first: make(chan string, 1)}
	s.SetLoggerV2(fatal, false, false, false)
	go s.Start()
	for deadline := time.Now().Add(30 * time.Second); !s.ReadyForConnections(100 * time.Millisecond); {
		select {
		case msg := <-fatal.first:
			s.Shutdown()
			return nil, &StartError{Msg: msg}
		default:
		}
		if time.Now().After(deadline) {
			s.Shutdown()
			return nil, fmt.Errorf("nats server did not become ready within 30s (data dir %s)", cfg.DataDir)
		}
	}
	return &Server{Server: s, cfg: cfg}, nil
}

// StartError is a server that could not start and said why, in Msg (its fatal log line): it could
// not listen (a port in use, an address not on this machine), or JetStream could not start.
type StartError struct{ Msg string }

func (e *StartError) Error() string { return "nats server: " + e.Msg }

// portTaken reports whether err is a server that could not listen on a port another holds.
func portTaken(err error) bool {
	var se *StartError
	return errors.As(err, &se) && strings.Contains(se.Msg, "address already in use")
}

// fatalLog passes the server's log to next (if any) and keeps its first fatal line. The server
// logs a listener it cannot open as fatal, does not exit (it is embedded), and never becomes ready;
// Start returns that line instead of waiting out its timeout. A fatal line goes to next as an
// error: a logger that exits on Fatalf would take the process with it.
type fatalLog struct {
	next  server.Logger
	first chan string
}

func (l *fatalLog) Fatalf(format string, v ...any) {
	select {
	case l.first <- strings.TrimSpace(fmt.Sprintf(format, v...)):
	default:
	}
	if l.next != nil {
		l.next.Errorf(format, v...)
	}
}

func (l *fatalLog) Noticef(format string, v ...any) {
	if l.next != nil {
		l.next.Noticef(format, v...)
	}
}

func (l *fatalLog) Warnf(format string, v ...any) {
	if l.next != nil {
		l.next.Warnf(format, v...)
	}
}

func (l *fatalLog) Errorf(format string, v ...any) {
	if l.next != nil {
		l.next.Errorf(format, v...)
	}
}

func (l *fatalLog) Debugf(format string, v ...any) {
	if l.next != nil {
		l.next.Debugf(format, v...)
	}
}

func (l *fatalLog) Tracef(format string, v ...any) {
	if l.next != nil {
		l.next.Tracef(format, v...)
	}
}

// ConnectOption connects a client in-process, or over TCP when the server listens.
func (s *Server) ConnectOption() nats.Option { return nats.InProcessServer(s.Server) }

// WebSocketURL is the URL browsers connect to over WebSocket, ws:// or wss:// ("" without
// Config.WebSocket).
func (s *Server) WebSocketURL() string {
	if s.cfg.WebSocket == "" {
		return ""
	}
	return s.WebsocketURL()
}

// RouteURL is the URL other servers of its cluster route to ("" standalone).
func (s *Server) RouteURL() string {
	if a := s.ClusterAddr(); a != nil {
		return "nats-route://" + a.String()
	}
	return ""
}

// Stop shuts the server down and waits for it.
func (s *Server) Stop() {
	s.Shutdown()
	s.WaitForShutdown()
}

// StartCluster starts n clustered servers s0 … s<n-1> (routes between them, JetStream on each,
// data under dir) on loopback, and waits until they form a JetStream cluster: a meta leader that
// knows all n servers, so R3 (R5) streams can be placed at once. Tests use it for R3 buckets.
func StartCluster(n int, dir string) ([]*Server, error) {
	return startCluster(n, dir, freeAddr)
}

// startCluster picks the route ports with pick and starts the servers; a port taken between its
// pick and its server's listen (another process's listener, a client's ephemeral port) is picked
// again, a few times, with every server started afresh. A data directory the failed attempt made
// is removed; one that was there before (a cluster started again) is kept.
func startCluster(n int, dir string, pick func() (string, error)) ([]*Server, error) {
	const attempts = 5
	existed := make([]bool, n)
	for j := range n {
		_, err := os.Stat(filepath.Join(dir, fmt.Sprintf("s%d", j)))
		existed[j] = err == nil
	}
	for i := 1; ; i++ {
		srvs, err := startClusterOnce(n, dir, pick)
		if err == nil || !portTaken(err) || i == attempts {
			return srvs, err
		}
		for j := range n {
			if existed[j] {
				continue
			}
			if err := os.RemoveAll(filepath.Join(dir, fmt.Sprintf("s%d", j))); err != nil {
				return nil, err
			}
		}
	}
}

func startClusterOnce(n int, dir string, pick func() (string, error)) ([]*Server, error) {
	routes := make([]string, n)
	for i := range routes {
		addr, err := pick()
		if err != nil {
			return nil, err
		}
		routes[i] = "nats-route://" + addr
	}
	var srvs []*Server
	stopAll := func() {
		for _, s := range srvs {
			s.Stop()
		}
	}
	for i := range n {
		s, err := Start(Config{Name: fmt.Sprintf("s%d", i), DataDir: filepath.Join(dir, fmt.Sprintf("s%d", i)),
			Listen: "127.0.0.1:0", Cluster: strings.TrimPrefix(routes[i], "nats-route://"), Routes: routes})
		if err != nil {
			stopAll()
			return nil, err
		}
		srvs = append(srvs, s)
	}
	if err := WaitCluster(srvs, 30*time.Second); err != nil {
		stopAll()
		return nil, err
	}
	return srvs, nil
}

// freeAddr is a loopback HOST:PORT free when asked (nothing holds it until a server listens on it).
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// WaitCluster waits until one of srvs is the JetStream meta leader and knows every one of them
// as a peer with JetStream.
func WaitCluster(srvs []*Server, within time.Duration) error {
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, s := range srvs {
			if s.JetStreamIsLeader() && len(s.JetStreamClusterPeers()) == len(srvs) {
				return nil
			}
		}
	}
	return fmt.Errorf("no JetStream meta leader with all %d servers as peers within %v", len(srvs), within)
}
