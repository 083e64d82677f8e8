package proc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/auth"
	"github.com/tickfence/tickfence/clusterinit"
	"github.com/tickfence/tickfence/coordinator"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/natskv"
)

// ClusterConfig describes a `tickd server` and the nodes that share it.
type ClusterConfig struct {
	Bin     string        // the tickd binary (Build)
	DataDir string        // the server's JetStream files
	Lease   time.Duration // node lease TTL (whole seconds)
	Shards  int           // shard count of the new cluster
	// History is the revisions kept per key in the data buckets (--data-history); fault runs keep
	// every one so that the stored history can be checked.
	History int64
	// NodeArgs are appended to every node's arguments.
	NodeArgs []string
	// FaultHooks sets TICKFENCE_FAULT_HOOKS=1 for the nodes (SIGUSR1 freezes before a write).
	FaultHooks bool
	// ServerArgs are appended to the server's arguments (e.g. --sync).
	ServerArgs []string
	// AuthDir, if set, runs every process on its own role's credentials (DESIGN 9): an auth
	// directory is made there (auth.Init) unless it holds one, the server enforces it (--auth),
	// every node gets a node credential named after its ID, and the cluster's own client
	// (NC, Store: the test's checker, which reads every stream and restores backups) connects
	// as admin. Nodes then make no storage (DESIGN 9): the admin client makes the cluster first,
	// as tickctl cluster init does (Shards, History, and NodeArgs' --partitions and --replicas).
	// ConnectAs and Creds give other roles' connections and files.
	AuthDir string
}

// Cluster is a running server, its nodes and a client of its store.
type Cluster struct {
	cfg    ClusterConfig
	addr   string
	URL    string
	Server *Proc // the current server process (RestartServer replaces it)
	NC     *nats.Conn
	Store  *natskv.Store

	// Set by StartServers: a node's --nats (its own proxies), and what Close ends last.
	nodeNATS func(id string) (string, error)

	mu      sync.Mutex
	nodes   map[string]*Proc // the current process of each node ID
	all     []*Proc          // every process ever started, for Close
	closers []func()
}

// StartCluster starts `tickd server` on a free port and connects to it.
func StartCluster(ctx context.Context, cfg ClusterConfig) (*Cluster, error) {
	if cfg.Lease == 0 {
		cfg.Lease = 2 * time.Second
	}
	if cfg.Shards == 0 {
		cfg.Shards = 32
	}
	if cfg.History == 0 {
		cfg.History = 1
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	c := &Cluster{cfg: cfg, addr: addr, URL: "nats://" + addr, nodes: map[string]*Proc{}}
	if cfg.AuthDir != "" {
		if _, err := os.Stat(filepath.Join(cfg.AuthDir, auth.ServerConf)); err != nil {
			if _, err := auth.Init(cfg.AuthDir); err != nil {
				return nil, err
			}
		}
	}
	if err := c.startServer(ctx); err != nil {
		c.Close()
		return nil, err
	}
	opts := []nats.Option{nats.Name("tickfence proc store")}
	if cfg.AuthDir != "" {
		copts, err := auth.ClientOptions(auth.CredsFile(cfg.AuthDir, string(auth.Admin)), nil)
		if err != nil {
			c.Close()
			return nil, err
		}
		opts = append(opts, copts...)
	}
	if c.NC, err = natskv.Connect(c.URL, opts...); err != nil {
		c.Close()
		return nil, err
	}
	// The same history as the nodes, should this client ever be the one to create a bucket.
	if c.Store, err = natskv.Open(c.NC, natskv.Options{History: cfg.History}); err != nil {
		c.Close()
		return nil, err
	}
	if cfg.AuthDir != "" {
		if err := c.initCluster(ctx); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// initCluster makes the cluster's storage as admin (clusterinit.Init, what tickctl cluster init
// runs): the nodes, on their own credentials, make none. Its shape is the nodes' (Shards, and
// --partitions and --replicas of NodeArgs, if there).
func (c *Cluster) initCluster(ctx context.Context) error {
	o := clusterinit.Options{Shards: uint32(c.cfg.Shards), History: c.cfg.History}
	for _, f := range []struct {
		name string
		v    *uint32
	}{{"--partitions", &o.Partitions}, {"--replicas", &o.Replicas}} {
		for i, a := range c.cfg.NodeArgs {
			if v, ok := strings.CutPrefix(a, f.name+"="); ok {
				_, _ = fmt.Sscan(v, f.v)
			} else if a == f.name && i+1 < len(c.cfg.NodeArgs) {
				_, _ = fmt.Sscan(c.cfg.NodeArgs[i+1], f.v)
			}
		}
	}
	ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := clusterinit.Init(ictx, c.NC, o); err != nil {
		return fmt.Errorf("cluster init as admin: %w", err)
	}
	return nil
}

// startServer starts `tickd server` on the cluster's address and data directory and waits until
// it is ready.
func (c *Cluster) startServer(ctx context.Context) error {
	args := []string{"server", "--listen", c.addr, "--data", c.cfg.DataDir}
	if c.cfg.AuthDir != "" {
		args = append(args, "--auth", c.cfg.AuthDir)
	}
	args = append(args, c.cfg.ServerArgs...)
	p, err := Start(c.cfg.Bin, "server", nil, args...)
	if err != nil {
		return err
	}
	p.server = true
	c.mu.Lock()
	c.Server = p
	c.all = append(c.all, p)
	c.mu.Unlock()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, _, err := p.WaitLog(wctx, 0, func(m map[string]any) bool {
		return strings.Contains(fmt.Sprint(m["msg"]), "server ready")
	}); err != nil {
		return fmt.Errorf("tickd server: %w", err)
	}
	return nil
}

// RestartServer kills the server if it still runs and starts it again on the same address and
// data directory (clients reconnect); not concurrently with readers of Server.
func (c *Cluster) RestartServer(ctx context.Context) error {
	c.Server.Kill()
	return c.startServer(ctx)
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Lease is the nodes' lease TTL.
func (c *Cluster) Lease() time.Duration { return c.cfg.Lease }

// StartNode starts node id (replacing a dead process of the same ID: a new session) without
// waiting for it; WaitJoined waits. args follow NodeArgs (a flag given again wins, e.g.
// --demo 30 over the default --demo 0).
func (c *Cluster) StartNode(id string, args ...string) (*Proc, error) {
	return c.StartNodeEnv(id, nil, args...)
}

// StartNodeEnv is StartNode with extra environment variables for this process.
func (c *Cluster) StartNodeEnv(id string, env []string, args ...string) (*Proc, error) {
	url := c.URL
	if c.nodeNATS != nil {
		var err error
		if url, err = c.nodeNATS(id); err != nil {
			return nil, err
		}
	}
	all := []string{"--nats", url, "--node-id", id, "--metrics", "127.0.0.1:0", "--log-json",
		"--lease", c.cfg.Lease.String(), "--summary-every", "1s", "--shards", fmt.Sprint(c.cfg.Shards),
		"--data-history", fmt.Sprint(c.cfg.History), "--demo", "0"}
	if c.cfg.AuthDir != "" {
		creds, err := c.Creds(auth.Node, id)
		if err != nil {
			return nil, err
		}
		all = append(all, "--creds", creds)
	}
	all = append(append(all, c.cfg.NodeArgs...), args...)
	if c.cfg.FaultHooks {
		env = append([]string{"TICKFENCE_FAULT_HOOKS=1"}, env...)
	}
	p, err := Start(c.cfg.Bin, id, env, all...)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.nodes[id] = p
	c.all = append(c.all, p)
	c.mu.Unlock()
	return p, nil
}

// Creds is the credentials file of user name with role r in the auth directory, made on first
// use; "" without AuthDir.
func (c *Cluster) Creds(r auth.Role, name string) (string, error) {
	if c.cfg.AuthDir == "" {
		return "", nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	file := auth.CredsFile(c.cfg.AuthDir, name)
	if u, err := auth.ReadCreds(file); err == nil {
		if u.Role != r {
			return "", fmt.Errorf("%s is a %s credential, not %s", file, u.Role, r)
		}
		return file, nil
	}
	// A gateway made here is a server-side one (load generators, tests' command senders): trusted
	// to name the player it acts for, like Init's gateway.creds.
	return auth.NewUserWith(c.cfg.AuthDir, r, name, auth.UserOptions{Trusted: r == auth.Gateway})
}

// ConnectAs connects to the server as user name with role r (Creds), with natskv.Connect's
// options and then opts; without AuthDir, unauthenticated.
func (c *Cluster) ConnectAs(r auth.Role, name string, opts ...nats.Option) (*nats.Conn, error) {
	creds, err := c.Creds(r, name)
	if err != nil {
		return nil, err
	}
	if creds != "" {
		copts, err := auth.ClientOptions(creds, nil)
		if err != nil {
			return nil, err
		}
		opts = append(copts, opts...)
	}
	return natskv.Connect(c.URL, append([]nats.Option{nats.Name("tickfence proc " + name)}, opts...)...)
}

// WaitJoined waits until the process has logged its metrics address and joined the cluster.
func WaitJoined(ctx context.Context, p *Proc) error {
	if _, _, err := p.WaitLog(ctx, 0, Msg("metrics")); err != nil {
		return err
	}
	_, _, err := p.WaitLog(ctx, 0, Msg("node joined"))
	return err
}

// Node is the current process of a node ID (nil if never started).
func (c *Cluster) Node(id string) *Proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[id]
}

// Procs is every process started so far (the server's lives and the nodes' lives), in order.
func (c *Cluster) Procs() []*Proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Proc(nil), c.all...)
}

// Close kills every process (resuming stopped ones first) and closes the client.
func (c *Cluster) Close() {
	c.mu.Lock()
	all := append([]*Proc(nil), c.all...)
	c.mu.Unlock()
	for _, server := range []bool{false, true} { // nodes first, the server's lives last
		for i := len(all) - 1; i >= 0; i-- {
			if all[i].server == server {
				all[i].Kill()
			}
		}
	}
	if c.Store != nil {
		c.Store.Close()
	}
	if c.NC != nil {
		c.NC.Close()
	}
	c.mu.Lock()
	closers := c.closers
	c.mu.Unlock()
	for _, f := range closers {
		f()
	}
}

// State reads the cluster state (nodes, leases, shards, moves).
func (c *Cluster) State(ctx context.Context) (*coordinator.State, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return coordinator.ReadState(ctx, c.Store)
}

// WaitState polls the state every 100 ms until cond holds or ctx ends.
func (c *Cluster) WaitState(ctx context.Context, what string, cond func(*coordinator.State) bool) (*coordinator.State, error) {
	for {
		s, err := c.State(ctx)
		if err == nil && cond(s) {
			return s, nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = ctx.Err()
			}
			return s, fmt.Errorf("waiting until %s: %w", what, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// AllOwnedLive reports whether every shard is assigned to a node session that holds a lease and
// no move is under way.
func AllOwnedLive(s *coordinator.State) bool {
	live := map[string]string{}
	for _, n := range s.Nodes {
		live[n.ID] = n.Record.Session
	}
	for _, sh := range s.Shards {
		if sess, ok := live[sh.Owner.Owner]; !ok || sess != sh.Owner.Session || sh.Revision == 0 {
			return false
		}
	}
	for _, m := range s.Moves {
		if m.State != store.MoveDone {
			return false
		}
	}
	return true
}

// InstancesOf lists the instances (ID → shard) of the shards a node owns in a state.
func (c *Cluster) InstancesOf(ctx context.Context, s *coordinator.State, node string) (map[string]uint32, error) {
	out := map[string]uint32{}
	for sh, st := range s.Shards {
		if st.Owner.Owner != node {
			continue
		}
		ids, err := c.Store.Instances(ctx, s.Cluster.Epoch, uint32(sh))
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			out[id] = uint32(sh)
		}
	}
	return out, nil
}

// Load reads an instance record of epoch 1's layout (the cluster's epoch is passed in).
func (c *Cluster) Load(ctx context.Context, epoch uint64, shard uint32, id string) (store.Record, error) {
	r, _, err := c.Store.Load(ctx, epoch, shard, id)
	return r, err
}

// ErrNotReady is returned when the cluster does not settle in time.
var ErrNotReady = errors.New("cluster not ready")
