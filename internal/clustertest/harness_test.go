package clustertest_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickfence/tickfence/coordinator"
	"github.com/tickfence/tickfence/internal/history"
	"github.com/tickfence/tickfence/internal/linear"
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
	tickd = filepath.Join(dir, "tickd")
	// Built once, without -race, so a server and three nodes fit on two cores.
	if out, err := exec.Command("go", "build", "-o", tickd, "github.com/tickfence/tickfence/cmd/tickd").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build tickd: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

const lease = 2 * time.Second

// proc is one tickd process with its JSON log lines.
type proc struct {
	t       *testing.T
	name    string
	cmd     *exec.Cmd
	mu      sync.Mutex
	lines   []map[string]any
	exited  chan struct{}
	metrics string
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func start(t *testing.T, name string, args ...string) *proc {
	return startEnv(t, name, nil, args...)
}

func startEnv(t *testing.T, name string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, cmd: exec.Command(tickd, args...), exited: make(chan struct{})}
	p.cmd.Env = append(append(os.Environ(), "TICKFENCE_FAULT_HOOKS=1"), env...)
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.exited)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) != nil {
				m = map[string]any{"msg": sc.Text()}
			}
			p.mu.Lock()
			p.lines = append(p.lines, m)
			p.mu.Unlock()
		}
		_ = p.cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			p.dump(40)
		}
	})
	return p
}

func (p *proc) dump(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	lines := p.lines
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	for _, l := range lines {
		b, _ := json.Marshal(l)
		p.t.Logf("%s: %s", p.name, b)
	}
}

// waitLog waits for a log line matching pred (searching from line `from`) and returns its index.
func (p *proc) waitLog(what string, from int, timeout time.Duration, pred func(map[string]any) bool) int {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		p.mu.Lock()
		for i := from; i < len(p.lines); i++ {
			if pred(p.lines[i]) {
				p.mu.Unlock()
				return i
			}
		}
		n := len(p.lines)
		p.mu.Unlock()
		select {
		case <-p.exited:
			p.t.Fatalf("%s exited while waiting for %s", p.name, what)
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s: no %s within %v (%d log lines)", p.name, what, timeout, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *proc) lineCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.lines)
}

func msgIs(msg string) func(map[string]any) bool {
	return func(m map[string]any) bool { return m["msg"] == msg }
}

func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %v to %s: %v", sig, p.name, err)
	}
}

// metric reads one sample of the node's Prometheus metrics (0 if absent).
func (p *proc) metric(sample string) float64 {
	p.t.Helper()
	client := http.Client{Timeout: 5 * time.Second} // a frozen process never answers
	resp, err := client.Get(p.metrics)
	if err != nil {
		p.t.Fatalf("%s metrics: %v", p.name, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}

// cluster is a `tickd server` process and the test's own client of it.
type cluster struct {
	t          *testing.T
	url        string
	addr, dir  string
	serverArgs []string
	server     *proc
	st         *natskv.Store
	nc         *nats.Conn
}

// startServer starts (or restarts, on the same address and data) the `tickd server` process.
func (c *cluster) startServer() {
	c.t.Helper()
	c.server = start(c.t, "server", append([]string{"server", "--listen", c.addr, "--data", c.dir}, c.serverArgs...)...)
	c.server.waitLog("server ready", 0, 30*time.Second, func(m map[string]any) bool {
		return strings.Contains(fmt.Sprint(m["msg"]), "server ready")
	})
}

func newCluster(t *testing.T, serverArgs ...string) *cluster {
	t.Helper()
	c := &cluster{t: t, addr: fmt.Sprintf("127.0.0.1:%d", freePort(t)), dir: t.TempDir(), serverArgs: serverArgs}
	c.url = "nats://" + c.addr
	c.startServer()
	var err error
	if c.nc, err = natskv.Connect(c.url); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.nc.Close)
	if c.st, err = natskv.Open(c.nc, natskv.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.st.Close() })
	return c
}

// node starts a tickd node and waits until it has joined.
func (c *cluster) node(name string, extra ...string) *proc {
	c.t.Helper()
	return c.nodeEnv(name, nil, extra...)
}

// nodeEnv is node with extra environment variables.
func (c *cluster) nodeEnv(name string, env []string, extra ...string) *proc {
	c.t.Helper()
	args := append([]string{"--nats", c.url, "--node-id", name, "--metrics", fmt.Sprintf("127.0.0.1:%d", freePort(c.t)),
		"--log-json", "--lease", lease.String(), "--summary-every", "1s", "--shards", "32",
		"--data-history", "1000000"}, extra...)
	p := startEnv(c.t, name, env, args...)
	i := p.waitLog("metrics address", 0, 30*time.Second, msgIs("metrics"))
	p.mu.Lock()
	p.metrics, _ = p.lines[i]["url"].(string)
	p.mu.Unlock()
	p.waitLog("node joined", 0, 30*time.Second, msgIs("node joined"))
	return p
}

func (c *cluster) state() *coordinator.State {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := coordinator.ReadState(ctx, c.st)
	if err != nil {
		c.t.Fatal(err)
	}
	return s
}

// waitState polls the cluster state until cond holds.
func (c *cluster) waitState(what string, timeout time.Duration, cond func(*coordinator.State) bool) *coordinator.State {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s := c.state()
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			b, _ := json.Marshal(s.Nodes)
			c.t.Fatalf("timed out after %v waiting until %s; nodes %s", timeout, what, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// instancesOf lists the instances in shards owned by a node.
func (c *cluster) instancesOf(s *coordinator.State, node string) map[string]uint32 {
	c.t.Helper()
	out := map[string]uint32{}
	for sh, st := range s.Shards {
		if st.Owner.Owner != node {
			continue
		}
		ids, err := c.st.Instances(context.Background(), s.Cluster.Epoch, uint32(sh))
		if err != nil {
			c.t.Fatal(err)
		}
		for _, id := range ids {
			out[id] = uint32(sh)
		}
	}
	return out
}

func (c *cluster) load(id string, shard uint32) (store.Record, uint64) {
	c.t.Helper()
	r, rev, err := c.st.Load(context.Background(), 1, shard, id)
	if err != nil {
		c.t.Fatalf("load %s: %v", id, err)
	}
	return r, rev
}

// checkHistory verifies every stored record against the fence, message by message.
func (c *cluster) checkHistory() history.Report {
	c.t.Helper()
	return c.checkHistoryOf(store.DataBucket(1, 0))
}

func (c *cluster) checkHistoryOf(bucket string) history.Report {
	c.t.Helper()
	js, err := jetstream.New(c.nc)
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
	cl, err := c.st.Cluster(ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	l := &load{c: c, client: natscmd.NewClient(c.nc, cl.Shards), acked: make([]atomic.Int64, instances), stop: make(chan struct{})}
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
					op.Damage, _ = toInt(res["damage"])
					op.HP, _ = toInt(res["hp"])
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
		op.HP, _ = toInt(r.Result.(map[string]any)["hp"])
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
