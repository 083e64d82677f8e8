package proc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickfence/tickfence/internal/netproxy"
	"github.com/tickfence/tickfence/store/natskv"
)

// ServersConfig describes a JetStream cluster of `tickd server` processes and the nodes that share
// it. DataDir holds one directory per server; ServerArgs go to every server and NodeArgs to every
// node, after the --replicas and --partitions of the new cluster.
type ServersConfig struct {
	ClusterConfig
	Servers    int // 3 by default
	Replicas   int // of every bucket: 3 by default
	Partitions int // data buckets per epoch: 1 by default
}

// routeIP is the loopback address the route proxies listen on and dial from. A NATS server tells
// its peers to connect to a new peer at the IP its route came from (gossip); the servers listen on
// 127.0.0.1 only, so a gossiped 127.0.0.2 address leads nowhere instead of around the proxies.
const routeIP = "127.0.0.2"

// Servers is a Cluster of several `tickd server` processes. Every route between two servers and
// every connection of a node to a server goes through a netproxy.Proxy, so that a test can cut a
// server off from the others or a node off from every server. The test's own client (NC, Store)
// connects to server 0 directly, so faults aimed at the other servers leave it working.
type Servers struct {
	*Cluster
	cfg     ServersConfig
	JS      jetstream.JetStream
	members []*Member

	mu    sync.Mutex
	links map[string][]*netproxy.Proxy // node ID → its proxy to each server
}

// Member is one server of the cluster.
type Member struct {
	Index      int
	Name       string // its --server-name: how JetStream's cluster info names it
	ClientAddr string // 127.0.0.1:port, for clients that connect directly
	RouteAddr  string // 127.0.0.1:port it accepts routes on (through the proxies)
	args       []string
	// routes[j] carries its routes to server j (nil at its own index): it dials j there, and a
	// cut of routes[j] and of j's routes[i] separates the two.
	routes []*netproxy.Proxy

	mu   sync.Mutex
	proc *Proc
}

// Proc is the member's current process (RestartServer replaces it).
func (m *Member) Proc() *Proc {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.proc
}

// StartServers starts cfg.Servers clustered `tickd server` processes with proxied routes, waits
// until JetStream can place a stream on all of them and connects the test's client to server 0.
func StartServers(ctx context.Context, cfg ServersConfig) (*Servers, error) {
	if cfg.Servers == 0 {
		cfg.Servers = 3
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 3
	}
	if cfg.Partitions == 0 {
		cfg.Partitions = 1
	}
	if cfg.Lease == 0 {
		cfg.Lease = 2 * time.Second
	}
	if cfg.Shards == 0 {
		cfg.Shards = 32
	}
	if cfg.History == 0 {
		cfg.History = 1
	}
	cfg.NodeArgs = append([]string{"--replicas", fmt.Sprint(cfg.Replicas), "--partitions", fmt.Sprint(cfg.Partitions)}, cfg.NodeArgs...)
	s := &Servers{cfg: cfg, links: map[string][]*netproxy.Proxy{}}
	s.Cluster = &Cluster{cfg: cfg.ClusterConfig, nodes: map[string]*Proc{}, nodeNATS: s.nodeNATS}
	if err := s.start(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Servers) start(ctx context.Context) error {
	n := s.cfg.Servers
	taken := map[int]bool{}
	for i := 0; i < n; i++ {
		m := &Member{Index: i, Name: fmt.Sprintf("s%d", i), routes: make([]*netproxy.Proxy, n)}
		for _, addr := range []*string{&m.ClientAddr, &m.RouteAddr} {
			port, err := freePort()
			if err != nil {
				return err
			}
			taken[port] = true
			*addr = fmt.Sprintf("127.0.0.1:%d", port)
		}
		s.members = append(s.members, m)
	}
	var urls []string
	for _, m := range s.members {
		urls = append(urls, "nats://"+m.ClientAddr)
		var routes []string
		for j, peer := range s.members {
			if j == m.Index {
				continue
			}
			p, err := routeProxy(peer.RouteAddr, taken)
			if err != nil {
				return err
			}
			m.routes[j] = p
			s.onClose(func() { p.Close() })
			routes = append(routes, "nats-route://"+p.Addr())
		}
		// --no-advertise: a node learns no server's own client URL, so it reconnects only through its
		// proxies and a partition made with them is one (DirectNodes stays empty).
		m.args = append([]string{"server", "--listen", m.ClientAddr, "--data", filepath.Join(s.cfg.DataDir, m.Name),
			"--cluster", m.RouteAddr, "--routes", strings.Join(routes, ","), "--server-name", m.Name,
			"--cluster-name", "tickfence", "--no-advertise"}, s.cfg.ServerArgs...)
	}
	s.URL = strings.Join(urls, ",")
	for _, m := range s.members {
		if err := s.startMember(ctx, m); err != nil {
			return err
		}
	}
	var err error
	// Server 0 only, even after a reconnect: the faults aim at the others.
	if s.NC, err = natskv.Connect(urls[0], nats.Name("tickfence proc store"), nats.IgnoreDiscoveredServers()); err != nil {
		return err
	}
	if s.Store, err = natskv.Open(s.NC, natskv.Options{History: s.cfg.History, Replicas: s.cfg.Replicas}); err != nil {
		return err
	}
	if s.JS, err = jetstream.New(s.NC); err != nil {
		return err
	}
	return s.waitPlacement(ctx)
}

// routeProxy starts a proxy to a server's route port on routeIP, on a port no server uses (a
// gossiped routeIP:port must never meet a listener).
func routeProxy(target string, taken map[int]bool) (*netproxy.Proxy, error) {
	for {
		p, err := netproxy.Start(target, netproxy.Options{Listen: routeIP + ":0", Source: routeIP})
		if err != nil {
			return nil, fmt.Errorf("route proxy on %s (a second loopback address; Linux has all of 127/8): %w", routeIP, err)
		}
		port := int(netip.MustParseAddrPort(p.Addr()).Port())
		if !taken[port] {
			taken[port] = true
			return p, nil
		}
		p.Close()
	}
}

// startMember starts a member's process and waits until it accepts clients.
func (s *Servers) startMember(ctx context.Context, m *Member) error {
	p, err := Start(s.cfg.Bin, m.Name, nil, m.args...)
	if err != nil {
		return err
	}
	p.server = true
	m.mu.Lock()
	m.proc = p
	m.mu.Unlock()
	s.Cluster.mu.Lock()
	s.Cluster.all = append(s.Cluster.all, p)
	s.Cluster.mu.Unlock()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, _, err := p.WaitLog(wctx, 0, func(l map[string]any) bool {
		return strings.Contains(fmt.Sprint(l["msg"]), "server ready")
	}); err != nil {
		return fmt.Errorf("tickd server %s: %w", m.Name, err)
	}
	return nil
}

// waitPlacement waits until the meta leader can place a stream of cfg.Replicas (the cluster has
// formed), with a throwaway stream.
func (s *Servers) waitPlacement(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	const probe = "PROC_PLACEMENT_PROBE"
	var errs []string // distinct, for the report
	for {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := s.JS.CreateStream(cctx, jetstream.StreamConfig{Name: probe, Subjects: []string{"proc.placement.probe"},
			Replicas: s.cfg.Replicas, Storage: jetstream.MemoryStorage})
		if err == nil {
			err = s.JS.DeleteStream(cctx, probe)
		}
		ccancel()
		if err == nil {
			return nil
		}
		if !slices.Contains(errs, err.Error()) {
			errs = append(errs, err.Error())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no R%d stream placed on the %d servers: %w (%s)", s.cfg.Replicas, len(s.members), ErrNotReady, strings.Join(errs, "; "))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// onClose has Close run f after the processes are killed.
func (c *Cluster) onClose(f func()) {
	c.mu.Lock()
	c.closers = append(c.closers, f)
	c.mu.Unlock()
}

// Members are the servers, by index.
func (s *Servers) Members() []*Member { return s.members }

// Member is server i.
func (s *Servers) Member(i int) *Member { return s.members[i] }

// nodeNATS is a node's --nats: its own proxies, one in front of each server (made on its first start).
func (s *Servers) nodeNATS(id string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ps := s.links[id]
	if ps == nil {
		for _, m := range s.members {
			p, err := netproxy.New(m.ClientAddr)
			if err != nil {
				return "", err
			}
			ps = append(ps, p)
			s.onClose(func() { p.Close() })
		}
		s.links[id] = ps
	}
	var urls []string
	for _, p := range ps {
		urls = append(urls, "nats://"+p.Addr())
	}
	return strings.Join(urls, ","), nil
}

// NodeLinks are node id's proxies to each server, by server index (nil before its first start).
func (s *Servers) NodeLinks(id string) []*netproxy.Proxy {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.links[id])
}

// HoldNode partitions a node from every server: its connections stay open and carry nothing (as
// when a network loses every packet), so its client neither notices at once nor reconnects
// elsewhere. HealNode delivers what was held, in order.
func (s *Servers) HoldNode(id string) {
	for _, p := range s.NodeLinks(id) {
		p.Hold()
	}
}

// CutNode closes every connection of a node to the servers and refuses new ones until HealNode.
// A NATS client reconnects to the server URLs it learnt from the servers (not the proxies) unless
// the servers keep them to themselves, as the harness's do (--no-advertise): Bypasses shows it.
func (s *Servers) CutNode(id string) {
	for _, p := range s.NodeLinks(id) {
		p.Cut()
	}
}

// HealNode ends a node's partition.
func (s *Servers) HealNode(id string) {
	for _, p := range s.NodeLinks(id) {
		p.Heal()
	}
}

// routeLinks are the proxies of every route to or from server i.
func (s *Servers) routeLinks(i int) []*netproxy.Proxy {
	var out []*netproxy.Proxy
	for j, m := range s.members {
		if j != i {
			out = append(out, s.members[i].routes[j], m.routes[i])
		}
	}
	return out
}

// CutServer partitions server i from the others: every route to or from it is closed and refused
// until HealServer. Its clients stay connected to it.
func (s *Servers) CutServer(i int) {
	for _, p := range s.routeLinks(i) {
		p.Cut()
	}
}

// HoldServer partitions server i from the others by holding its routes' bytes (HealServer
// delivers them).
func (s *Servers) HoldServer(i int) {
	for _, p := range s.routeLinks(i) {
		p.Hold()
	}
}

// HealServer ends server i's partition.
func (s *Servers) HealServer(i int) {
	for _, p := range s.routeLinks(i) {
		p.Heal()
	}
}

// KillServer kills server i (SIGKILL) and waits until it has exited.
func (s *Servers) KillServer(i int) {
	s.members[i].Proc().Kill()
}

// StopServer freezes server i (SIGSTOP) and waits until it is stopped.
func (s *Servers) StopServer(ctx context.Context, i int) error {
	p := s.members[i].Proc()
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	return p.WaitStopped(ctx)
}

// ContServer resumes a frozen server i (SIGCONT).
func (s *Servers) ContServer(i int) error {
	return s.members[i].Proc().Signal(syscall.SIGCONT)
}

// RestartServer kills server i if it still runs and starts it again on the same addresses and
// data directory.
func (s *Servers) RestartServer(ctx context.Context, i int) error {
	m := s.members[i]
	m.Proc().Kill()
	return s.startMember(ctx, m)
}

// StopServerGracefully sends server i SIGTERM (tickd server's graceful stop: leaderships moved
// off, then lame duck mode) and waits until it has exited, within ctx.
func (s *Servers) StopServerGracefully(ctx context.Context, i int) error {
	p := s.members[i].Proc()
	if err := p.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case <-p.Exited():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s did not exit after SIGTERM: %w", s.members[i].Name, ctx.Err())
	}
}

// WaitReady polls server i's readiness (GET /healthz on its --metrics listener, which ServerArgs
// must give it) until it answers 200, within ctx, and returns how long that took.
func (s *Servers) WaitReady(ctx context.Context, i int) (time.Duration, error) {
	start := time.Now()
	p := s.members[i].Proc()
	var last string
	for {
		if u := p.MetricsURL(); u != "" {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			req, _ := http.NewRequestWithContext(rctx, http.MethodGet, strings.TrimSuffix(u, "/metrics")+"/healthz", nil)
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					cancel()
					return time.Since(start), nil
				}
				last = fmt.Sprintf("%d %s", resp.StatusCode, body)
			} else {
				last = err.Error()
			}
			cancel()
		}
		select {
		case <-ctx.Done():
			return time.Since(start), fmt.Errorf("%s not ready: %w (last: %s)", s.members[i].Name, ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Index is the index of the server JetStream calls name, or -1.
func (s *Servers) Index(name string) int {
	for _, m := range s.members {
		if m.Name == name {
			return m.Index
		}
	}
	return -1
}

// StreamLeader is the index of the server that leads a stream (e.g. KV_tickfence-data-e1-p0), as
// the stream's info says; -1 while it has no leader.
func (s *Servers) StreamLeader(ctx context.Context, stream string) (int, error) {
	info, err := s.streamInfo(ctx, stream)
	if err != nil {
		return -1, err
	}
	if info.Cluster == nil || info.Cluster.Leader == "" {
		return -1, nil
	}
	return s.Index(info.Cluster.Leader), nil
}

// streamNames lists the streams, within the same short deadline as streamInfo: a request the
// JetStream API drops (its meta leader frozen or electing) is never answered, and without one the
// list would wait out the caller's whole deadline instead of being asked again.
func (s *Servers) streamNames(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var names []string
	lister := s.JS.StreamNames(ctx)
	for name := range lister.Name() {
		names = append(names, name)
	}
	if err := lister.Err(); err != nil {
		return nil, fmt.Errorf("stream names: %w", err)
	}
	return names, nil
}

func (s *Servers) streamInfo(ctx context.Context, stream string) (*jetstream.StreamInfo, error) {
	// Short: a stream without a leader does not answer, and callers poll; not too short, as a
	// server on a busy machine may take a while.
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	st, err := s.JS.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", stream, err)
	}
	return st.Info(ctx)
}

// MoveLeader makes server i the leader of a stream (a leader step-down with i preferred) and waits
// until the stream's info says so.
func (s *Servers) MoveLeader(ctx context.Context, stream string, i int) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": s.members[i].Name}})
	for {
		leader, err := s.StreamLeader(ctx, stream)
		if err == nil && leader == i {
			return nil
		}
		if err == nil && leader >= 0 {
			var resp struct {
				Error *struct {
					Description string `json:"description"`
				} `json:"error"`
			}
			// Per attempt: a step-down request the API drops is asked again, not waited on.
			rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
			msg, rerr := s.NC.RequestWithContext(rctx, "$JS.API.STREAM.LEADER.STEPDOWN."+stream, req)
			rcancel()
			if rerr == nil && json.Unmarshal(msg.Data, &resp) == nil && resp.Error != nil {
				rerr = errors.New(resp.Error.Description)
			}
			err = rerr
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("moving the leader of %s to %s: %w (last: %v)", stream, s.members[i].Name, ctx.Err(), err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// WaitStreamsCurrent waits until every stream has a leader and all its replicas are current and
// online (after a fault healed: the cluster is whole again).
func (s *Servers) WaitStreamsCurrent(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var last string
	for {
		lagging, err := s.Lagging(ctx)
		if err == nil && len(lagging) == 0 {
			return nil
		}
		if ctx.Err() == nil { // what the cluster said, not what the deadline cut short
			last = fmt.Sprintf("%v %v", lagging, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("streams not current: %s: %w", last, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Lagging lists the streams without a leader, with a replica that is not current or offline, or
// whose info does not come (with the error); an error if no stream is listed at all.
func (s *Servers) Lagging(ctx context.Context) ([]string, error) {
	names, err := s.streamNames(ctx)
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		// Called on a cluster that has its buckets: no stream listed is an answer from a server
		// that does not know them yet (a meta group still catching up), never "all current".
		return nil, errors.New("no stream listed")
	}
	var lagging []string
	for _, name := range names {
		info, err := s.streamInfo(ctx, name)
		if err != nil {
			lagging = append(lagging, fmt.Sprintf("%s (%v)", name, err))
			continue
		}
		ok := info.Cluster != nil && info.Cluster.Leader != "" && len(info.Cluster.Replicas) == info.Config.Replicas-1
		if ok {
			for _, r := range info.Cluster.Replicas {
				ok = ok && r.Current && !r.Offline
			}
		}
		if !ok {
			lagging = append(lagging, name)
		}
	}
	return lagging, nil
}

// Bypasses lists the connections that go around the proxies: a route between two servers that
// does not pass through a route proxy (RouteBypasses), or a node connected to a server's client
// port directly (DirectNodes). A partition made with the proxies is only real while this is empty.
func (s *Servers) Bypasses() ([]string, error) {
	out, err := s.RouteBypasses()
	if err != nil {
		return nil, err
	}
	direct, err := s.direct()
	if err != nil {
		return nil, err
	}
	for id, srvs := range direct {
		out = append(out, fmt.Sprintf("node %s connected directly to %v", id, srvs))
	}
	slices.Sort(out)
	return out, nil
}

// RouteBypasses lists the routes between two servers that do not pass through a route proxy. The
// route proxies' address keeps the servers' gossip (connect to a new peer at the address its route
// came from) from making any.
func (s *Servers) RouteBypasses() ([]string, error) {
	routes := map[netip.AddrPort]string{}
	for _, m := range s.members {
		routes[netip.MustParseAddrPort(m.RouteAddr)] = m.Name
	}
	var out []string
	for _, m := range s.members {
		p := m.Proc()
		if !p.Alive() {
			continue
		}
		conns, err := p.TCPConns()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.Name, err)
		}
		for _, c := range conns {
			// The proxies dial from routeIP: an accepted route from 127.0.0.1 came directly.
			if peer, ok := routes[c.Remote]; ok {
				out = append(out, fmt.Sprintf("%s dialled %s's route port directly (%v)", m.Name, peer, c))
			}
			if routes[c.Local] == m.Name && c.Remote.Addr() != netip.MustParseAddr(routeIP) {
				out = append(out, fmt.Sprintf("%s accepted a route from %v, not from a proxy", m.Name, c.Remote))
			}
		}
	}
	return out, nil
}

// DirectNodes lists the live nodes with a connection straight to a server's client port, not
// through their proxies: a node's NATS client learns the servers' own client URLs from them and
// may reconnect there after losing its server (not with --no-advertise, which the harness gives
// the servers).
func (s *Servers) DirectNodes() ([]string, error) {
	direct, err := s.direct()
	if err != nil {
		return nil, err
	}
	var out []string
	for id := range direct {
		out = append(out, id)
	}
	slices.Sort(out)
	return out, nil
}

// direct maps each live node with direct connections to the servers they reach.
func (s *Servers) direct() (map[string][]string, error) {
	clients := map[netip.AddrPort]string{}
	for _, m := range s.members {
		clients[netip.MustParseAddrPort(m.ClientAddr)] = m.Name
	}
	s.Cluster.mu.Lock()
	nodes := make(map[string]*Proc, len(s.Cluster.nodes))
	for id, p := range s.Cluster.nodes {
		nodes[id] = p
	}
	s.Cluster.mu.Unlock()
	out := map[string][]string{}
	for id, p := range nodes {
		if !p.Alive() {
			continue
		}
		conns, err := p.TCPConns()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", id, err)
		}
		for _, c := range conns {
			if srv, ok := clients[c.Remote]; ok {
				out[id] = append(out[id], srv)
			}
		}
	}
	return out, nil
}

// ConnServer is the server index a node's connection of one purpose ("store", "commands", "frames",
// "effects") leads to through its proxies, told by the name the node gives it in its CONNECT
// ("tickfence <id> <purpose>"); -1 if none is open.
func (s *Servers) ConnServer(id, purpose string) int {
	want := fmt.Sprintf(`"name":"tickfence %s %s"`, id, purpose)
	for i, p := range s.NodeLinks(id) {
		for _, g := range p.Greetings() {
			if strings.Contains(g, want) {
				return i
			}
		}
	}
	return -1
}

// NodeServers lists, for a node, the servers its connections lead to (through its proxies), by
// index: one entry per connection.
func (s *Servers) NodeServers(id string) ([]int, error) {
	p := s.Node(id)
	if p == nil {
		return nil, fmt.Errorf("no node %s", id)
	}
	links := s.NodeLinks(id)
	conns, err := p.TCPConns()
	if err != nil {
		return nil, err
	}
	var out []int
	for _, c := range conns {
		for i, l := range links {
			if c.Remote == netip.MustParseAddrPort(l.Addr()) {
				out = append(out, i)
			}
		}
	}
	slices.Sort(out)
	return out, nil
}
