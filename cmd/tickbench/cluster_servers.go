package main

// The cluster scenario's JetStream servers: one `tickd server`, or several forming one JetStream
// cluster (--servers 3) with routes straight between them (no proxies: every byte a proxy copied
// would cost this machine's CPU and the quorum's latency), their streams' leaders, and the kill -9
// of a stream's leader.

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickfence/tickfence/internal/proc"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/natskv"
)

// benchServer is one tickd server process.
type benchServer struct {
	Name string // its --server-name, as JetStream's cluster info names it
	URL  string // nats://127.0.0.1:port
	proc *proc.Proc
}

// startServers starts n clustered tickd servers s1 … sn. The first is the Cluster's own (started by
// proc.StartCluster with the cluster flags as ServerArgs), the others are started here; then the
// Cluster's URL lists all of them (the nodes and the load get that), its store client is replaced
// by one that knows all of them (it survives the loss of any one), and this waits until JetStream
// can place a stream of the replicas asked for.
func (b *benchCluster) startServers(ctx context.Context, p *progress, cfg proc.ClusterConfig, n, replicas int) error {
	routeAddrs := make([]string, n)
	var routes []string
	for i := range routeAddrs {
		a, err := freeAddr()
		if err != nil {
			return err
		}
		routeAddrs[i] = a
		routes = append(routes, "nats-route://"+a)
	}
	name := func(i int) string { return fmt.Sprintf("s%d", i+1) }
	clusterArgs := func(i int) []string {
		return []string{"--cluster", routeAddrs[i], "--routes", strings.Join(routes, ","), "--server-name", name(i),
			"--cluster-name", "tickbench"}
	}
	p.line("starting %d tickd servers (one JetStream cluster)", n)
	first := cfg
	first.DataDir = filepath.Join(b.dir, "nats-"+name(0))
	first.ServerArgs = append(clusterArgs(0), cfg.ServerArgs...)
	var err error
	if b.Cluster, err = proc.StartCluster(ctx, first); err != nil {
		return err
	}
	b.servers = append(b.servers, benchServer{Name: name(0), URL: b.URL, proc: b.Server})
	for i := 1; i < n; i++ {
		addr, err := freeAddr()
		if err != nil {
			return err
		}
		args := append([]string{"server", "--listen", addr, "--data", filepath.Join(b.dir, "nats-"+name(i))}, clusterArgs(i)...)
		sp, err := proc.Start(cfg.Bin, name(i), nil, append(args, cfg.ServerArgs...)...)
		if err != nil {
			return err
		}
		b.servers = append(b.servers, benchServer{Name: name(i), URL: "nats://" + addr, proc: sp})
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, _, err = sp.WaitLog(wctx, 0, func(l map[string]any) bool { return strings.Contains(fmt.Sprint(l["msg"]), "server ready") })
		cancel()
		if err != nil {
			return fmt.Errorf("tickd server %s: %w", name(i), err)
		}
	}
	var urls []string
	for _, s := range b.servers {
		urls = append(urls, s.URL)
	}
	b.URL = strings.Join(urls, ",")
	nc, err := natskv.Connect(b.URL, nats.Name("tickbench store"))
	if err != nil {
		return err
	}
	st, err := natskv.Open(nc, natskv.Options{History: max(cfg.History, 1), Replicas: replicas})
	if err != nil {
		nc.Close()
		return err
	}
	b.Store.Close()
	b.NC.Close()
	b.NC, b.Store = nc, st
	p.line("waiting until the JetStream cluster places an R%d stream", replicas)
	return waitPlacement(ctx, b.NC, replicas)
}

// waitPlacement waits until the JetStream cluster can place a stream of the replicas (its meta
// leader knows enough servers), with a throwaway in-memory stream.
func waitPlacement(ctx context.Context, nc *nats.Conn, replicas int) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	const probe = "TICKBENCH_PLACEMENT_PROBE"
	for {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := js.CreateStream(cctx, jetstream.StreamConfig{Name: probe, Subjects: []string{"tickbench.placement.probe"},
			Replicas: replicas, Storage: jetstream.MemoryStorage})
		if err == nil {
			err = js.DeleteStream(cctx, probe)
		}
		ccancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the servers never placed an R%d stream: %v", replicas, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// server is the server JetStream calls name, or nil.
func (b *benchCluster) server(name string) *benchServer {
	for i := range b.servers {
		if b.servers[i].Name == name {
			return &b.servers[i]
		}
	}
	return nil
}

// partitionStreams is the data partitions' streams (leader, peers); nil if they cannot be read.
func (b *benchCluster) partitionStreams(ctx context.Context, partitions uint32) []natskv.PartitionStream {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ps, err := b.Store.PartitionStreams(ctx, b.epoch, partitions)
	if err != nil {
		return nil
	}
	return ps
}

// leaders maps every stream to the name of its leader, as each stream's info says (a stream whose
// info does not come within a second is left out: it is electing, or its leader is gone).
func (b *benchCluster) leaders(ctx context.Context) map[string]string {
	js, err := jetstream.New(b.NC)
	if err != nil {
		return nil
	}
	lctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var names []string
	lister := js.StreamNames(lctx)
	for n := range lister.Name() {
		names = append(names, n)
	}
	out := map[string]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if l := streamLeaderOf(ctx, js, n); l != "" {
				mu.Lock()
				out[n] = l
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out
}

// streamLeaderOf is the name of a stream's leader ("" while it has none or does not answer within
// a second).
func streamLeaderOf(ctx context.Context, js jetstream.JetStream, stream string) string {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return ""
	}
	info, err := st.Info(ctx)
	if err != nil || info.Cluster == nil {
		return ""
	}
	return info.Cluster.Leader
}

// leaderStream is the stream --kill-leader names: p<k> is data partition k's, control the control
// bucket's (data: partition 0's until dataOnlyLeader chooses).
func leaderStream(of string, epoch uint64) string {
	if of == "control" {
		return "KV_" + store.ControlBucket
	}
	if of == "data" {
		of = "p0"
	}
	k, _ := strconv.Atoi(strings.TrimPrefix(of, "p"))
	return "KV_" + store.DataBucket(epoch, uint32(k))
}

// partitionOfStream is the data partition of a stream of this epoch, or -1.
func partitionOfStream(stream string, epoch uint64, partitions uint32) int {
	for k := range partitions {
		if stream == "KV_"+store.DataBucket(epoch, k) {
			return int(k)
		}
	}
	return -1
}

// killLeader kills -9 the server leading the stream of, and measures: until the stream has a new
// leader, and until every sampled instance of the data partitions the server led has a record
// stored with a higher tick than at the kill (writes resumed). The server stays dead.
func (b *benchCluster) killLeader(ctx context.Context, p *progress, sam *sampler, gen *loadGen, of string, partitions uint32, t0 time.Time) *faultResult {
	res := &faultResult{Kind: "kill-leader", Stream: leaderStream(of, b.epoch)}
	fail := func(err error) *faultResult { res.Error = err.Error(); return res }
	js, err := jetstream.New(b.NC)
	if err != nil {
		return fail(err)
	}
	leaders := b.leaders(ctx)
	if of == "data" {
		if res.Stream, leaders, err = b.dataOnlyLeader(ctx, p, leaders, partitions); err != nil {
			return fail(err)
		}
	}
	res.Server = leaders[res.Stream]
	victim := b.server(res.Server)
	if victim == nil {
		return fail(fmt.Errorf("stream %s: no leader among the servers (leaders: %v)", res.Stream, leaders))
	}
	for stream, l := range leaders {
		if l != res.Server {
			continue
		}
		res.Led = append(res.Led, stream)
		if k := partitionOfStream(stream, b.epoch, partitions); k >= 0 {
			res.Partitions = append(res.Partitions, k)
		}
	}
	slices.Sort(res.Led)
	slices.Sort(res.Partitions)
	res.LoadOnIt = gen.nc.ConnectedServerName() == res.Server
	// The instances of the partitions it led, and up to 64 of them watched for their next record.
	var watched []string
	shards := map[uint32]bool{}
	for _, id := range gen.ids {
		// A stream that holds no data partition (the control bucket's: every node's lease) is
		// every instance's.
		sh := store.ShardOf(id, b.shards)
		if len(res.Partitions) == 0 || slices.Contains(res.Partitions, int(sh%partitions)) {
			res.affected = append(res.affected, id)
			shards[sh] = true
		}
	}
	res.Instances, res.Shards = len(res.affected), len(shards)
	for i := 0; i < len(res.affected) && len(watched) < 64; i += max(1, len(res.affected)/64) {
		watched = append(watched, res.affected[i])
	}
	before := map[string]uint64{}
	for _, id := range watched {
		r, err := b.Load(ctx, b.epoch, store.ShardOf(id, b.shards), id)
		if err != nil {
			return fail(fmt.Errorf("load %s: %w", id, err))
		}
		before[id] = r.Tick
	}
	res.Sampled = len(watched)
	for _, id := range b.ids {
		if n := b.Node(id); n != nil {
			sam.final(n) // the nodes' counters as late as possible before the fault
		}
	}
	p.line("kill -9 of %s, leader of %s", res.Server, strings.Join(res.Led, ", "))
	at := time.Now()
	res.At = at.Sub(t0).Seconds()
	sam.cpu.sampleProc(victim.proc)
	victim.proc.Kill()
	sam.serverKilled(res.Server, res.At)
	deadline := at.Add(60 * time.Second)
	pending := slices.Clone(watched)
	for (len(pending) > 0 || res.NewLeader == "") && time.Now().Before(deadline) && ctx.Err() == nil {
		if res.NewLeader == "" {
			if l := streamLeaderOf(ctx, js, res.Stream); l != "" && l != res.Server {
				res.NewLeader, res.Elected = l, time.Since(at)
				p.line("%s has a new leader, %s, after %v", res.Stream, l, res.Elected.Round(time.Millisecond))
			}
		}
		pending = b.advanced(ctx, pending, before)
		if len(pending) == 0 && res.Failover == 0 {
			res.Failover = time.Since(at)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if res.Failover == 0 {
		res.Failover = time.Since(at)
	}
	res.Complete = len(pending) == 0
	res.Pending = len(pending)
	if res.Complete {
		sam.recovered(res.At + res.Failover.Seconds())
	}
	return res
}

// advanced reads the records of pending instances at once (each read bounded by a second: a
// partition without a leader may not answer) and returns those whose stored tick is not above
// before's yet.
func (b *benchCluster) advanced(ctx context.Context, pending []string, before map[string]uint64) []string {
	done := make([]bool, len(pending))
	var wg sync.WaitGroup
	for i, id := range pending {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			r, err := b.Load(lctx, b.epoch, store.ShardOf(id, b.shards), id)
			done[i] = err == nil && r.Tick > before[id]
		}()
	}
	wg.Wait()
	var out []string
	for i, id := range pending {
		if !done[i] {
			out = append(out, id)
		}
	}
	return out
}

// dataOnlyLeader is the stream of the first data partition whose leader does not lead the control
// bucket. If every one shares its leader with the control bucket, the control bucket's leadership
// is handed to another server first (a leader step-down, waited for), and partition 0's is chosen.
// It returns the stream and the leaders as they then are.
func (b *benchCluster) dataOnlyLeader(ctx context.Context, p *progress, leaders map[string]string, partitions uint32) (string, map[string]string, error) {
	control := "KV_" + store.ControlBucket
	for k := range partitions {
		if s := "KV_" + store.DataBucket(b.epoch, k); leaders[s] != "" && leaders[s] != leaders[control] {
			return s, leaders, nil
		}
	}
	from := leaders[control]
	p.line("every data partition's leader also leads %s (%s): moving that leadership away first", control, from)
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := b.NC.RequestWithContext(rctx, "$JS.API.STREAM.LEADER.STEPDOWN."+control, nil)
		cancel()
		if err == nil {
			for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
				leaders = b.leaders(ctx)
				if l := leaders[control]; l != "" && l != from {
					return "KV_" + store.DataBucket(b.epoch, 0), leaders, nil
				}
			}
		}
		if err := sleepCtx(ctx, 500*time.Millisecond); err != nil {
			return "", nil, err
		}
	}
	return "", nil, fmt.Errorf("the leadership of %s did not leave %s within 15 s", control, from)
}
