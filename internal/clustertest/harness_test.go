package clustertest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickfence/tickfence/auth"
	"github.com/tickfence/tickfence/coordinator"
	"github.com/tickfence/tickfence/internal/history"
	"github.com/tickfence/tickfence/internal/linear"
	"github.com/tickfence/tickfence/internal/proc"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/natskv"
)

var tickd string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tickfence-clustertest")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Built once, without -race, so a server and three nodes fit on two cores.
	if tickd, err = proc.Build(context.Background(), dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

const lease = 2 * time.Second

// waitLog waits for a log line of p matching match (searching from line from) and returns it.
func waitLog(t *testing.T, p *proc.Proc, what string, from int, timeout time.Duration, match func(map[string]any) bool) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, m, err := p.WaitLog(ctx, from, match)
	if err != nil {
		t.Fatalf("waiting for %s: %v (%d log lines)", what, err, p.LineCount())
	}
	return m
}

func signal(t *testing.T, p *proc.Proc, sig syscall.Signal) {
	t.Helper()
	if err := p.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// metric reads one sample of the node's Prometheus metrics (0 if absent), e.g.
// `tickfence_state_writes_total{result="ok"}`.
func metric(t *testing.T, p *proc.Proc, sample string) float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // a frozen process never answers
	defer cancel()
	m, err := p.Scrape(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return m[sample]
}

// waitStopped waits until the process is in the stopped state.
func waitStopped(t *testing.T, p *proc.Proc) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.WaitStopped(ctx); err != nil {
		t.Fatal(err)
	}
}

// cluster is a `tickd server` process, its nodes and the test's own client of its store.
type cluster struct {
	*proc.Cluster
	t       *testing.T
	authDir string // the roles' credentials
}

func newCluster(t *testing.T, serverArgs ...string) *cluster {
	t.Helper()
	// Every process on its own role's credentials (DESIGN 9, issue 14): the server enforces
	// them, each node has its own node credential, the load is a gateway and the drains an
	// operator's; only the test's checker (history, backup and restore) is admin.
	authDir := t.TempDir()
	pc, err := proc.StartCluster(context.Background(), proc.ClusterConfig{Bin: tickd, DataDir: t.TempDir(),
		Lease: lease, Shards: 32, History: 1_000_000, FaultHooks: true, ServerArgs: serverArgs, AuthDir: authDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pc.Close()
		if t.Failed() {
			for _, p := range pc.Procs() {
				for _, l := range p.Lines(max(p.LineCount()-40, 0)) {
					b, _ := json.Marshal(l)
					t.Logf("%s: %s", p.Name, b)
				}
			}
		}
	})
	// The roles are enforced: without credentials nobody gets in.
	if nc, err := nats.Connect(pc.URL, nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Fatal("the server accepts a client without credentials")
	}
	return &cluster{Cluster: pc, t: t, authDir: authDir}
}

// operator is a store on an operator's connection: the control plane's placement inputs
// (drain, move, pin, weight), as tickctl writes them.
func (c *cluster) operator() *natskv.Store {
	c.t.Helper()
	nc, err := c.ConnectAs(auth.Operator, "operator")
	if err != nil {
		c.t.Fatal(err)
	}
	st, err := natskv.Open(nc, natskv.Options{})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { st.Close(); nc.Close() })
	return st
}

// restartServer starts the `tickd server` process again, on the same address and data.
func (c *cluster) restartServer() {
	c.t.Helper()
	if err := c.RestartServer(context.Background()); err != nil {
		c.t.Fatal(err)
	}
}

// node starts a tickd node and waits until it has joined.
func (c *cluster) node(name string, extra ...string) *proc.Proc {
	c.t.Helper()
	return c.nodeEnv(name, nil, extra...)
}

// nodeEnv is node with extra environment variables.
func (c *cluster) nodeEnv(name string, env []string, extra ...string) *proc.Proc {
	c.t.Helper()
	p, err := c.StartNodeEnv(name, env, extra...)
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := proc.WaitJoined(ctx, p); err != nil {
		c.t.Fatalf("%s did not join: %v", name, err)
	}
	return p
}

func (c *cluster) state() *coordinator.State {
	c.t.Helper()
	s, err := c.State(context.Background())
	if err != nil {
		c.t.Fatal(err)
	}
	return s
}

// waitState polls the cluster state until cond holds.
func (c *cluster) waitState(what string, timeout time.Duration, cond func(*coordinator.State) bool) *coordinator.State {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	s, err := c.WaitState(ctx, what, cond)
	if err != nil {
		var nodes []byte
		if s != nil {
			nodes, _ = json.Marshal(s.Nodes)
		}
		c.t.Fatalf("%v (after %v); nodes %s", err, timeout, nodes)
	}
	return s
}

// instancesOf lists the instances in shards owned by a node.
func (c *cluster) instancesOf(s *coordinator.State, node string) map[string]uint32 {
	c.t.Helper()
	out, err := c.InstancesOf(context.Background(), s, node)
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

// load reads an instance's record in epoch 1.
func (c *cluster) load(id string, shard uint32) store.Record {
	c.t.Helper()
	r, err := c.Load(context.Background(), 1, shard, id)
	if err != nil {
		c.t.Fatalf("load %s: %v", id, err)
	}
	return r
}

// checkHistory verifies every stored record against the fence, message by message.
func (c *cluster) checkHistory() history.Report {
	c.t.Helper()
	return c.checkHistoryOf(store.DataBucket(1, 0))
}

func (c *cluster) checkHistoryOf(bucket string) history.Report {
	c.t.Helper()
	js, err := jetstream.New(c.NC)
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rep, err := history.Check(ctx, js, bucket)
	if err != nil {
		c.t.Fatalf("history: %v", err)
	}
	if err := history.Require(rep); err != nil {
		c.t.Fatal(err)
	}
	c.t.Logf("history: %s", rep)
	return rep
}

// load is a command load on dungeons with a huge boss (HP never runs out): attacks with unique
// request IDs, each retried with its ID until answered; it records what was acknowledged.
type load struct {
	c       *cluster
	client  *natscmd.Client
	ids     []string
	acked   []atomic.Int64
	sent    atomic.Int64
	unknown atomic.Int64
	ops     linear.History
	stop    chan struct{}
	wg      sync.WaitGroup
}

const bossHP = 1_000_000_000

// startLoad creates the instances and starts workers sending attacks.
func (c *cluster) startLoad(prefix string, instances, workers int) *load {
	c.t.Helper()
	ctx := context.Background()
	cl, err := c.Store.Cluster(ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	nc, err := c.ConnectAs(auth.Gateway, "gateway-"+prefix)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(nc.Close)
	l := &load{c: c, client: natscmd.NewClient(nc, cl.Shards), acked: make([]atomic.Int64, instances), stop: make(chan struct{})}
	for i := 0; i < instances; i++ {
		id := fmt.Sprintf("%s-%d", prefix, i)
		l.ids = append(l.ids, id)
		for _, cmd := range []map[string]any{{"type": "create", "kind": "dungeon", "boss_hp": bossHP}, {"type": "join", "player": "p"}} {
			if r, err := l.client.SendMap(ctx, id, fmt.Sprint(cmd["type"]), cmd); err != nil || !r.OK {
				c.t.Fatalf("%s %s: %+v %v", cmd["type"], id, r, err)
			}
		}
	}
	for w := 0; w < workers; w++ {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for n := 0; ; n++ {
				select {
				case <-l.stop:
					return
				default:
				}
				i := (w*7 + n*3) % len(l.ids)
				op := linear.Op{Instance: l.ids[i], Client: w, Call: time.Now()}
				cctx, cancel := context.WithTimeout(ctx, 40*time.Second)
				r, err := l.client.SendMap(cctx, l.ids[i], fmt.Sprintf("w%d-%d", w, n), map[string]any{"type": "attack", "player": "p"})
				cancel()
				l.sent.Add(1)
				switch {
				case err != nil:
					l.unknown.Add(1)
				case r.OK:
					res := r.Result.(map[string]any)
					op.Return, op.OK = time.Now(), true
					op.Damage, _ = proc.Int64(res["damage"])
					op.HP, _ = proc.Int64(res["hp"])
					l.acked[i].Add(op.Damage)
				default:
					op.Return = time.Now()
				}
				l.ops.Add(op)
			}
		}()
	}
	return l
}

// waitSent waits until n more commands were answered (the cluster serves again).
func (l *load) waitSent(n int64, timeout time.Duration) {
	l.c.t.Helper()
	target := l.sent.Load() + n
	deadline := time.Now().Add(timeout)
	for l.sent.Load() < target {
		if time.Now().After(deadline) {
			l.c.t.Fatalf("only %d of %d more commands answered within %v", l.sent.Load()-target+n, n, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// finish stops the load and checks it: every command answered, every acknowledged effect in the
// final state exactly once, every instance's history linearizable, and the stored history fenced.
func (l *load) finish() {
	t := l.c.t
	t.Helper()
	close(l.stop)
	l.wg.Wait()
	if l.unknown.Load() != 0 {
		t.Fatalf("%d of %d commands never answered", l.unknown.Load(), l.sent.Load())
	}
	initial := map[string]int64{}
	for i, id := range l.ids {
		initial[id] = bossHP
		op := linear.Op{Instance: id, Client: 1000, Call: time.Now(), Status: true}
		r, err := l.client.SendMap(context.Background(), id, "final-read", map[string]any{"type": "status"})
		if err != nil || !r.OK {
			t.Fatalf("status of %s: %+v %v", id, r, err)
		}
		op.Return, op.OK = time.Now(), true
		op.HP, _ = proc.Int64(r.Result.(map[string]any)["hp"])
		l.ops.Add(op)
		if off := bossHP - op.HP - l.acked[i].Load(); off != 0 {
			t.Fatalf("%s: hp %d after %d acknowledged damage: off by %d (lost or duplicated effects)", id, op.HP, l.acked[i].Load(), off)
		}
	}
	lin, err := l.ops.Check(initial, 30*time.Second, os.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(lin.Failed) > 0 || len(lin.Unknown) > 0 {
		t.Fatalf("not linearizable: %v (gave up on %v); visualisation: %s", lin.Failed, lin.Unknown, lin.Visualization)
	}
	t.Logf("%d commands, all answered, each acknowledged effect exactly once; %d operations linearizable", l.sent.Load(), lin.Ops)
	l.c.checkHistory()
}
