package clustertest_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tickfence/tickfence/coordinator"
	"github.com/tickfence/tickfence/internal/proc"
	"github.com/tickfence/tickfence/store"
)

var (
	r3Long = flag.Bool("r3.long", false, "TestR3: longer faults and loads, and three partitions instead of one")
	r3Logs = flag.String("r3.logs", "", "TestR3: write every process's whole log into this directory")
)

// r3 is a JetStream cluster of three `tickd server` processes with R3 buckets, and the nodes a test
// starts on it; every route between two servers and every connection of a node goes through a
// proxy. The test's own client is on server 0, so the faults aim at servers 1 and 2.
type r3 struct {
	srv        *proc.Servers
	partitions int
	loads      int // instances per scenario's load
	workers    int
	broken     string // set when a scenario left the cluster in an unknown state
}

func newR3(t *testing.T) *r3 {
	t.Helper()
	r := &r3{partitions: 1, loads: 16, workers: 4}
	if *r3Long {
		r.partitions, r.loads, r.workers = 3, 40, 8
	}
	srv, err := proc.StartServers(context.Background(), proc.ServersConfig{Partitions: r.partitions,
		ClusterConfig: proc.ClusterConfig{Bin: tickd, DataDir: t.TempDir(), Lease: lease, Shards: 32, History: 1_000_000}})
	if err != nil {
		t.Fatal(err)
	}
	r.srv = srv
	t.Cleanup(func() {
		srv.Close()
		if *r3Logs != "" {
			writeLogs(t, *r3Logs, srv.Procs())
		}
		if t.Failed() {
			for _, p := range srv.Procs() {
				for _, l := range p.Lines(max(p.LineCount()-40, 0)) {
					b, _ := json.Marshal(l)
					t.Logf("%s: %s", p.Name, b)
				}
			}
		}
	})
	return r
}

// writeLogs writes each process's log lines into dir/<name>.log (a later life of the same name
// is appended).
func writeLogs(t *testing.T, dir string, procs []*proc.Proc) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Error(err)
		return
	}
	for _, p := range procs {
		f, err := os.OpenFile(filepath.Join(dir, p.Name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			t.Error(err)
			return
		}
		for _, l := range p.Lines(0) {
			b, _ := json.Marshal(l)
			fmt.Fprintf(f, "%s\n", b)
		}
		f.Close()
	}
	t.Logf("process logs in %s", dir)
}

// on is the shared cluster seen from a (sub)test: the harness's helpers fail that test.
func (r *r3) on(t *testing.T) *cluster { return &cluster{Cluster: r.srv.Cluster, t: t} }

// run runs one scenario on the shared cluster, then waits until the cluster is whole again; a
// scenario that fails leaves the later ones failing with its name rather than with its debris.
func (r *r3) run(t *testing.T, name string, scenario func(t *testing.T, c *cluster)) {
	t.Run(name, func(t *testing.T) {
		if r.broken != "" {
			t.Fatalf("not run: %s left the shared cluster broken", r.broken)
		}
		r.broken = name
		start := time.Now()
		c := r.on(t)
		scenario(t, c)
		r.settle(t, c)
		r.broken = ""
		t.Logf("%s took %v", name, time.Since(start).Round(100*time.Millisecond))
	})
}

// settle waits until every stream is current on all three servers, every shard is owned by a
// live node, and no route goes around the proxies.
func (r *r3) settle(t *testing.T, c *cluster) {
	t.Helper()
	r.current(t)
	c.waitState("every shard owned by a live node", 60*time.Second, proc.AllOwnedLive)
	by, err := r.srv.RouteBypasses()
	if err != nil {
		t.Fatal(err)
	}
	if len(by) > 0 {
		t.Fatalf("routes around the proxies (a partition of a server would not be one): %v", by)
	}
}

// reproxy restarts every node that reconnected straight to a server (its NATS client learnt the
// servers' own URLs from them; after losing its server it may pick one), so that a partition of
// a node cuts it off for real. SIGTERM hands its shards off first.
func (r *r3) reproxy(t *testing.T, c *cluster) {
	t.Helper()
	ids, err := r.srv.DirectNodes()
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		p := r.srv.Node(id)
		signal(t, p, syscall.SIGTERM)
		select {
		case <-p.Exited():
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not exit within 30 s of SIGTERM", id)
		}
		c.node(id)
	}
	if len(ids) > 0 {
		t.Logf("restarted %v: they had reconnected around their proxies", ids)
		c.waitState("every shard owned by a live node", 60*time.Second, proc.AllOwnedLive)
	}
	by, err := r.srv.Bypasses()
	if err != nil {
		t.Fatal(err)
	}
	if len(by) > 0 {
		t.Fatalf("connections around the proxies (a partition would not be one): %v", by)
	}
}

// current waits until every stream is current on all servers (the history is read from the
// stream leader, which must stay put while it is).
func (r *r3) current(t *testing.T) {
	t.Helper()
	start := time.Now()
	if err := r.srv.WaitStreamsCurrent(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Logf("every stream current after %v", d.Round(100*time.Millisecond))
	}
}

// dataStreams are the streams of epoch 1's data buckets.
func (r *r3) dataStreams() []string {
	var out []string
	for p := 0; p < r.partitions; p++ {
		out = append(out, "KV_"+store.DataBucket(1, uint32(p)))
	}
	return out
}

// finish is load.finish once every stream is current again (every command answered, every
// acknowledged effect in the final state exactly once, linearizable histories, partition 0's
// stored history fenced), and the stored history of the other partitions.
func (r *r3) finish(c *cluster, l *load) {
	c.t.Helper()
	r.current(c.t)
	l.finish()
	for p := 1; p < r.partitions; p++ {
		c.checkHistoryOf(store.DataBucket(1, uint32(p)))
	}
}

// leaderOn makes server i lead the data stream of partition 0 and returns the stream's name.
func (r *r3) leaderOn(t *testing.T, i int) string {
	t.Helper()
	stream := r.dataStreams()[0]
	if err := r.srv.MoveLeader(context.Background(), stream, i); err != nil {
		t.Fatal(err)
	}
	return stream
}

// led lists the streams server i leads.
func (r *r3) led(t *testing.T, i int) []string {
	t.Helper()
	var out []string
	for _, name := range []string{"KV_" + store.ControlBucket, "KV_" + store.DataBucket(1, 0), "KV_" + store.DataBucket(1, 1), "KV_" + store.DataBucket(1, 2)} {
		if l, err := r.srv.StreamLeader(context.Background(), name); err == nil && l == i {
			out = append(out, name)
		}
	}
	return out
}

// ticks reads the stored tick of each instance.
func ticks(t *testing.T, c *cluster, ids []string) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for _, id := range ids {
		r, _, err := c.Store.Load(context.Background(), 1, store.ShardOf(id, 32), id)
		if err != nil {
			t.Fatalf("load %s: %v", id, err)
		}
		out[id] = r.Tick
	}
	return out
}

// advance polls the stored records until every pending instance has a tick beyond its entry (and
// is removed) or the deadline passes; a read that fails, as while a stream elects its leader, is
// tried again. It reports whether none is pending.
func advance(c *cluster, pending map[string]uint64, deadline time.Time) bool {
	for len(pending) > 0 && time.Now().Before(deadline) {
		for id, tick := range pending {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			r, _, err := c.Store.Load(ctx, 1, store.ShardOf(id, 32), id)
			cancel()
			if err == nil && r.Tick > tick {
				delete(pending, id)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return len(pending) == 0
}

// stretch is a time during which no command of a load was answered.
type stretch struct {
	from time.Duration // after the fault
	took time.Duration
}

func (s stretch) String() string {
	return fmt.Sprintf("%v at +%v", s.took.Round(10*time.Millisecond), s.from.Round(10*time.Millisecond))
}

// answers samples how many commands a load has had answered, for the stretches of at least a
// second in which none was: the pauses its clients saw.
type answers struct {
	t0   time.Time
	stop chan struct{}
	wg   sync.WaitGroup
	out  []stretch
}

func watchAnswers(l *load, t0 time.Time) *answers {
	a := &answers{t0: t0, stop: make(chan struct{})}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		last, lastAt := l.sent.Load(), time.Now()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			var now time.Time
			stopping := false
			select {
			case <-a.stop:
				now, stopping = time.Now(), true
			case now = <-tick.C:
			}
			if n := l.sent.Load(); n != last || stopping {
				if g := now.Sub(lastAt); g >= time.Second {
					a.out = append(a.out, stretch{from: lastAt.Sub(a.t0), took: g})
				}
				last, lastAt = n, now
			}
			if stopping {
				return
			}
		}
	}()
	return a
}

// stretches stops the sampling and returns the stretches without an answer.
func (a *answers) stretches() []stretch {
	close(a.stop)
	a.wg.Wait()
	return a.out
}

// longest is the longest of the stretches.
func longest(ss []stretch) time.Duration {
	var d time.Duration
	for _, s := range ss {
		d = max(d, s.took)
	}
	return d
}

// newLeader waits until a stream is led by a server other than old and returns how long after
// since it was.
func (r *r3) newLeader(t *testing.T, stream string, old int, since time.Time, within time.Duration) time.Duration {
	t.Helper()
	for {
		if l, err := r.srv.StreamLeader(context.Background(), stream); err == nil && l >= 0 && l != old {
			return time.Since(since)
		}
		if time.Since(since) > within {
			t.Fatalf("%s: no leader other than %s %v after the fault", stream, r.srv.Member(old).Name, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// connections lists the servers each node's connections lead to ("n1→[0 0 1 2]").
func (r *r3) connections() []string {
	var out []string
	for _, id := range r3Nodes {
		if srvs, err := r.srv.NodeServers(id); err == nil {
			out = append(out, fmt.Sprintf("%s→%v", id, srvs))
		}
	}
	return out
}

// sum adds a sample over the live nodes (0 for one that does not answer in time).
func (r *r3) sum(sample string, nodes ...string) float64 {
	var total float64
	for _, id := range nodes {
		p := r.srv.Node(id)
		if p == nil || !p.Alive() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		m, err := p.Scrape(ctx)
		cancel()
		if err == nil {
			total += m[sample]
		}
	}
	return total
}

var r3Nodes = []string{"n1", "n2", "n3"}

// faultCounters are the nodes' counters a fault moves, summed.
func (r *r3) faultCounters() map[string]float64 {
	out := map[string]float64{}
	for _, s := range []string{"tickfence_self_fenced_total", "tickfence_failovers_total", "tickfence_token_rotations_total",
		`tickfence_state_writes_total{result="stale_owner"}`, `tickfence_state_writes_total{result="error"}`} {
		out[s] = r.sum(s, r3Nodes...)
	}
	return out
}

func diff(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// TestR3 runs the process faults of a replicated store (issue 13.4) one after the other on one
// cluster of three `tickd server` processes (R3 buckets) and three nodes, each under its own
// command load: kill -9 of the server leading the data stream, SIGSTOP of it past its election
// timeout, a node partitioned from every server, and a server partitioned from the other two
// (run in another order: see below).
// Each ends with the load's checks (every command answered, every acknowledged effect in the final
// state exactly once, linearizable histories) and the stored history message by message (no record
// under a stale token), and the cluster whole again. -r3.long runs longer faults and loads over
// three partitions.
func TestR3(t *testing.T) {
	r := newR3(t)
	c := r.on(t)
	for _, id := range r3Nodes {
		c.node(id)
	}
	c.waitState("every node owns shards", 60*time.Second, func(s *coordinator.State) bool {
		for _, id := range r3Nodes {
			if n, ok := s.Live(id); !ok || n.Owned == 0 {
				return false
			}
		}
		return proc.AllOwnedLive(s)
	})
	r.settle(t, c)
	// The partition of a node first: after a kill, nodes may have reconnected around their
	// proxies (it would restart them: reproxy). The partition of a server last: the server that
	// comes back has raised its terms in every raft group, and the elections that follow the heal
	// (the meta group's included: seconds without a JetStream API) are no place to start a fault.
	r.run(t, "PartitionNode", r.partitionNode)
	r.run(t, "StopServer", r.stopServer)
	r.run(t, "KillStreamLeader", r.killStreamLeader)
	r.run(t, "PartitionServer", r.partitionServer)
	if *r3Long {
		r.run(t, "HoldServer", r.holdServer)
	}
}

// owners says who owns the shards of instances, by the cluster state: "inst (shard 3 on n2)".
func (r *r3) owners(c *cluster, ids map[string]uint64) string {
	s, err := c.State(context.Background())
	if err != nil {
		return fmt.Sprintf("%d instances (no state: %v)", len(ids), err)
	}
	var out []string
	for id := range ids {
		sh := store.ShardOf(id, 32)
		out = append(out, fmt.Sprintf("%s (shard %d on %s)", id, sh, s.Shards[sh].Owner.Owner))
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// fault is what one scenario measured.
type fault struct {
	what     string
	elected  time.Duration // a new leader of the data stream, after the fault
	resumed  time.Duration // every instance's stored tick advancing again, after the fault
	during   bool          // resumed before the fault ended
	answers  []stretch
	counters map[string]float64
}

func (f fault) String() string {
	when := "after it ended"
	if f.during {
		when = "while it lasted"
	}
	return fmt.Sprintf("%s: new leader of the data stream after %v; every instance's stored tick advancing after %v (%s); "+
		"stretches without a command answered %v; node counters %v", f.what, f.elected.Round(time.Millisecond),
		f.resumed.Round(time.Millisecond), when, f.answers, f.counters)
}

// leaderFault runs a fault on server victim, made the leader of the data stream first, under a load:
// start begins the fault, end ends it after lasting (or, with untilResumed, as soon as ticking has
// resumed). Ticking must resume within 30 s of the end.
func (r *r3) leaderFault(t *testing.T, c *cluster, prefix, label string, victim int, lasting time.Duration, untilResumed bool, start, end func()) fault {
	t.Helper()
	l := c.startLoad(prefix, r.loads, r.workers)
	stream := r.leaderOn(t, victim)
	l.waitSent(100, 30*time.Second)
	f := fault{what: fmt.Sprintf("%s of %s (leading %v; node connections by server %v)", label, r.srv.Member(victim).Name,
		r.led(t, victim), r.connections())}
	counters := r.faultCounters()
	pending := ticks(t, c, l.ids)
	t0 := time.Now()
	a := watchAnswers(l, t0)
	start()
	f.elected = r.newLeader(t, stream, victim, t0, lasting+20*time.Second)
	f.during = advance(c, pending, t0.Add(lasting))
	f.resumed = time.Since(t0)
	if !untilResumed {
		time.Sleep(time.Until(t0.Add(lasting)))
	}
	if !f.during {
		t.Logf("%s: still not ticking when it ends: %s", label, r.owners(c, pending))
	}
	end()
	if !f.during {
		if !advance(c, pending, time.Now().Add(30*time.Second)) {
			t.Fatalf("%s: %d of %d instances not ticking (stored) 30 s after it ended", f.what, len(pending), len(l.ids))
		}
		f.resumed = time.Since(t0)
	}
	r.current(t)
	l.waitSent(100, 30*time.Second)
	f.answers = a.stretches()
	f.counters = diff(counters, r.faultCounters())
	t.Log(f)
	r.finish(c, l)
	return f
}

// killStreamLeader: kill -9 of the server leading the data stream, under load. Another server
// takes the lead, writes resume, nothing acknowledged is lost; the server restarts on its data
// and catches up.
func (r *r3) killStreamLeader(t *testing.T, c *cluster) {
	const victim = 1
	// It stays dead until ticking resumes without it (at most 30 s).
	r.leaderFault(t, c, "kill", "kill -9", victim, 30*time.Second, true, func() { r.srv.KillServer(victim) }, func() {
		if err := r.srv.RestartServer(context.Background(), victim); err != nil {
			t.Fatal(err)
		}
	})
}

// stopServer: SIGSTOP of the server leading the data stream for longer than JetStream's election
// timeout (4–9 s), then SIGCONT. The nodes' connections to it hang (TCP stays up); a node whose
// lease is renewed through it self-fences and its shards fail over; what the frozen server held
// is stale when it wakes.
func (r *r3) stopServer(t *testing.T, c *cluster) {
	const victim = 2
	stopFor := 10 * time.Second
	if *r3Long {
		stopFor = 30 * time.Second
	}
	r.leaderFault(t, c, "stop", "SIGSTOP", victim, stopFor, false, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := r.srv.StopServer(ctx, victim); err != nil {
			t.Fatal(err)
		}
	}, func() {
		if err := r.srv.ContServer(victim); err != nil {
			t.Fatal(err)
		}
	})
}

// partitionServer: the server leading the data stream loses its routes to the other two (its
// clients stay connected to it). The majority elects a leader and goes on; the nodes whose lease
// is renewed through the minority server lose it; after the heal the old leader's uncommitted
// proposals are discarded, and nothing stale is stored.
func (r *r3) partitionServer(t *testing.T, c *cluster) {
	const victim = 1
	cutFor := 10 * time.Second
	if *r3Long {
		cutFor = 30 * time.Second
	}
	r.leaderFault(t, c, "iso", "partition", victim, cutFor, false, func() { r.srv.CutServer(victim) }, func() { r.srv.HealServer(victim) })
}

// holdServer (-r3.long): the leader of the data stream is cut off from the other two servers by a
// partition that drops packets instead of closing connections (its routes hold: TCP stays up,
// nothing passes), for 30 s; then everything held is delivered.
func (r *r3) holdServer(t *testing.T, c *cluster) {
	const victim = 2
	r.leaderFault(t, c, "hold", "held partition", victim, 30*time.Second, false, func() { r.srv.HoldServer(victim) },
		func() { r.srv.HealServer(victim) })
}

// partitionNode: a node loses every server (its links hold: connections open, nothing through,
// as in a partition that drops packets). Its lease goes unrenewed (it rides through on the
// fence), its shards fail over to the others; on the heal what it sent meanwhile arrives — the
// fence rejects it — and it creates its expired lease again under the same session.
func (r *r3) partitionNode(t *testing.T, c *cluster) {
	const victim = "n3"
	r.reproxy(t, c)
	l := c.startLoad("part", r.loads, r.workers)
	s := c.waitState(victim+" owns instances", 60*time.Second, owns(victim, 1))
	l.waitSent(100, 30*time.Second)
	nv, _ := s.Live(victim)
	session := nv.Record.Session
	insts := c.instancesOf(s, victim)
	if len(insts) == 0 {
		t.Fatalf("%s owns no instance", victim)
	}
	before := map[string]store.Record{}
	for id, sh := range insts {
		before[id] = c.load(id, sh)
	}
	p := r.srv.Node(victim)
	unrenewed := func() float64 { // rode through (--ride-through), or paused at once
		return metric(t, p, "tickfence_lease_ride_through_total") + metric(t, p, "tickfence_self_fenced_total")
	}
	fenced := unrenewed()
	rejected := metric(t, p, `tickfence_state_writes_total{result="stale_owner"}`)
	mark := p.LineCount()
	t0 := time.Now()
	a := watchAnswers(l, t0)
	r.srv.HoldNode(victim)
	for unrenewed() <= fenced {
		if time.Since(t0) > lease+2*time.Second {
			t.Fatalf("%s's lease was not shown unrenewed within %v of its partition", victim, time.Since(t0))
		}
		time.Sleep(20 * time.Millisecond)
	}
	selfFenced := time.Since(t0)
	// Its instances tick elsewhere: written under another token, beyond the last stored tick.
	pending := maps(insts)
	for len(pending) > 0 {
		if time.Since(t0) > lease+5*time.Second {
			t.Fatalf("%d of %d instances of %s not ticking elsewhere %v after its partition", len(pending), len(insts), victim, time.Since(t0))
		}
		for id, sh := range pending {
			if rec := c.load(id, sh); rec.Token != before[id].Token && rec.Tick > before[id].Tick {
				delete(pending, id)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	failover := time.Since(t0)
	// Healed before the node's client gives its held connections up (natskv.Connect: two pings
	// unanswered, 4–6 s) and reconnects — around the proxies, to a URL the servers told it.
	time.Sleep(500 * time.Millisecond)
	if direct, err := r.srv.DirectNodes(); err != nil || len(direct) > 0 {
		t.Fatalf("nodes reconnected around their proxies during the partition: %v %v", direct, err)
	}
	r.srv.HealNode(victim)
	healed := time.Since(t0)
	waitLog(t, p, "its expired lease re-created", mark, 30*time.Second, func(m map[string]any) bool {
		return m["msg"] == "lease re-created after it expired unrenewed" || m["msg"] == "node joined" && m["session"] != session
	})
	l.waitSent(100, 30*time.Second)
	t.Logf("partition of %s (%d instances): lease unrenewed after %v, its instances ticking elsewhere after %v, healed after %v "+
		"(what it sent meanwhile delivered then); stale-owner rejections on it %v; stretches without a command answered %v",
		victim, len(insts), selfFenced.Round(time.Millisecond), failover.Round(time.Millisecond), healed.Round(time.Millisecond),
		metric(t, p, `tickfence_state_writes_total{result="stale_owner"}`)-rejected, a.stretches())
	r.finish(c, l)
}
