package auth_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tickfence/tickfence"
	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/actor/dungeon"
	"github.com/tickfence/tickfence/auth"
	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/internal/syncbuf"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/store"
)

const shards = 8

// env is a server enforcing a fresh auth directory, one node on node.creds serving instance d1,
// and an admin connection that reads back what is stored.
type env struct {
	dir, url string
	kv       map[string]jetstream.KeyValue // control and data e1-p0, read as admin
	js       jetstream.JetStream
	shard    uint32               // d1's shard
	reg      *prometheus.Registry // node n1's metrics
	logs     *syncbuf.Buffer      // node n1's log (JSON lines)
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e, _ := newEnvWith(t, false)
	return e
}

// newEnvWS is newEnv with a WebSocket listener too (as tickd server --websocket with --auth); it
// returns its host:port.
func newEnvWS(t *testing.T) (*env, string) {
	t.Helper()
	return newEnvWith(t, true)
}

func newEnvWith(t *testing.T, ws bool) (*env, string) {
	t.Helper()
	dir := t.TempDir()
	adir := filepath.Join(dir, "auth")
	if _, err := auth.Init(adir); err != nil {
		t.Fatal(err)
	}
	cfg := natsserver.Config{DataDir: filepath.Join(dir, "nats"), Listen: "127.0.0.1:0", AuthDir: adir}
	if ws {
		cfg.WebSocket = "127.0.0.1:0"
	}
	srv, err := natsserver.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	e := &env{dir: adir, url: srv.ClientURL(), kv: map[string]jetstream.KeyValue{}, shard: store.ShardOf("d1", shards),
		reg: prometheus.NewRegistry(), logs: &syncbuf.Buffer{}}
	initCluster(t, adir, e.url, shards) // as admin: the node makes no storage (dataplane_test.go)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := tickfence.Start(ctx, tickfence.Options{Kinds: []actor.Kind{dungeon.Kind{FrameEvery: 1}}, NodeID: "n1", NATS: e.url,
		Creds: auth.CredsFile(adir, "node"), Shards: shards, Registerer: e.reg, Logger: slog.New(slog.NewJSONHandler(e.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	gw, _ := e.connect(t, "gateway")
	if r, err := natscmd.NewClient(gw, shards).SendMap(ctx, "d1", "c1", map[string]any{"type": "create", "kind": "dungeon", "boss_hp": 100}); err != nil || !r.OK {
		t.Fatalf("gateway creates d1: %+v %v", r, err)
	}
	admin, _ := e.connect(t, "admin")
	if e.js, err = jetstream.New(admin); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{store.ControlBucket, store.DataBucket(1, 0)} {
		if e.kv[b], err = e.js.KeyValue(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	var wsHost string
	if ws {
		wsHost = strings.TrimPrefix(srv.WebSocketURL(), "ws://")
	}
	return e, wsHost
}

// conn is a client connection and the permission violations the server sent it.
type conn struct {
	*nats.Conn
	mu   sync.Mutex
	errs []error
}

func (c *conn) violations() []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := c.errs
	c.errs = nil
	return v
}

// connect connects as the user of name.creds in the auth directory.
func (e *env) connect(t *testing.T, name string) (*nats.Conn, *conn) {
	t.Helper()
	opts, err := auth.ClientOptions(auth.CredsFile(e.dir, name), nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &conn{}
	opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		c.mu.Lock()
		c.errs = append(c.errs, err)
		c.mu.Unlock()
	}))
	nc, err := nats.Connect(e.url, opts...)
	if err != nil {
		t.Fatalf("connect as %s: %v", name, err)
	}
	t.Cleanup(nc.Close)
	c.Conn = nc
	return nc, c
}

// refused runs attempt on c and wants the server to answer it with a permissions violation.
func refused(t *testing.T, c *conn, what string, attempt func() error) {
	t.Helper()
	c.violations()
	err := attempt()
	_ = c.Flush()
	deadline := time.Now().Add(2 * time.Second)
	for ; time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, v := range append(c.violations(), err) {
			if v != nil && (errors.Is(v, nats.ErrPermissionViolation) || strings.Contains(strings.ToLower(v.Error()), "permissions violation")) {
				return
			}
		}
	}
	t.Errorf("%s: not refused by the server (attempt's error: %v)", what, err)
}

const evil = "evil"

// notStored wants key of bucket not to hold the attacker's value.
func (e *env) notStored(t *testing.T, bucket, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, err := e.kv[bucket].Get(ctx, key)
	if err == nil && string(v.Value()) == evil {
		t.Errorf("%s %s holds the attacker's write (revision %d)", bucket, key, v.Revision())
	} else if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("read back %s %s: %v", bucket, key, err)
	}
}

// put publishes evil on a KV key's subject as a request (what a JetStream put is on the wire).
func put(c *conn, bucket, key string) func() error {
	return func() error {
		_, err := c.Request("$KV."+bucket+"."+key, []byte(evil), 500*time.Millisecond)
		return err
	}
}

func request(c *conn, subj, body string) func() error {
	return func() error {
		_, err := c.Request(subj, []byte(body), 500*time.Millisecond)
		return err
	}
}

// subscribeSees subscribes to subj and returns a function counting what it received.
func subscribe(c *conn, subj string, got *int, mu *sync.Mutex) func() error {
	return func() error {
		_, err := c.Subscribe(subj, func(*nats.Msg) { mu.Lock(); *got++; mu.Unlock() })
		return err
	}
}

// TestGatewayCannotBreakIn: a gateway's credential tries every write and read beyond commands and
// frames; the server refuses each, and nothing it tried is stored.
func TestGatewayCannotBreakIn(t *testing.T) {
	e := newEnv(t)
	_, gw := e.connect(t, "gateway")
	data := store.DataBucket(1, 0)
	shardKey, instKey := store.ShardKey(e.shard), store.InstanceKey(e.shard, "d1")
	t.Run("put shard", func(t *testing.T) {
		refused(t, gw, "put "+shardKey, put(gw, data, shardKey))
		e.notStored(t, data, shardKey)
	})
	t.Run("put instance", func(t *testing.T) {
		refused(t, gw, "put "+instKey, put(gw, data, instKey))
		e.notStored(t, data, instKey)
	})
	t.Run("put cluster", func(t *testing.T) {
		refused(t, gw, "put cluster", put(gw, store.ControlBucket, store.ClusterKey))
		e.notStored(t, store.ControlBucket, store.ClusterKey)
	})
	t.Run("put control keys", func(t *testing.T) {
		for _, k := range []string{store.DrainKey("n1"), store.PinKey(e.shard), store.WeightKey("n1"), store.MoveKey(e.shard),
			store.NodeKey("n1"), "leader", store.RestoreKey} {
			refused(t, gw, "put "+k, put(gw, store.ControlBucket, k))
			e.notStored(t, store.ControlBucket, k)
		}
	})
	t.Run("upload blob", func(t *testing.T) {
		refused(t, gw, "$O.tickfence-blobs.M.x", request(gw, "$O.tickfence-blobs.M.x", evil))
	})
	t.Run("delete bucket", func(t *testing.T) {
		refused(t, gw, "delete bucket", request(gw, "$JS.API.STREAM.DELETE.KV_"+store.ControlBucket, ""))
		if _, err := e.js.KeyValue(context.Background(), store.ControlBucket); err != nil {
			t.Errorf("control bucket after the attempt: %v", err)
		}
	})
	t.Run("create consumer", func(t *testing.T) {
		stream := "KV_" + data
		refused(t, gw, "create consumer", request(gw, "$JS.API.CONSUMER.CREATE."+stream+".spy",
			`{"stream_name":"`+stream+`","config":{"name":"spy","deliver_policy":"all","ack_policy":"none","deliver_subject":"_INBOX.gateway.spy"}}`))
		if _, err := e.js.Consumer(context.Background(), stream, "spy"); !errors.Is(err, jetstream.ErrConsumerNotFound) {
			t.Errorf("consumer spy after the attempt: %v", err)
		}
	})
	t.Run("publish JetStream API", func(t *testing.T) {
		refused(t, gw, "$JS.API.INFO", request(gw, "$JS.API.INFO", ""))
		refused(t, gw, "$JS.API.STREAM.PURGE", request(gw, "$JS.API.STREAM.PURGE.KV_"+data, ""))
		refused(t, gw, "direct get", request(gw, "$JS.API.DIRECT.GET.KV_"+data+".$KV."+data+"."+instKey, ""))
	})
	t.Run("subscribe KV", func(t *testing.T) {
		var mu sync.Mutex
		got := 0
		refused(t, gw, "subscribe $KV.>", subscribe(gw, "$KV.>", &got, &mu))
		time.Sleep(300 * time.Millisecond) // the node writes leases and checkpoints meanwhile
		mu.Lock()
		defer mu.Unlock()
		if got > 0 {
			t.Errorf("the gateway received %d KV writes", got)
		}
	})
	t.Run("subscribe object store and effects", func(t *testing.T) {
		var mu sync.Mutex
		got := 0
		refused(t, gw, "subscribe $O.>", subscribe(gw, "$O.>", &got, &mu))
		refused(t, gw, "subscribe tickfence.fx.>", subscribe(gw, "tickfence.fx.>", &got, &mu))
		refused(t, gw, "subscribe commands", subscribe(gw, "tickfence.cmd.>", &got, &mu))
	})
	t.Run("another gateway's inbox", func(t *testing.T) {
		if _, err := auth.NewUser(e.dir, auth.Gateway, "gateway-2"); err != nil {
			t.Fatal(err)
		}
		_, gw2 := e.connect(t, "gateway-2")
		var mu sync.Mutex
		got := 0
		refused(t, gw2, "subscribe _INBOX.gateway.>", subscribe(gw2, auth.InboxPrefix("gateway")+".>", &got, &mu))
		refused(t, gw2, "subscribe _INBOX.>", subscribe(gw2, "_INBOX.>", &got, &mu))
		// gateway's own commands are still answered, and gateway-2 saw none of the replies.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if r, err := natscmd.NewClient(gw.Conn, shards).SendMap(ctx, "d1", "j1", map[string]any{"type": "join", "player": "p1"}); err != nil || !r.OK {
			t.Fatalf("gateway's own command: %+v %v", r, err)
		}
		mu.Lock()
		defer mu.Unlock()
		if got > 0 {
			t.Errorf("gateway-2 received %d of gateway's replies", got)
		}
		// gateway-2's own replies work too.
		c2 := natscmd.NewClient(gw2.Conn, shards)
		c2.Player = "gateway-2" // a player's credential: its own subjects
		if r, err := c2.SendMap(ctx, "d1", "j2", map[string]any{"type": "join", "player": "gateway-2"}); err != nil || !r.OK {
			t.Fatalf("gateway-2's own command: %+v %v", r, err)
		}
	})
}

// TestObserverWritesNothing: an observer's every write is refused and not stored.
func TestObserverWritesNothing(t *testing.T) {
	e := newEnv(t)
	_, ob := e.connect(t, "observer")
	data := store.DataBucket(1, 0)
	for _, k := range []struct{ bucket, key string }{
		{data, store.ShardKey(e.shard)}, {data, store.InstanceKey(e.shard, "d1")}, {store.ControlBucket, store.ClusterKey},
		{store.ControlBucket, store.DrainKey("n1")}, {store.ControlBucket, store.MoveKey(e.shard)}, {store.ControlBucket, store.PinKey(e.shard)},
		{store.ControlBucket, store.WeightKey("n1")}, {store.ControlBucket, store.NodeKey("n1")}, {store.ControlBucket, "leader"},
	} {
		refused(t, ob, "observer put "+k.key, put(ob, k.bucket, k.key))
		e.notStored(t, k.bucket, k.key)
	}
	refused(t, ob, "observer command", request(ob, "tickfence.cmd.0.d1", `{"type":"end"}`))
	refused(t, ob, "observer delete bucket", request(ob, "$JS.API.STREAM.DELETE.KV_"+data, ""))
	refused(t, ob, "observer purge", request(ob, "$JS.API.STREAM.PURGE.KV_"+data, ""))
	refused(t, ob, "observer blob upload", request(ob, "$O.tickfence-blobs.M.x", evil))
	var mu sync.Mutex
	got := 0
	refused(t, ob, "observer subscribe $KV.>", subscribe(ob, "$KV.>", &got, &mu))
	refused(t, ob, "observer subscribe commands", subscribe(ob, "tickfence.cmd.>", &got, &mu))
	refused(t, ob, "observer subscribe another's inbox", subscribe(ob, auth.InboxPrefix("gateway")+".>", &got, &mu))
}

// TestOperatorCannotWriteRecords: an operator writes placement inputs but never an instance
// record, a shard assignment, the cluster record or a lease.
func TestOperatorCannotWriteRecords(t *testing.T) {
	e := newEnv(t)
	_, op := e.connect(t, "operator")
	data := store.DataBucket(1, 0)
	for _, k := range []struct{ bucket, key string }{
		{data, store.InstanceKey(e.shard, "d1")}, {data, store.InstanceKey(e.shard, "new")}, {data, store.ShardKey(e.shard)},
		{store.ControlBucket, store.ClusterKey}, {store.ControlBucket, store.NodeKey("n1")}, {store.ControlBucket, "leader"},
		{store.ControlBucket, store.RestoreKey},
	} {
		refused(t, op, "operator put "+k.key, put(op, k.bucket, k.key))
		e.notStored(t, k.bucket, k.key)
	}
	refused(t, op, "operator delete bucket", request(op, "$JS.API.STREAM.DELETE.KV_"+data, ""))
	refused(t, op, "operator blob upload", request(op, "$O.tickfence-blobs.M.x", evil))
	var mu sync.Mutex
	got := 0
	refused(t, op, "operator subscribe $KV.>", subscribe(op, "$KV.>", &got, &mu))
	refused(t, op, "operator subscribe commands", subscribe(op, "tickfence.cmd.>", &got, &mu))
	refused(t, op, "operator subscribe another's inbox", subscribe(op, auth.InboxPrefix("gateway")+".>", &got, &mu))
	// Its own placement inputs are stored.
	if _, err := op.Request("$KV."+store.ControlBucket+"."+store.WeightKey("n1"), []byte(`{"weight":1}`), 2*time.Second); err != nil {
		t.Fatalf("operator's weight: %v", err)
	}
	if v, err := e.kv[store.ControlBucket].Get(context.Background(), store.WeightKey("n1")); err != nil || string(v.Value()) != `{"weight":1}` {
		t.Fatalf("weight.n1 after the operator's put: %v", err)
	}
}

// TestNodeCannotDeleteOrPlace: a node cannot delete a bucket nor write the operator's placement
// inputs.
func TestNodeCannotDeleteOrPlace(t *testing.T) {
	e := newEnv(t)
	_, nd := e.connect(t, "node")
	refused(t, nd, "node delete bucket", request(nd, "$JS.API.STREAM.DELETE.KV_"+store.ControlBucket, ""))
	for _, k := range []string{store.DrainKey("n1"), store.PinKey(0), store.WeightKey("n1"), store.RestoreKey} {
		refused(t, nd, "node put "+k, put(nd, store.ControlBucket, k))
		e.notStored(t, store.ControlBucket, k)
	}
}

// TestUnauthenticatedRefused: no credentials, or credentials of another auth directory, cannot
// connect.
func TestUnauthenticatedRefused(t *testing.T) {
	e := newEnv(t)
	if nc, err := nats.Connect(e.url); err == nil {
		nc.Close()
		t.Fatal("a client without credentials connected")
	} else if !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Errorf("without credentials: %v, want an authorization violation", err)
	}
	other := filepath.Join(t.TempDir(), "other")
	if _, err := auth.Init(other); err != nil {
		t.Fatal(err)
	}
	opts, err := auth.ClientOptions(auth.CredsFile(other, "admin"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if nc, err := nats.Connect(e.url, opts...); err == nil {
		nc.Close()
		t.Fatal("credentials of another operator connected")
	}
}

// TestEffectsConsumer: a game's effect consumer (effects.creds) receives and acknowledges the
// effects of a kill through a durable consumer of its own, and is refused every write, every
// command and every read beyond the effects stream.
func TestEffectsConsumer(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gw, _ := e.connect(t, "gateway")
	client := natscmd.NewClient(gw, shards)
	if r, err := client.SendMap(ctx, "d1", "j1", map[string]any{"type": "join", "player": "p1"}); err != nil || !r.OK {
		t.Fatalf("join: %+v %v", r, err)
	}
	fxConn, fx := e.connect(t, "effects")
	got := make(chan natscmd.EffectMsg, 16)
	cctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- natscmd.ConsumeEffects(cctx, fxConn, "loot-service", nil, func(_ context.Context, m natscmd.EffectMsg) error {
			got <- m
			return nil
		})
	}()
	for i := 0; ; i++ {
		r, err := client.SendMap(ctx, "d1", fmt.Sprintf("a%d", i), map[string]any{"type": "attack", "player": "p1"})
		if err != nil {
			t.Fatalf("attack: %v", err)
		}
		if !r.OK || i > 200 {
			break // the boss is dead: attacks are refused
		}
	}
	select {
	case m := <-got:
		if m.Instance != "d1" || m.Key == "" {
			t.Fatalf("effect %+v", m)
		}
	case err := <-done:
		t.Fatalf("the effects consumer stopped: %v", err)
	case <-ctx.Done():
		t.Fatal("no effect delivered to the effects consumer")
	}
	stop()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("consume: %v (violations %v)", err, fx.violations())
	}
	if v := fx.violations(); len(v) != 0 {
		t.Fatalf("the effects consumer's own work hit violations: %v", v)
	}
	data := store.DataBucket(1, 0)
	for _, k := range []struct{ bucket, key string }{
		{data, store.InstanceKey(e.shard, "d1")}, {data, store.ShardKey(e.shard)}, {store.ControlBucket, store.ClusterKey},
		{store.ControlBucket, store.DrainKey("n1")}, {store.ControlBucket, store.NodeKey("n1")}, {store.ControlBucket, store.LeaderKey},
		{store.ControlBucket, store.MoveKey(e.shard)},
	} {
		refused(t, fx, "effects put "+k.key, put(fx, k.bucket, k.key))
		e.notStored(t, k.bucket, k.key)
	}
	refused(t, fx, "effects command", request(fx, "tickfence.cmd.0.d1", `{"type":"end"}`))
	refused(t, fx, "effects read a record", request(fx, "$JS.API.DIRECT.GET.KV_"+data+".$KV."+data+"."+store.InstanceKey(e.shard, "d1"), ""))
	refused(t, fx, "effects consumer on a data stream", request(fx, "$JS.API.CONSUMER.CREATE.KV_"+data+".x", `{}`))
	refused(t, fx, "effects delete the effects stream", request(fx, "$JS.API.STREAM.DELETE."+natscmd.EffectsStream, ""))
	refused(t, fx, "effects delete a bucket", request(fx, "$JS.API.STREAM.DELETE.KV_"+data, ""))
	refused(t, fx, "effects blob upload", request(fx, "$O.tickfence-blobs.M.x", evil))
	refused(t, fx, "effects publish an effect", request(fx, "tickfence.fx.loot.d1", evil))
	var mu sync.Mutex
	n := 0
	refused(t, fx, "effects subscribe $KV.>", subscribe(fx, "$KV.>", &n, &mu))
	refused(t, fx, "effects subscribe frames", subscribe(fx, "tickfence.out.>", &n, &mu))
	refused(t, fx, "effects subscribe another's inbox", subscribe(fx, auth.InboxPrefix("gateway")+".>", &n, &mu))
}

// TestNodeCredentialOfItsOwn: a node credential issued for node n7 writes n7's lease and no other
// node's (the server refuses node.n8), and runs node n7 only: a node started as n8 with it is
// refused before it connects, naming the ID it may run as.
func TestNodeCredentialOfItsOwn(t *testing.T) {
	e := newEnv(t)
	creds, err := auth.NewUser(e.dir, auth.Node, "n7")
	if err != nil {
		t.Fatal(err)
	}
	_, n7 := e.connect(t, "n7")
	refused(t, n7, "node n7 puts node.n8", put(n7, store.ControlBucket, store.NodeKey("n8")))
	e.notStored(t, store.ControlBucket, store.NodeKey("n8"))
	refused(t, n7, "node n7 puts node.n1", put(n7, store.ControlBucket, store.NodeKey("n1")))
	e.notStored(t, store.ControlBucket, store.NodeKey("n1"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = tickfence.Start(ctx, tickfence.Options{Kinds: []actor.Kind{dungeon.Kind{}}, NodeID: "n8", NATS: e.url, Creds: creds, Shards: shards})
	if err == nil || !strings.Contains(err.Error(), "--node-id n7") {
		t.Fatalf("node n8 on n7's credential: %v; want a refusal naming n7", err)
	}
	n, err := tickfence.Start(ctx, tickfence.Options{Kinds: []actor.Kind{dungeon.Kind{}}, NodeID: "n7", NATS: e.url, Creds: creds, Shards: shards})
	if err != nil {
		t.Fatalf("node n7 on its own credential: %v", err)
	}
	n.Close()
	if v := n7.violations(); len(v) != 0 {
		t.Fatalf("violations: %v", v)
	}
}

// TestNodeCannotReconfigureStreams (found by review): a node could update any stream's
// configuration ($JS.API.STREAM.UPDATE.*, once needed to allow atomic batches on a data bucket
// after the KV API made it). A subject transform on the control bucket then turned an allowed
// shard.* publish into a write of drain.n1, and MaxMsgs=1 wiped the audit stream. Now data buckets
// are created with atomic publishes, and no node may update a stream.
func TestNodeCannotReconfigureStreams(t *testing.T) {
	e := newEnv(t)
	if _, err := auth.NewUser(e.dir, auth.Node, "n7"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opc, _ := e.connect(t, "operator")
	for i := 0; i < 3; i++ {
		if err := auth.RecordAudit(ctx, opc, "drain", auth.AuditEntry{Who: "operator", What: "drain n1"}); err != nil {
			t.Fatalf("audit: %v", err)
		}
	}
	nc, n7 := e.connect(t, "n7")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := js.Stream(ctx, "KV_"+store.ControlBucket)
	if err != nil {
		t.Fatalf("n7 reads the control stream's info: %v", err)
	}
	cfg := ctl.CachedInfo().Config
	cfg.SubjectTransform = &jetstream.SubjectTransformConfig{Source: "$KV." + store.ControlBucket + ".shard.*",
		Destination: "$KV." + store.ControlBucket + ".drain.{{wildcard(1)}}"}
	update := func(cfg jetstream.StreamConfig) func() error {
		return func() error {
			uctx, cancel := context.WithTimeout(ctx, time.Second) // a refused request gets no answer
			defer cancel()
			_, err := js.UpdateStream(uctx, cfg)
			return err
		}
	}
	refused(t, n7, "node n7 adds a subject transform to the control bucket", update(cfg))
	_, _ = nc.Request("$KV."+store.ControlBucket+".shard.n1", []byte(evil), time.Second)
	e.notStored(t, store.ControlBucket, store.DrainKey("n1"))
	for _, name := range []string{auth.AuditStream, "KV_" + store.DataBucket(1, 0)} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("info %s: %v", name, err)
		}
		cfg := s.CachedInfo().Config
		cfg.MaxMsgs, cfg.MaxBytes = 1, 1
		refused(t, n7, "node n7 shrinks "+name, update(cfg))
	}
	as, _ := e.js.Stream(ctx, auth.AuditStream)
	if in, err := as.Info(ctx); err != nil || in.State.Msgs < 3 {
		t.Errorf("the audit stream after a node's attempt: %v, %+v; want its 3 entries", err, in)
	}
	if _, err := e.kv[store.DataBucket(1, 0)].Get(ctx, store.InstanceKey(e.shard, "d1")); err != nil {
		t.Errorf("d1's record after a node's attempt: %v", err)
	}
	// The data bucket the node made allows atomic batches all the same.
	if in, err := e.js.Stream(ctx, "KV_"+store.DataBucket(1, 0)); err != nil || !in.CachedInfo().Config.AllowAtomicPublish {
		t.Errorf("data bucket without atomic publish: %v", err)
	}
}
