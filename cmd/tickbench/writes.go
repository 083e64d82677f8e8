package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickfence/tickfence/auth"
	"github.com/tickfence/tickfence/clusterinit"
	"github.com/tickfence/tickfence/internal/hdr"
	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/natskv"
)

type writeResult struct {
	Profile     string        `json:"profile"` // e.g. "R1 file", "R1 memory sync", "R3 file"
	Method      string        `json:"method"`
	InFlight    int           `json:"in_flight"`
	Shards      int           `json:"shards"`
	Seconds     float64       `json:"window_s"`
	WritesPerS  float64       `json:"writes_per_s"`
	P50         time.Duration `json:"latency_p50_ns"`
	P99         time.Duration `json:"latency_p99_ns"`
	Max         time.Duration `json:"latency_max_ns"`
	Errors      uint64        `json:"errors"`
	FirstError  string        `json:"first_error,omitempty"`
	PayloadSize int           `json:"payload_bytes"`
	// CPUPerWrite is the CPU this process (client and in-process server alike) spent per write
	// acknowledged in the window: a cost that other processes' load on the machine disturbs far
	// less than writes/s.
	CPUPerWrite time.Duration `json:"cpu_per_write_ns"`
}

type writesReport struct {
	Machine machine       `json:"machine"`
	Results []writeResult `json:"results"`
}

func runWrites(args []string) error {
	fs := newFlagSet("writes", "Fenced writes (the store's writes, checked against the shard's token; with --batch-shards also\n"+
		"one atomic batch per shard) against raw JetStream compare-on-revision publishes, on an embedded\n"+
		"server: writes/s and latency per method and storage;\n"+
		"--cluster also on three in-process servers with R3 buckets.")
	storages := fs.String("storage", "memory,file", "JetStream storage of the buckets: memory, file, or both")
	syncAll := fs.Bool("sync", false, "fsync every write (the server's sync_always)")
	inflight := fs.Int("inflight", 64, "writes in flight: one per instance, instances spread over the shards")
	shards := fs.Int("shards", 256, "shards the instances are spread over")
	payload := fs.Int("payload", 512, "bytes of game state per record")
	duration := fs.Duration("duration", 5*time.Second, "measurement window per method")
	cluster := fs.Bool("cluster", false, "also run a three-server in-process cluster with R3 buckets (file storage)")
	batchShards := fs.Int("batch-shards", 8, "shards of the per-shard comparison (one write in flight per shard vs one atomic batch per shard), run on file storage and, with --cluster, R3; 0 skips it")
	jsonOut := fs.String("json", "", "write the figures as JSON to this file")
	withAuth := fs.Bool("auth", false, "also run each R1 profile against a server enforcing the roles (tickctl auth init), writing with\n"+
		"node credentials, and print the ratio of each method's writes/s with and without (the cost of authentication)")
	withTLS := fs.Bool("tls", false, "also run each R1 profile over TCP on loopback twice: plain, then with TLS (a dev CA from tickctl auth init\n"+
		"--tls) and the roles enforced (node credentials), and print the ratio of each method's writes/s (the cost of both on the wire)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}

	rep := writesReport{Machine: thisMachine()}
	fmt.Printf("tickbench writes on %s\n", rep.Machine)
	fmt.Printf("%d writes in flight (one per instance) over %d shards, %d-byte state, %s per method\n\n", *inflight, *shards, *payload, *duration)
	p := newProgress()
	for _, st := range parseList(*storages) {
		var storage jetstream.StorageType
		switch st {
		case "memory":
			storage = jetstream.MemoryStorage
		case "file":
			storage = jetstream.FileStorage
		default:
			return fmt.Errorf("unknown storage %q", st)
		}
		profile := "R1 " + st
		if *syncAll {
			profile += " sync"
		}
		rows, err := writesR1(profile, storage, *syncAll, security{}, *inflight, *shards, *payload, *duration, p)
		if err != nil {
			return err
		}
		printWrites(profile, rows)
		rep.Results = append(rep.Results, rows...)
		if *withAuth {
			arows, err := writesR1(profile+" auth", storage, *syncAll, security{auth: true}, *inflight, *shards, *payload, *duration, p)
			if err != nil {
				return err
			}
			printWrites(profile+" auth (node credentials, permissions enforced)", arows)
			for i, r := range arows {
				if i < len(rows) && rows[i].WritesPerS > 0 {
					fmt.Printf("ratio %s, auth / without: writes/s %.3f, CPU per write %.3f\n", r.Method, r.WritesPerS/rows[i].WritesPerS, cpuRatio(r, rows[i]))
				}
			}
			fmt.Println()
			rep.Results = append(rep.Results, arows...)
		}
		if *withTLS {
			prows, err := writesR1(profile+" tcp", storage, *syncAll, security{tcp: true}, *inflight, *shards, *payload, *duration, p)
			if err != nil {
				return err
			}
			printWrites(profile+" over TCP on loopback, no TLS, no auth", prows)
			trows, err := writesR1(profile+" tcp tls auth", storage, *syncAll, security{tcp: true, tls: true, auth: true}, *inflight, *shards, *payload, *duration, p)
			if err != nil {
				return err
			}
			printWrites(profile+" over TCP on loopback, TLS and node credentials", trows)
			for i, r := range trows {
				if i < len(prows) && prows[i].WritesPerS > 0 {
					fmt.Printf("ratio %s, TLS+auth / plain TCP: writes/s %.3f, CPU per write %.3f\n", r.Method, r.WritesPerS/prows[i].WritesPerS, cpuRatio(r, prows[i]))
				}
			}
			fmt.Println()
			rep.Results = append(rep.Results, prows...)
			rep.Results = append(rep.Results, trows...)
		}
		if st == "file" && *batchShards > 0 && !*syncAll {
			prof := fmt.Sprintf("R1 file, %d shards", *batchShards)
			rows, err := writesPerShard(prof, 1, *inflight, *batchShards, *payload, *duration, p)
			if err != nil {
				return err
			}
			printWrites(prof, rows)
			rep.Results = append(rep.Results, rows...)
		}
	}
	if *cluster && *batchShards > 0 {
		prof := fmt.Sprintf("R3 file, %d shards", *batchShards)
		rows, err := writesPerShard(prof, 3, *inflight, *batchShards, *payload, *duration, p)
		if err != nil {
			return err
		}
		printWrites(prof, rows)
		rep.Results = append(rep.Results, rows...)
	}
	if *cluster {
		rows, err := writesR3(*inflight, *shards, *payload, *duration, p)
		if err != nil {
			return err
		}
		printWrites("R3 file (three in-process servers)", rows)
		rep.Results = append(rep.Results, rows...)
	}
	return writeJSON(*jsonOut, rep)
}

func printWrites(profile string, rows []writeResult) {
	fmt.Println(profile)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "method\tin flight\twrites/s\tp50 ms\tp99 ms\tmax ms\terrors\tCPU µs/write\t")
	var raw float64
	for _, r := range rows {
		if r.Method == "raw CAS publish, pipelined" {
			raw = r.WritesPerS
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%s\t%s\t%d\t%.1f\t\n", r.Method, r.InFlight, r.WritesPerS, ms(r.P50), ms(r.P99), ms(r.Max), r.Errors,
			float64(r.CPUPerWrite)/float64(time.Microsecond))
	}
	tw.Flush()
	for _, r := range rows {
		if raw > 0 && r.Method != "raw CAS publish, pipelined" && r.InFlight > 1 {
			fmt.Printf("ratio %s / raw pipelined: %.3f\n", r.Method, r.WritesPerS/raw)
		}
		if r.FirstError != "" {
			fmt.Printf("first error of %s: %s\n", r.Method, r.FirstError)
		}
	}
	fmt.Println()
}

// bench is a store bootstrapped for the benchmark: every shard granted to one session.
type benchStore struct {
	st     *natskv.Store
	nc     *nats.Conn
	js     jetstream.JetStream
	grants []store.Grant
	ids    []string
	bucket string
}

func openBench(ctx context.Context, opt nats.Option, storage jetstream.StorageType, replicas, inflight, shards int) (*benchStore, error) {
	nc, err := natskv.Connect("", opt)
	if err != nil {
		return nil, err
	}
	st, err := natskv.Open(nc, natskv.Options{Storage: storage, Replicas: replicas, MaxPending: 4 * inflight})
	if err != nil {
		return nil, err
	}
	b := &benchStore{st: st, nc: nc, bucket: store.DataBucket(1, 0)}
	b.js, _ = jetstream.New(nc)
	if _, err := st.Bootstrap(ctx, store.Cluster{Shards: uint32(shards), Partitions: 1, Epoch: 1}); err != nil {
		return nil, err
	}
	a := store.Assignment{Owner: "tickbench", Session: "s1"}
	b.grants = make([]store.Grant, shards)
	for s := range shards {
		tok, err := st.Assign(ctx, 1, uint32(s), a, 0)
		if err != nil {
			return nil, err
		}
		b.grants[s] = store.Grant{Epoch: 1, Shard: uint32(s), Token: tok, Assignment: a}
	}
	for i := range inflight {
		id := "bench-" + strconv.Itoa(i)
		g := b.grants[store.ShardOf(id, uint32(shards))]
		if _, err := st.Create(ctx, g, id, store.Record{Kind: "bench"}); err != nil {
			return nil, err
		}
		b.ids = append(b.ids, id)
	}
	return b, nil
}

// initAsAdmin makes the bench's cluster (shards shards, one partition, storage) as the admin of
// auth directory dir, on the server opt reaches with the options copts (TLS).
func initAsAdmin(ctx context.Context, opt nats.Option, copts []nats.Option, dir string, storage jetstream.StorageType, shards int) error {
	aopts, err := auth.ClientOptions(auth.CredsFile(dir, string(auth.Admin)), nil)
	if err != nil {
		return err
	}
	nc, err := natskv.Connect("", append(append(append([]nats.Option{}, copts...), aopts...), opt)...)
	if err != nil {
		return err
	}
	defer nc.Close()
	_, err = clusterinit.Init(ctx, nc, clusterinit.Options{Shards: uint32(shards), Partitions: 1, Storage: storage})
	return err
}

func (b *benchStore) close() {
	b.st.Close()
	b.nc.Close()
}

// loop runs n closed-loop writers for d: each sends a write, waits for its outcome, records the
// latency and sends the next, so n writes are in flight at any time.
func loop(name string, n int, d time.Duration, p *progress, write func(i int) error) writeResult {
	h := hdr.New(7)
	// A warm-up second first: connections, buffers and the server's per-subject state settle.
	warm := time.Now().Add(time.Second)
	var errs atomic.Uint64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := warm
	end := start.Add(d)
	cpu0 := make(chan time.Duration, 1)
	go func() { time.Sleep(time.Until(warm)); cpu0 <- processCPU() }()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				t := time.Now()
				if err := write(i); err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					time.Sleep(time.Millisecond)
					continue
				}
				if t.After(warm) {
					h.Record(time.Since(t))
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for tk := time.NewTicker(time.Second); ; {
		select {
		case <-tk.C:
			el := time.Since(start)
			if el < 0 {
				p.line("%s: warming up", name)
				continue
			}
			p.line("%s: %4.1fs/%.0fs  %9.0f writes/s  p99 %s ms", name, el.Seconds(), d.Seconds(), float64(h.Count())/el.Seconds(), ms(h.Quantile(0.99)))
			continue
		case <-done:
			tk.Stop()
		}
		break
	}
	p.done()
	el := time.Since(start).Seconds()
	cpu := processCPU() - <-cpu0
	r := writeResult{Method: name, InFlight: n, Seconds: el, WritesPerS: float64(h.Count()) / el,
		P50: h.Quantile(0.5), P99: h.Quantile(0.99), Max: h.Max(), Errors: errs.Load()}
	if h.Count() > 0 {
		r.CPUPerWrite = cpu / time.Duration(h.Count())
	}
	if e, ok := firstErr.Load().(string); ok {
		r.FirstError = e
	}
	return r
}

// rawCAS is the baseline: a publish to the same stream that the server stores only if the key's
// own last sequence is as expected (what kv.Update sends), pipelined like the fenced write.
func rawCAS(b *benchStore, data []byte, n int) func(i int) error {
	last := make([]uint64, n)
	return func(i int) error {
		m := nats.NewMsg("$KV." + b.bucket + ".inst.raw." + strconv.Itoa(i)) // a record key of the layout: node credentials may write only those
		m.Data = data
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(last[i], 10))
		fut, err := b.js.PublishMsgAsync(m)
		if err != nil {
			return err
		}
		select {
		case ack := <-fut.Ok():
			last[i] = ack.Sequence
			return nil
		case err := <-fut.Err():
			return err
		}
	}
}

// rawFenced publishes the fenced write's headers directly, without the store adapter: the
// server's own cost of the fence check on another subject.
func rawFenced(b *benchStore, shards int, data []byte) func(i int) error {
	return func(i int) error {
		id := b.ids[i]
		g := b.grants[store.ShardOf(id, uint32(shards))]
		m := nats.NewMsg("$KV." + b.bucket + "." + store.InstanceKey(g.Shard, id))
		m.Data = data
		tok := strconv.FormatUint(g.Token, 10)
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, tok)
		m.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, "$KV."+b.bucket+"."+store.ShardKey(g.Shard))
		fut, err := b.js.PublishMsgAsync(m)
		if err != nil {
			return err
		}
		select {
		case <-fut.Ok():
			return nil
		case err := <-fut.Err():
			return err
		}
	}
}

// fenced is tickfence's write path: store.WriteAsync, fenced by the shard's token.
func fenced(b *benchStore, shards int, rec store.Record) func(i int) error {
	dones := make([]chan error, len(b.ids))
	for i := range dones {
		dones[i] = make(chan error, 1)
	}
	return func(i int) error {
		id := b.ids[i]
		g := b.grants[store.ShardOf(id, uint32(shards))]
		b.st.WriteAsync(g, id, rec, func(_ uint64, err error) { dones[i] <- err })
		return <-dones[i]
	}
}

func benchRecord(payload int) (store.Record, []byte) {
	state := make([]byte, payload)
	for i := range state {
		state[i] = byte(i * 7)
	}
	rec := store.Record{Kind: "bench", Tick: 123456, State: state}
	for i := 0; i < 16; i++ {
		rec.RememberRequest(store.Request{ID: "req-" + strconv.Itoa(i), Fingerprint: uint64(i), Result: []byte{0x81, 0xa2, 'o', 'k', 0xc3}}, 1<<20)
	}
	enc, _ := store.EncodeRecord(rec)
	return rec, enc
}

// processCPU is the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func cpuRatio(a, b writeResult) float64 {
	if b.CPUPerWrite == 0 {
		return 0
	}
	return float64(a.CPUPerWrite) / float64(b.CPUPerWrite)
}

// security is how the bench's connection reaches its server: in-process or over TCP on
// loopback, with TLS, with the roles enforced (node credentials).
type security struct{ auth, tcp, tls bool }

func writesR1(profile string, storage jetstream.StorageType, syncAll bool, sec security, inflight, shards, payload int, d time.Duration, p *progress) ([]writeResult, error) {
	dir, err := os.MkdirTemp("", "tickbench-js-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	cfg := natsserver.Config{DataDir: filepath.Join(dir, "js"), Sync: syncAll}
	if sec.auth {
		cfg.AuthDir = filepath.Join(dir, "auth")
		if _, err := auth.Init(cfg.AuthDir); err != nil {
			return nil, err
		}
	}
	var copts []nats.Option
	if sec.tcp {
		cfg.Listen = "127.0.0.1:0"
	}
	if sec.tls {
		ca := filepath.Join(dir, "ca")
		if _, err := auth.InitTLS(ca, nil); err != nil {
			return nil, err
		}
		cfg.TLSCert, cfg.TLSKey = filepath.Join(ca, auth.TLSCert), filepath.Join(ca, auth.TLSCertKey)
		topts, err := auth.TLSClientOptions(filepath.Join(ca, auth.TLSCA), "", "")
		if err != nil {
			return nil, err
		}
		copts = append(copts, topts...)
	}
	srv, err := natsserver.Start(cfg)
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	ctx := context.Background()
	opt := srv.ConnectOption()
	if sec.tcp {
		url := srv.ClientURL()
		opt = func(o *nats.Options) error { o.Servers = []string{url}; return nil }
	}
	if sec.auth {
		// The roles are enforced: the admin makes the cluster (tickctl cluster init); the bench
		// writes as a node, which makes no storage.
		if err := initAsAdmin(ctx, opt, copts, cfg.AuthDir, storage, shards); err != nil {
			return nil, err
		}
		aopts, err := auth.ClientOptions(auth.CredsFile(cfg.AuthDir, string(auth.Node)), nil)
		if err != nil {
			return nil, err
		}
		copts = append(copts, aopts...)
	}
	if len(copts) > 0 {
		copts = append(copts, opt)
		opt = func(o *nats.Options) error {
			for _, f := range copts {
				if err := f(o); err != nil {
					return err
				}
			}
			return nil
		}
	}
	b, err := openBench(ctx, opt, storage, 1, inflight, shards)
	if err != nil {
		return nil, err
	}
	defer b.close()
	rec, enc := benchRecord(payload)
	var rows []writeResult
	add := func(r writeResult) {
		r.Profile, r.Shards, r.PayloadSize = profile, shards, len(enc)
		rows = append(rows, r)
	}
	add(loop(profile+" raw", inflight, d, p, rawCAS(b, enc, inflight)))
	rows[len(rows)-1].Method = "raw CAS publish, pipelined"
	add(loop(profile+" fence headers", inflight, d, p, rawFenced(b, shards, enc)))
	rows[len(rows)-1].Method = "raw fenced publish, pipelined"
	add(loop(profile+" fenced", inflight, d, p, fenced(b, shards, rec)))
	rows[len(rows)-1].Method = "fenced WriteAsync, pipelined"
	// What one goroutine gets from the synchronous KV API.
	kv, err := b.js.KeyValue(ctx, b.bucket)
	if err != nil {
		return nil, err
	}
	var rev uint64
	if rev, err = kv.Create(ctx, "inst.sync.0", enc); err != nil {
		return nil, err
	}
	add(loop(profile+" kv.Update", 1, min(d, 3*time.Second), p, func(int) error {
		r, err := kv.Update(ctx, "inst.sync.0", enc, rev)
		rev = r
		return err
	}))
	rows[len(rows)-1].Method = "kv.Update, one goroutine"
	return rows, nil
}

// writesR3 compares, on three in-process servers with R3 buckets, pipelined single fenced writes
// (the server answers 10164 to a second concurrent write of one shard; the adapter retries) with
// one fenced write in flight per shard.
func writesR3(inflight, shards, payload int, d time.Duration, p *progress) ([]writeResult, error) {
	p.line("R3: starting three servers")
	srvs, stop, err := startCluster(3)
	if err != nil {
		return nil, err
	}
	defer stop()
	ctx := context.Background()
	b, err := openBench(ctx, srvs[0].ConnectOption(), jetstream.FileStorage, 3, inflight, shards)
	if err != nil {
		return nil, err
	}
	defer b.close()
	rec, enc := benchRecord(payload)
	var rows []writeResult
	add := func(method string, r writeResult) {
		r.Profile, r.Method, r.Shards, r.PayloadSize = "R3 file", method, shards, len(enc)
		rows = append(rows, r)
	}
	add("raw CAS publish, pipelined", loop("R3 raw", inflight, d, p, rawCAS(b, enc, inflight)))
	add("fenced WriteAsync, pipelined", loop("R3 fenced", inflight, d, p, fenced(b, shards, rec)))
	// One write in flight per shard: each shard's writer takes its instances in turn.
	perShard := map[uint32][]int{}
	for i, id := range b.ids {
		s := store.ShardOf(id, uint32(shards))
		perShard[s] = append(perShard[s], i)
	}
	var owners [][]int
	for _, is := range perShard {
		owners = append(owners, is)
	}
	w := fenced(b, shards, rec)
	turn := make([]int, len(owners))
	add("fenced, one in flight per shard", loop("R3 fenced/shard", len(owners), d, p, func(o int) error {
		is := owners[o]
		turn[o]++
		return w(is[turn[o]%len(is)])
	}))
	return rows, nil
}

// startCluster starts three clustered in-process servers; stop stops them and removes their data.
func startCluster(n int) (srvs []*natsserver.Server, stop func(), err error) {
	dir, err := os.MkdirTemp("", "tickbench-r3-")
	if err != nil {
		return nil, nil, err
	}
	srvs, err = natsserver.StartCluster(n, dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return srvs, func() {
		for _, s := range srvs {
			s.Stop()
		}
		os.RemoveAll(dir)
	}, nil
}
