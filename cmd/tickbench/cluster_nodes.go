package main

// The processes of the cluster scenario: a tickd server and its nodes, and the faults injected
// into them.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/tickfence/tickfence/coordinator"
	"github.com/tickfence/tickfence/internal/proc"
	"github.com/tickfence/tickfence/store"
)

// benchCluster is a tickd server (or several forming a JetStream cluster) and its nodes, run as
// processes from a freshly built binary.
type benchCluster struct {
	*proc.Cluster
	ids     []string
	dir     string
	shards  uint32
	epoch   uint64
	servers []benchServer // servers[0] is the Cluster's own Server
}

func startBenchCluster(ctx context.Context, p *progress, bin string, cfg proc.ClusterConfig, ids []string) (*benchCluster, error) {
	return startBenchServers(ctx, p, bin, cfg, 1, 1, ids)
}

// startBenchServers starts n tickd servers (n > 1: one JetStream cluster that can place streams of
// the given replicas) and the nodes ids, and waits until every node owns shards.
func startBenchServers(ctx context.Context, p *progress, bin string, cfg proc.ClusterConfig, n, replicas int, ids []string) (*benchCluster, error) {
	dir, err := os.MkdirTemp("", "tickbench-cluster")
	if err != nil {
		return nil, err
	}
	b := &benchCluster{ids: ids, dir: dir}
	if bin == "" {
		p.line("building tickd")
		if bin, err = proc.Build(ctx, dir); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	cfg.Bin, cfg.DataDir = bin, dir+"/nats"
	if n == 1 {
		p.line("starting tickd server")
		if b.Cluster, err = proc.StartCluster(ctx, cfg); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		b.servers = []benchServer{{Name: "tickd-server", URL: b.URL, proc: b.Server}}
	} else if err := b.startServers(ctx, p, cfg, n, replicas); err != nil {
		b.close()
		return nil, err
	}
	// The first node creates the cluster; the others join it.
	for i, id := range ids {
		var err error
		for attempt := 1; ; attempt++ {
			_, err = b.StartNode(id)
			if err == nil && (i == 0 || i == len(ids)-1) {
				wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
				for _, id := range ids[:i+1] {
					if err = proc.WaitJoined(wctx, b.Node(id)); err != nil {
						break
					}
				}
				cancel()
			}
			// On a JetStream cluster the node creating the cluster sometimes exits at its first
			// write to a bucket it has just made ("no responders": the new stream's leader is not
			// reachable yet); a new process finds the buckets and finishes the bootstrap.
			if err == nil || i > 0 || n == 1 || attempt == 3 || !errors.Is(err, proc.ErrExited) {
				break
			}
			p.line("node %s exited while creating the cluster, starting it again:%s", id, lastLogLines(b.Node(id), 1))
		}
		if err != nil {
			err = fmt.Errorf("node %s: %w%s", id, err, lastLogLines(b.Node(id), 5))
			b.close()
			return nil, err
		}
	}
	p.line("%d nodes joined; waiting until every node owns shards", len(ids))
	wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	s, err := b.WaitState(wctx, "every shard is owned by a live node and every node owns shards", func(s *coordinator.State) bool {
		if !proc.AllOwnedLive(s) || len(s.Nodes) < len(ids) {
			return false
		}
		for _, n := range s.Nodes {
			if n.Owned == 0 {
				return false
			}
		}
		return true
	})
	if err != nil {
		b.close()
		return nil, err
	}
	b.shards, b.epoch = s.Cluster.Shards, s.Cluster.Epoch
	return b, nil
}

func (b *benchCluster) close() {
	if b.Cluster != nil {
		b.Close()
	}
	for _, s := range b.servers[min(1, len(b.servers)):] { // the first is the Cluster's
		s.proc.Kill()
	}
	os.RemoveAll(b.dir)
}

// inject runs the fault of the cluster scenario and measures failover: from the fault until every
// instance of the victim has a record written under another token with a higher tick.
func (b *benchCluster) inject(ctx context.Context, p *progress, sam *sampler, kind, node string, pauseFor time.Duration, t0 time.Time) *faultResult {
	res := &faultResult{Kind: kind, Pause: pauseFor}
	if kind == "kill" {
		res.Pause = 0
	}
	fail := func(err error) *faultResult { res.Error = err.Error(); return res }
	s, err := b.State(ctx)
	if err != nil {
		return fail(err)
	}
	if node == "" { // the node with most instances
		best := -1
		for _, n := range s.Nodes {
			if n.Record.Instances > best {
				node, best = n.ID, n.Record.Instances
			}
		}
	}
	res.Node = node
	victim := b.Node(node)
	if victim == nil {
		return fail(fmt.Errorf("no node %q", node))
	}
	insts, err := b.InstancesOf(ctx, s, node)
	if err != nil {
		return fail(err)
	}
	for _, sh := range s.Shards {
		if sh.Owner.Owner == node {
			res.Shards++
		}
	}
	res.Instances = len(insts)
	for id := range insts {
		res.affected = append(res.affected, id)
	}
	before := map[string]store.Record{}
	for id, sh := range insts {
		r, err := b.Load(ctx, b.epoch, sh, id)
		if err != nil {
			return fail(fmt.Errorf("load %s: %w", id, err))
		}
		before[id] = r
	}
	sam.final(victim) // its counters as late as possible before the fault
	at := time.Now()
	res.At = at.Sub(t0).Seconds()
	sig := syscall.SIGKILL
	if kind == "pause" {
		sig = syscall.SIGSTOP
	}
	sam.cpu.sampleProc(victim)
	if err := victim.Signal(sig); err != nil {
		return fail(err)
	}
	sam.faulted(node, kind, res.At)
	var resumed chan struct{}
	if kind == "pause" {
		resumed = make(chan struct{})
		go func() {
			defer close(resumed)
			_ = sleepCtx(ctx, time.Until(at.Add(pauseFor)))
			_ = victim.Signal(syscall.SIGCONT)
		}()
	}
	pending := make(map[string]uint32, len(insts))
	for id, sh := range insts {
		pending[id] = sh
	}
	deadline := at.Add(b.Lease() + 60*time.Second)
	for len(pending) > 0 && time.Now().Before(deadline) && ctx.Err() == nil {
		for id, sh := range pending {
			r, err := b.Load(ctx, b.epoch, sh, id)
			if err == nil && r.Token != before[id].Token && r.Tick > before[id].Tick {
				delete(pending, id)
			}
		}
		if len(pending) > 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	res.Failover = time.Since(at)
	res.Complete = len(pending) == 0
	res.Pending = len(pending)
	if res.Complete {
		sam.recovered(time.Now().Sub(t0).Seconds())
	}
	if resumed != nil {
		<-resumed
	}
	return res
}

// lastLogLines is a process's last n log lines (message and error), for an error that says why it
// exited.
func lastLogLines(p *proc.Proc, n int) string {
	if p == nil {
		return ""
	}
	lines := p.Lines(max(0, p.LineCount()-n))
	var out strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&out, "\n  %s: %v", p.Name, l["msg"])
		if e, ok := l["err"]; ok {
			fmt.Fprintf(&out, " (err: %v)", e)
		}
	}
	return out.String()
}
