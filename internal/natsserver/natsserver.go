// Package natsserver runs the embedded NATS JetStream server that tickd starts by default and that
// the tests start for real (never a fake).
package natsserver

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Config of an embedded server.
type Config struct {
	// DataDir holds JetStream's files; reused on restart.
	DataDir string
	// Listen is HOST:PORT to accept clients on; empty keeps the server in-process only.
	Listen string
	// Sync makes JetStream fsync every write (the durable profile; slower).
	Sync bool
	// Name of the server (defaults to a random one).
	Name string
}

// Server is a running embedded server.
type Server struct {
	*server.Server
	cfg Config
}

// Start starts the server and waits until it accepts connections.
func Start(cfg Config) (*Server, error) {
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
	if cfg.Listen != "" {
		host, port, err := net.SplitHostPort(cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("nats listen address %q: %w", cfg.Listen, err)
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			return nil, fmt.Errorf("nats listen port %q: %w", port, err)
		}
		if p == 0 {
			p = server.RANDOM_PORT
		}
		opts.Host, opts.Port = host, p
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("nats server: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("nats server did not become ready within 30s (data dir %s)", cfg.DataDir)
	}
	return &Server{Server: s, cfg: cfg}, nil
}

// ConnectOption connects a client in-process, or over TCP when the server listens.
func (s *Server) ConnectOption() nats.Option { return nats.InProcessServer(s.Server) }

// Stop shuts the server down and waits for it.
func (s *Server) Stop() {
	s.Shutdown()
	s.WaitForShutdown()
}

// StartCluster starts n clustered servers (routes between them, JetStream on each, data under
// dir) on loopback, and waits for a JetStream meta leader. Tests use it for R3 buckets.
func StartCluster(n int, dir string) ([]*Server, error) {
	routePorts := make([]int, n)
	var routes []*url.URL
	for i := range routePorts {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		routePorts[i] = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		u, _ := url.Parse(fmt.Sprintf("nats://127.0.0.1:%d", routePorts[i]))
		routes = append(routes, u)
	}
	var srvs []*Server
	stopAll := func() {
		for _, s := range srvs {
			s.Stop()
		}
	}
	for i := 0; i < n; i++ {
		opts := &server.Options{ServerName: fmt.Sprintf("s%d", i), JetStream: true,
			StoreDir: filepath.Join(dir, fmt.Sprintf("s%d", i)), NoSigs: true, NoLog: true,
			Host: "127.0.0.1", Port: server.RANDOM_PORT, MaxPayload: 1 << 20, JetStreamMaxMemory: 1 << 30,
			Cluster: server.ClusterOpts{Name: "tickfence", Host: "127.0.0.1", Port: routePorts[i]}, Routes: routes}
		s, err := server.NewServer(opts)
		if err != nil {
			stopAll()
			return nil, err
		}
		go s.Start()
		srvs = append(srvs, &Server{Server: s})
	}
	for _, s := range srvs {
		if !s.ReadyForConnections(30 * time.Second) {
			stopAll()
			return nil, fmt.Errorf("clustered server %s not ready", s.Name())
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, s := range srvs {
			if s.JetStreamIsLeader() {
				return srvs, nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	stopAll()
	return nil, fmt.Errorf("no JetStream meta leader within 30s")
}
