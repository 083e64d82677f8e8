package auth_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickfence/tickfence"
	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/actor/dungeon"
	"github.com/tickfence/tickfence/auth"
	"github.com/tickfence/tickfence/clusterinit"
	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/natskv"
)

// initCluster is what an admin runs before the first node starts on a server enforcing the
// roles of auth directory dir (tickctl cluster init, DESIGN 9: only admin shapes storage).
func initCluster(t testing.TB, dir, url string, shards uint32) clusterinit.Result {
	t.Helper()
	opts, err := auth.ClientOptions(auth.CredsFile(dir, string(auth.Admin)), nil)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := natskv.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := clusterinit.Init(ctx, nc, clusterinit.Options{Shards: shards})
	if err != nil {
		t.Fatalf("cluster init as admin: %v", err)
	}
	return res
}

// createStream asks the JetStream API for a stream as c (a refused request gets no answer).
func createStream(c *conn, cfg jetstream.StreamConfig) func() error {
	return func() error {
		js, err := jetstream.New(c.Conn)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err = js.CreateStream(ctx, cfg)
		return err
	}
}

// noStream wants stream name not to exist.
func (e *env) noStream(t *testing.T, name string) {
	t.Helper()
	if _, err := e.js.Stream(context.Background(), name); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("stream %s after the attempt: %v, want none", name, err)
	}
}

// TestNodeIsDataPlaneOnly: a node credential (a stolen one) tries what made it an admin: a stream
// whose republish lands in subjects it may not publish (a bucket's deletion through the
// JetStream API, an operator's drain key), a stream capturing every command, a purge of a record
// by a roll-up header, the blobs bucket emptied by one, the cluster record, a leader stepdown, the effects service's consumer.
// The server refuses each and nothing changes; the node's own work goes on.
func TestNodeIsDataPlaneOnly(t *testing.T) {
	e := newEnv(t)
	_, nd := e.connect(t, "node")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	data := store.DataBucket(1, 0)
	instKey := store.InstanceKey(e.shard, "d1")

	t.Run("republish into the JetStream API", func(t *testing.T) {
		// A stream of the admin's, as the target.
		if _, err := e.js.CreateStream(ctx, jetstream.StreamConfig{Name: "victim", Subjects: []string{"victim.>"}}); err != nil {
			t.Fatal(err)
		}
		// The node may publish frames: a stream on a frame subject, republishing each into the
		// deletion of the victim.
		src := wire.FrameSubject(9999, "evil", "")
		refused(t, nd, "node creates a stream republishing into $JS.API.STREAM.DELETE", createStream(nd, jetstream.StreamConfig{
			Name: "republish-delete", Subjects: []string{src}, Storage: jetstream.MemoryStorage,
			RePublish: &jetstream.RePublish{Source: src, Destination: "$JS.API.STREAM.DELETE.victim"}}))
		_ = nd.Publish(src, []byte("{}"))
		_ = nd.Flush()
		time.Sleep(200 * time.Millisecond)
		e.noStream(t, "republish-delete")
		if _, err := e.js.Stream(ctx, "victim"); err != nil {
			t.Errorf("the victim stream after the attempt: %v", err)
		}
	})
	t.Run("republish into a control key", func(t *testing.T) {
		src := wire.FrameSubject(9999, "evil2", "")
		refused(t, nd, "node creates a stream republishing into drain.n2", createStream(nd, jetstream.StreamConfig{
			Name: "republish-drain", Subjects: []string{src}, Storage: jetstream.MemoryStorage,
			RePublish: &jetstream.RePublish{Source: src, Destination: "$KV." + store.ControlBucket + "." + store.DrainKey("n2")}}))
		_ = nd.Publish(src, []byte(evil))
		_ = nd.Flush()
		time.Sleep(200 * time.Millisecond)
		e.noStream(t, "republish-drain")
		e.notStored(t, store.ControlBucket, store.DrainKey("n2"))
		if _, err := e.kv[store.ControlBucket].Get(ctx, store.DrainKey("n2")); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Errorf("drain.n2 after the attempt: %v, want none", err)
		}
	})
	t.Run("capture the commands", func(t *testing.T) {
		refused(t, nd, "node creates a stream on tickfence.cmd.>", createStream(nd, jetstream.StreamConfig{
			Name: "capture", Subjects: []string{"tickfence.cmd.>"}, Storage: jetstream.MemoryStorage}))
		e.noStream(t, "capture")
		// Commands are answered by their owner, not by JetStream (an acknowledgement is no answer:
		// "malformed reply").
		gw, _ := e.connect(t, "gateway")
		for i := range 5 {
			r, err := natscmd.NewClient(gw, shards).SendMap(ctx, "d1", fmt.Sprintf("capture-status-%d", i), map[string]any{"type": "status"})
			if err != nil || !r.OK {
				t.Fatalf("a gateway's command after the attempt: %+v %v", r, err)
			}
		}
	})
	t.Run("purge a record by a roll-up", func(t *testing.T) {
		before, err := e.kv[data].Get(ctx, instKey)
		if err != nil {
			t.Fatal(err)
		}
		s, err := e.js.Stream(ctx, "KV_"+data)
		if err != nil {
			t.Fatal(err)
		}
		js, err := jetstream.New(nd.Conn)
		if err != nil {
			t.Fatal(err)
		}
		for _, rollup := range []string{"sub", "all"} {
			// What a KV Purge sends: allowed by the node's subject permissions (it writes records),
			// refused by the stream, which takes no roll-up.
			m := &nats.Msg{Subject: "$KV." + data + "." + instKey, Header: nats.Header{"KV-Operation": {"PURGE"}, "Nats-Rollup": {rollup}}}
			_, err := js.PublishMsg(ctx, m)
			var ae *jetstream.APIError
			if !errors.As(err, &ae) || !strings.Contains(ae.Description, "rollup") {
				t.Errorf("a roll-up (%s) of d1's record: %v, want refused (rollup not permitted)", rollup, err)
			}
		}
		after, err := e.kv[data].Get(ctx, instKey)
		if err != nil {
			t.Fatalf("d1 after the purge attempts: %v", err)
		}
		if after.Revision() < before.Revision() || after.Operation() != jetstream.KeyValuePut || len(after.Value()) == 0 {
			t.Errorf("d1 after the purge attempts: revision %d (was %d), %v, %d bytes", after.Revision(), before.Revision(), after.Operation(), len(after.Value()))
		}
		if in, err := s.Info(ctx, jetstream.WithSubjectFilter("$KV."+data+".>")); err != nil || in.State.Msgs < 2 {
			t.Errorf("the data bucket after the purge attempts: %v, %+v", err, in)
		}
		if s.CachedInfo().Config.AllowRollup {
			t.Error("the data bucket allows roll-ups")
		}
	})
	t.Run("empty the control bucket by a roll-up", func(t *testing.T) {
		// The node's own lease and the operator's drain key are subjects each may publish: a
		// roll-up of all there would purge the cluster record, every lease and every placement
		// input. The control bucket takes no roll-up (its leases expire without delete markers).
		op, _ := e.connect(t, "operator")
		if _, err := e.kv[store.ControlBucket].Put(ctx, store.DrainKey("n9"), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		for _, a := range []struct {
			who  string
			nc   *nats.Conn
			subj string
		}{
			{"node", nd.Conn, "$KV." + store.ControlBucket + "." + store.NodeKey("n1")},
			{"operator", op, "$KV." + store.ControlBucket + "." + store.DrainKey("n9")},
		} {
			js, err := jetstream.New(a.nc)
			if err != nil {
				t.Fatal(err)
			}
			for _, rollup := range []string{"sub", "all"} {
				m := &nats.Msg{Subject: a.subj, Header: nats.Header{"KV-Operation": {"PURGE"}, "Nats-Rollup": {rollup}}}
				_, err := js.PublishMsg(ctx, m)
				var ae *jetstream.APIError
				if !errors.As(err, &ae) || !strings.Contains(ae.Description, "rollup") {
					t.Errorf("%s rolls up (%s) the control bucket on %s: %v, want refused (rollup not permitted)", a.who, rollup, a.subj, err)
				}
			}
		}
		for _, k := range []string{store.ClusterKey, store.DrainKey("n9")} {
			if _, err := e.kv[store.ControlBucket].Get(ctx, k); err != nil {
				t.Errorf("%s after the roll-up attempts: %v", k, err)
			}
		}
		s, err := e.js.Stream(ctx, "KV_"+store.ControlBucket)
		if err != nil {
			t.Fatal(err)
		}
		if cfg := s.CachedInfo().Config; cfg.AllowRollup || !cfg.AllowMsgTTL {
			t.Errorf("the control bucket: roll-ups %v, per-message TTL %v; want no roll-ups, TTLs", cfg.AllowRollup, cfg.AllowMsgTTL)
		}
	})
	t.Run("empty the blobs bucket by a roll-up", func(t *testing.T) {
		// A node uploads large states (it must: the record points at them), so it may publish on
		// the blobs bucket's subjects; an Object Store's stream takes roll-ups (its put rolls its
		// meta up), and one publish with Nats-Rollup: all would empty it. tickfence's blobs bucket
		// takes none (natskv writes each object once, without a roll-up).
		opts, err := auth.ClientOptions(auth.CredsFile(e.dir, "node"), nil)
		if err != nil {
			t.Fatal(err)
		}
		snc, err := natskv.Connect(e.url, opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer snc.Close()
		st, err := natskv.Open(snc, natskv.Options{OpenOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		big := []byte(strings.Repeat("state", 20000))
		if _, err := st.Blobs(ctx).PutBlob("d1/1-1-1", big); err != nil {
			t.Fatalf("the node uploads a blob: %v", err)
		}
		js, err := jetstream.New(nd.Conn)
		if err != nil {
			t.Fatal(err)
		}
		for _, subj := range []string{"$O." + store.BlobBucket + ".M.ZXZpbA==", "$O." + store.BlobBucket + ".C.evil"} {
			for _, rollup := range []string{"all", "sub"} {
				_, err := js.PublishMsg(ctx, &nats.Msg{Subject: subj, Header: nats.Header{"Nats-Rollup": {rollup}}})
				var ae *jetstream.APIError
				if !errors.As(err, &ae) || !strings.Contains(ae.Description, "rollup") {
					t.Errorf("node rolls up (%s) the blobs bucket on %s: %v, want refused (rollup not permitted)", rollup, subj, err)
				}
			}
		}
		refused(t, nd, "node purges the blobs bucket", request(nd, "$JS.API.STREAM.PURGE.OBJ_"+store.BlobBucket, "{}"))
		obs, err := e.js.ObjectStore(ctx, store.BlobBucket)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := obs.GetBytes(ctx, "d1/1-1-1"); err != nil || string(got) != string(big) {
			t.Errorf("the blob after the attempts: %d bytes, %v", len(got), err)
		}
		s, err := e.js.Stream(ctx, "OBJ_"+store.BlobBucket)
		if err != nil {
			t.Fatal(err)
		}
		if s.CachedInfo().Config.AllowRollup {
			t.Error("the blobs bucket allows roll-ups")
		}
	})
	t.Run("write the cluster record", func(t *testing.T) {
		before, err := e.kv[store.ControlBucket].Get(ctx, store.ClusterKey)
		if err != nil {
			t.Fatal(err)
		}
		refused(t, nd, "node puts cluster", put(nd, store.ControlBucket, store.ClusterKey))
		e.notStored(t, store.ControlBucket, store.ClusterKey)
		if after, err := e.kv[store.ControlBucket].Get(ctx, store.ClusterKey); err != nil || after.Revision() != before.Revision() {
			t.Errorf("cluster after the attempt: %v (revision %d, was %d)", err, after.Revision(), before.Revision())
		}
	})
	t.Run("shape storage", func(t *testing.T) {
		refused(t, nd, "node steps a stream's leader down", request(nd, "$JS.API.STREAM.LEADER.STEPDOWN.KV_"+data, ""))
		refused(t, nd, "node purges a bucket", request(nd, "$JS.API.STREAM.PURGE.KV_"+data, "{}"))
		refused(t, nd, "node deletes a message", request(nd, "$JS.API.STREAM.MSG.DELETE.KV_"+data, `{"seq":1}`))
		refused(t, nd, "node creates a bucket", createStream(nd, jetstream.StreamConfig{Name: "KV_tickfence-data-e2-p0",
			Subjects: []string{"$KV.tickfence-data-e2-p0.>"}, Storage: jetstream.MemoryStorage}))
		e.noStream(t, "KV_tickfence-data-e2-p0")
		refused(t, nd, "node puts a shard key in the control bucket", put(nd, store.ControlBucket, store.ShardKey(e.shard)))
		e.notStored(t, store.ControlBucket, store.ShardKey(e.shard))
		refused(t, nd, "node consumes the effects stream", request(nd, "$JS.API.CONSUMER.CREATE."+natscmd.EffectsStream+".spy",
			`{"stream_name":"`+natscmd.EffectsStream+`","config":{"name":"spy","durable_name":"spy","ack_policy":"explicit"}}`))
		refused(t, nd, "node consumes the audit stream", request(nd, "$JS.API.CONSUMER.CREATE."+auth.AuditStream+".spy",
			`{"stream_name":"`+auth.AuditStream+`","config":{"name":"spy","ack_policy":"none","deliver_subject":"tickfence.out.0.x"}}`))
	})
	// The node's own work is untouched by all this.
	gw, _ := e.connect(t, "gateway")
	if r, err := natscmd.NewClient(gw, shards).SendMap(ctx, "d1", "after", map[string]any{"type": "join", "player": "p9"}); err != nil || !r.OK {
		t.Fatalf("a command after the attacks: %+v %v", r, err)
	}
}

// effectsConsumer makes the durable consumer of an effects service (effects.creds), as
// natscmd.ConsumeEffects does, and returns its configuration as the server holds it.
func (e *env) effectsConsumer(t *testing.T, name string) jetstream.ConsumerConfig {
	t.Helper()
	fx, _ := e.connect(t, "effects")
	js, err := jetstream.New(fx)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := js.CreateOrUpdateConsumer(ctx, natscmd.EffectsStream, jetstream.ConsumerConfig{Durable: name,
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, FilterSubject: natscmd.EffectsPrefix + ".dungeon.*"})
	if err != nil {
		t.Fatalf("the effects service's consumer: %v", err)
	}
	return c.CachedInfo().Config
}

// TestObserverLeavesConsumersAlone: an observer (read only) can neither make a durable consumer on
// the effects stream, nor reconfigure or delete an effects service's; the service's consumer
// keeps its configuration.
func TestObserverLeavesConsumersAlone(t *testing.T) {
	e := newEnv(t)
	want := e.effectsConsumer(t, "loot-service")
	_, ob := e.connect(t, "observer")
	fx := natscmd.EffectsStream
	refused(t, ob, "observer creates a durable consumer on the effects stream", request(ob, "$JS.API.CONSUMER.CREATE."+fx+".spy",
		`{"stream_name":"`+fx+`","config":{"name":"spy","durable_name":"spy","ack_policy":"explicit"}}`))
	refused(t, ob, "observer creates one the old way", request(ob, "$JS.API.CONSUMER.DURABLE.CREATE."+fx+".spy",
		`{"stream_name":"`+fx+`","config":{"durable_name":"spy","ack_policy":"explicit"}}`))
	refused(t, ob, "observer reconfigures the effects service's consumer", request(ob, "$JS.API.CONSUMER.CREATE."+fx+".loot-service",
		`{"stream_name":"`+fx+`","config":{"name":"loot-service","durable_name":"loot-service","ack_policy":"none","filter_subject":"nothing"}}`))
	refused(t, ob, "observer deletes the effects service's consumer", request(ob, "$JS.API.CONSUMER.DELETE."+fx+".loot-service", ""))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.js.Consumer(ctx, fx, "spy"); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Errorf("consumer spy after the attempts: %v, want none", err)
	}
	c, err := e.js.Consumer(ctx, fx, "loot-service")
	if err != nil {
		t.Fatalf("the effects service's consumer after the attempts: %v", err)
	}
	if got := c.CachedInfo().Config; got.AckPolicy != want.AckPolicy || got.FilterSubject != want.FilterSubject {
		t.Errorf("the effects service's consumer after the attempts: %+v, want %+v", got, want)
	}
	// Deleting another's durable consumer on a bucket it may list: none is there to find (the
	// observer cannot list consumers), and the effects and audit streams are out of its reach.
	refused(t, ob, "observer lists the effects stream's consumers", request(ob, "$JS.API.CONSUMER.NAMES."+fx, "{}"))
}

// TestOperatorCannotForgeFrames: an operator (no frames, no records) aims a push consumer at a
// watched instance's frame subject. On the audit stream, whose entries it writes, the server
// refuses the consumer. On the control bucket, whose placement keys it writes, NATS cannot refuse
// it (no permission checks a deliver subject): the delivery arrives with its stored subject, and
// the watcher drops it as no frame; the real owner's frames go on.
func TestOperatorCannotForgeFrames(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gw, _ := e.connect(t, "gateway")
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	w, err := natscmd.NewClient(gw, shards).Watch(wctx, "d1")
	if err != nil {
		t.Fatal(err)
	}
	frameSubj := wire.FrameSubject(e.shard, "d1", "")
	opc, op := e.connect(t, "operator")
	refused(t, op, "operator pushes the audit stream into d1's frames", request(op, "$JS.API.CONSUMER.CREATE."+auth.AuditStream+".forge",
		fmt.Sprintf(`{"stream_name":%q,"config":{"name":"forge","ack_policy":"none","deliver_policy":"all","deliver_subject":%q}}`, auth.AuditStream, frameSubj)))
	if _, err := e.js.Consumer(ctx, auth.AuditStream, "forge"); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Errorf("consumer forge on the audit stream after the attempt: %v, want none", err)
	}
	// The control bucket: a forged frame, stamped with a grant above any owner's, as a weight.
	forged := []byte("forged")
	m := &nats.Msg{Subject: "$KV." + store.ControlBucket + "." + store.WeightKey("n9"), Data: forged, Header: nats.Header{
		wire.HeaderEpoch: {"1"}, wire.HeaderToken: {fmt.Sprint(uint64(1) << 62)}, wire.HeaderTick: {fmt.Sprint(uint64(1) << 40)}}}
	if _, err := opc.RequestMsg(m, 2*time.Second); err != nil {
		t.Fatalf("operator's weight: %v", err)
	}
	ctl := "KV_" + store.ControlBucket
	if _, err := opc.Request("$JS.API.CONSUMER.CREATE."+ctl+".forge2", fmt.Appendf(nil,
		`{"stream_name":%q,"config":{"name":"forge2","ack_policy":"none","deliver_policy":"last_per_subject","filter_subject":%q,"deliver_subject":%q}}`,
		ctl, "$KV."+store.ControlBucket+"."+store.WeightKey("n9"), frameSubj), 2*time.Second); err != nil {
		t.Fatalf("operator's push consumer on the control bucket: %v", err)
	}
	deadline := time.After(3 * time.Second)
	frames := 0
	for w.Invalid() == 0 {
		select {
		case f := <-w.C:
			frames++
			if string(f.Payload) == string(forged) {
				t.Fatalf("the watcher took the forged frame: %+v", f.FrameStamp)
			}
		case <-deadline:
			t.Fatal("the forged delivery never reached the watcher (test broken?)")
		}
	}
	// The real owner's frames still pass (a forged grant would have hidden them all).
	if r, err := natscmd.NewClient(gw, shards).SendMap(ctx, "d1", "j-after", map[string]any{"type": "join", "player": "p8"}); err != nil || !r.OK {
		t.Fatalf("join: %+v %v", r, err)
	}
	select {
	case f := <-w.C:
		if string(f.Payload) == string(forged) {
			t.Fatalf("the watcher took the forged frame: %+v", f.FrameStamp)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no frame of the owner after the forgery (%d before, %d stale, %d invalid)", frames, w.Stale(), w.Invalid())
	}
}

// TestNodeNeedsAnInitialisedCluster: on a server enforcing the roles, a node on its credentials
// makes no storage: before an admin's cluster init it fails naming the command, and the server
// holds no stream afterwards; after it, the node runs, and a second init changes nothing.
func TestNodeNeedsAnInitialisedCluster(t *testing.T) {
	dir := t.TempDir()
	adir := filepath.Join(dir, "auth")
	if _, err := auth.Init(adir); err != nil {
		t.Fatal(err)
	}
	srv, err := natsserver.Start(natsserver.Config{DataDir: filepath.Join(dir, "nats"), Listen: "127.0.0.1:0", AuthDir: adir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := tickfence.Options{Kinds: []actor.Kind{dungeon.Kind{}}, NodeID: "n1", NATS: srv.ClientURL(),
		Creds: auth.CredsFile(adir, "node"), Shards: shards}
	if n, err := tickfence.Start(ctx, opts); err == nil {
		n.Close()
		t.Fatal("a node started on a cluster nobody initialised")
	} else if !strings.Contains(err.Error(), "tickctl cluster init") || !strings.Contains(err.Error(), "admin") {
		t.Errorf("a node on an uninitialised cluster: %v; want the command to run, as admin", err)
	}
	admin, err := auth.Connect(srv.ClientURL(), auth.CredsFile(adir, "admin"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	js, _ := jetstream.New(admin)
	names := js.StreamNames(ctx)
	for name := range names.Name() {
		t.Errorf("stream %s exists after a node's start on an uninitialised cluster", name)
	}
	first := initCluster(t, adir, srv.ClientURL(), shards)
	if !first.Changed() || first.Cluster.Shards != shards || first.Cluster.Epoch != 1 {
		t.Errorf("first init: %+v", first)
	}
	n, err := tickfence.Start(ctx, opts)
	if err != nil {
		t.Fatalf("a node after cluster init: %v", err)
	}
	defer n.Close()
	res := initCluster(t, adir, srv.ClientURL(), shards)
	if res.Changed() {
		t.Errorf("a second cluster init changed something: %+v", res.Steps)
	}
	if len(res.Steps) < 6 { // control, record, data, blobs, effects, audit
		t.Errorf("second init reported %d steps: %+v", len(res.Steps), res.Steps)
	}
}
