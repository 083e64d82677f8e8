package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/tickfence/tickfence"
	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/actor/dungeon"
	"github.com/tickfence/tickfence/auth"
	"github.com/tickfence/tickfence/client"
	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/natskv"
)

const testShards = 16

// startNode runs one node on its embedded JetStream server, listening on a loopback port, with
// the demo dungeon (a frame every tick) and the probe kind; auth, if not "", is an auth
// directory the server enforces.
func startNode(t *testing.T, authDir string) *tickfence.Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := tickfence.Start(ctx, tickfence.Options{Kinds: []actor.Kind{dungeon.Kind{FrameEvery: 1}, probeKind{}},
		NodeID: "n1", DataDir: t.TempDir(), Listen: "127.0.0.1:0", Shards: testShards, Auth: authDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n
}

func dial(t *testing.T, url string, opts ...client.Option) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// probeKind answers "numbers" with integers and floats of every msgpack width, and publishes
// frames every tick: one on topic hud-ada, ten on hud-bob.
type probeKind struct{}

func (probeKind) Name() string                                   { return "probe" }
func (probeKind) New(string, actor.Command) (actor.Logic, error) { return &probe{}, nil }
func (probeKind) Restore(_ string, b []byte) (actor.Logic, error) {
	p := &probe{}
	return p, msgpack.Unmarshal(b, p)
}

type probe struct {
	Last uint64 `msgpack:"tick"`
	actor.Frames
}

func (p *probe) Tick(tick uint64) {
	p.Last = tick
	hud, _ := msgpack.Marshal(map[string]any{"tick": tick})
	p.Publish("hud-ada", hud)
	for range 10 {
		p.Publish("hud-bob", hud)
	}
}

func (p *probe) Handle(_ uint64, c actor.Command) (any, error) {
	if c.Type != "numbers" {
		return nil, actor.Reject("unknown command %q", c.Type)
	}
	return map[string]any{
		"small": 5, "byte": 200, "wide": 70000, "neg": -3, "max": int64(math.MaxInt64),
		"huge": uint64(math.MaxInt64) + 1, "f32": float32(1.5), "f64": 2.25,
		"list": []any{1, 300, "x"}, "nested": map[string]any{"hp": 100},
	}, nil
}

func (p *probe) MarshalState() ([]byte, error) { return msgpack.Marshal(p) }

type join struct {
	Type   string `msgpack:"type"`
	Player string `msgpack:"player"`
}

type joined struct {
	Joined  string `msgpack:"joined"`
	Players int    `msgpack:"players"`
}

// TestDialLearnsTheShape (issue 35.1, 35.2): Dial with nothing but a URL reads the shard count
// from the cluster record, and Create, Send (a struct in, the result decoded into a struct or an
// any) and End reach the instance through its owner; refusals are *client.Error with their code.
func TestDialLearnsTheShape(t *testing.T) {
	n := startNode(t, "")
	c := dial(t, n.ClientURL())
	if got := c.Shards(); got != testShards {
		t.Fatalf("Shards() = %d, want %d (the cluster record's)", got, testShards)
	}
	if cl, ok := c.Cluster(); !ok || cl.Epoch != 1 || cl.Partitions != 1 {
		t.Fatalf("Cluster() = %+v, %v; want the record read, epoch 1, 1 partition", cl, ok)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Create(ctx, "d1", "dungeon", map[string]any{"boss_hp": 500}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	err := c.Create(ctx, "d1", "dungeon", nil)
	var e *client.Error
	if !errors.As(err, &e) || e.Code != client.CodeExists || client.Code(err) != client.CodeExists {
		t.Fatalf("Create of an existing instance: %v; want an *Error with code %s", err, client.CodeExists)
	}
	var j joined
	if err := c.Send(ctx, "d1", join{Type: "join", Player: "ada"}, &j); err != nil || j != (joined{"ada", 1}) {
		t.Fatalf("Send join: %+v, %v; want ada joined, 1 player", j, err)
	}
	var status any
	if err := c.Send(ctx, "d1", map[string]any{"type": "status"}, &status); err != nil {
		t.Fatal(err)
	}
	if m, _ := status.(map[string]any); m["hp"] != int64(500) || m["players"] != int64(1) || m["phase"] != "1" {
		t.Fatalf("status %#v; want hp int64(500), players int64(1), phase 1", status)
	}
	err = c.Send(ctx, "d1", join{Type: "dance", Player: "ada"}, nil)
	if client.Code(err) != client.CodeBadRequest {
		t.Fatalf("an unknown command: %v; want code bad_request", err)
	}
	// Exec: the raw reply, a refusal as a Reply.
	r, err := c.Exec(ctx, "d1", "", map[string]any{"type": "status"})
	if err != nil || !r.OK || r.Err() != nil {
		t.Fatalf("Exec: %+v, %v", r, err)
	}
	if back, err := wire.DecodeReply(r.Raw, false); err != nil || !reflect.DeepEqual(back.Result, r.Result()) {
		t.Fatalf("Raw decodes to %+v (%v); want the result %v", back.Result, err, r.Result())
	}
	// JSON text goes as JSON: answered in JSON, the result's numbers as from msgpack; a key given
	// twice is the node's to refuse (a Go decoder would have kept the "end").
	r, err = c.Exec(ctx, "d1", "", client.JSON(`{"type":"status"}`))
	if err != nil || !r.OK || !json.Valid(r.Raw) || !reflect.DeepEqual(r.Result(), status) {
		t.Fatalf("Exec of JSON: %+v, %v; want a JSON reply, result %v", r, err, status)
	}
	if err := c.Send(ctx, "d1", client.JSON(`{"type":"status","type":"end"}`), nil); client.Code(err) != client.CodeBadRequest {
		t.Fatalf("JSON with a repeated key: %v; want %s", err, client.CodeBadRequest)
	}
	if err := c.End(ctx, "d1"); err != nil {
		t.Fatalf("End: %v", err)
	}
	if err := c.Send(ctx, "d1", join{Type: "join", Player: "ada"}, nil); client.Code(err) != client.CodeUnknownInstance {
		t.Fatalf("Send after End: %v; want code %s", err, client.CodeUnknownInstance)
	}
	// A request ID of the caller's: a retransmission gets the first answer.
	if err := c.Create(ctx, "d2", "dungeon", nil); err != nil {
		t.Fatal(err)
	}
	if err := c.SendID(ctx, "d2", "j1", join{Type: "join", Player: "bob"}, &j); err != nil || j.Players != 1 {
		t.Fatalf("SendID: %+v %v", j, err)
	}
	if err := c.SendID(ctx, "d2", "j1", join{Type: "join", Player: "bob"}, &j); err != nil || j.Players != 1 {
		t.Fatalf("SendID again: %+v %v", j, err)
	}
	if err := c.SendID(ctx, "d2", "j1", join{Type: "join", Player: "cid"}, nil); client.Code(err) != client.CodeRequestIDReused {
		t.Fatalf("SendID j1 with another command: %v; want %s", err, client.CodeRequestIDReused)
	}
}

// TestResultNumbers (issue 35.4): a result's numbers come out as int64 (uint64 above MaxInt64)
// and float64 in an any, in a map and in a struct's any field, whatever width msgpack gave them;
// a struct's typed fields take them as declared.
func TestResultNumbers(t *testing.T) {
	n := startNode(t, "")
	c := dial(t, n.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Create(ctx, "p1", "probe", nil); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"small": int64(5), "byte": int64(200), "wide": int64(70000), "neg": int64(-3), "max": int64(math.MaxInt64),
		"huge": uint64(math.MaxInt64) + 1, "f32": 1.5, "f64": 2.25,
		"list": []any{int64(1), int64(300), "x"}, "nested": map[string]any{"hp": int64(100)},
	}
	numbers := map[string]any{"type": "numbers"}
	var v any
	if err := c.Send(ctx, "p1", numbers, &v); err != nil || !reflect.DeepEqual(v, any(want)) {
		t.Fatalf("into an any: %#v, %v\nwant %#v", v, err, want)
	}
	var m map[string]any
	if err := c.Send(ctx, "p1", numbers, &m); err != nil || !reflect.DeepEqual(m, want) {
		t.Fatalf("into a map: %#v, %v\nwant %#v", m, err, want)
	}
	var s struct {
		Small  int8           `msgpack:"small"`
		Byte   uint8          `msgpack:"byte"`
		Neg    int64          `msgpack:"neg"`
		Huge   uint64         `msgpack:"huge"`
		F32    float32        `msgpack:"f32"`
		Any    any            `msgpack:"wide"`
		F64    float32        `msgpack:"f64"`
		Nested map[string]any `msgpack:"nested"`
		List   []any          `msgpack:"list"`
	}
	if err := c.Send(ctx, "p1", numbers, &s); err != nil {
		t.Fatal(err)
	}
	if s.Small != 5 || s.Byte != 200 || s.Neg != -3 || s.Huge != math.MaxInt64+1 || s.F32 != 1.5 || s.F64 != 2.25 ||
		s.Any != any(int64(70000)) || s.Nested["hp"] != any(int64(100)) || !reflect.DeepEqual(s.List, want["list"]) {
		t.Fatalf("into a struct: %#v", s)
	}
	r, err := c.Exec(ctx, "p1", "", numbers)
	if err != nil || !reflect.DeepEqual(r.Result(), any(want)) {
		t.Fatalf("Reply.Result: %#v, %v", r.Result(), err)
	}
}

// TestWatchUntilTheContextEnds (issue 35.3): a watch on a context without a deadline — what
// signal.NotifyContext gives — delivers frames until the context ends, then closes its channel.
func TestWatchUntilTheContextEnds(t *testing.T) {
	n := startNode(t, "")
	c := dial(t, n.ClientURL())
	cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer ccancel()
	if err := c.Create(cctx, "d1", "dungeon", nil); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background()) // no deadline
	defer stop()
	w, err := c.Watch(ctx, "d1")
	if err != nil {
		t.Fatalf("Watch on a context without a deadline: %v", err)
	}
	for range 3 {
		select {
		case f := <-w.C:
			var frame struct {
				HP    int64  `msgpack:"hp"`
				Phase string `msgpack:"phase"`
			}
			if err := client.Decode(f.Payload, &frame); err != nil || frame.HP != dungeon.DefaultBossHP || f.Topic != "" || f.Epoch != 1 {
				t.Fatalf("frame %+v decoded %+v, %v; want the boss at %d HP, main subject, epoch 1", f, frame, err, dungeon.DefaultBossHP)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no frame in 10 s")
		}
	}
	stop()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-w.C:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("the watch's channel did not close within 10 s of its context's end")
		}
	}
}

// TestWatchDurable (issue 35.4): a durable watch shows what the fast watch shows — the boss's HP
// after an attack, at the same tick — once the write of that tick is stored, in order, and later
// than the fast watch does.
func TestWatchDurable(t *testing.T) {
	n := startNode(t, "")
	c := dial(t, n.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Create(ctx, "d3", "dungeon", nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Send(ctx, "d3", map[string]any{"type": "join", "player": "ada"}, nil); err != nil {
		t.Fatal(err)
	}
	fast, err := c.Watch(ctx, "d3")
	if err != nil {
		t.Fatal(err)
	}
	durable, err := c.WatchDurable(ctx, "d3")
	if err != nil {
		t.Fatal(err)
	}
	var hit struct {
		HP int64 `msgpack:"hp"`
	}
	sent := time.Now()
	if err := c.Send(ctx, "d3", map[string]any{"type": "attack", "player": "ada"}, &hit); err != nil {
		t.Fatal(err)
	}
	answered := time.Since(sent)
	// find returns the first frame showing the boss at hp, and when it came.
	find := func(w *client.Watch, durable bool) (client.Frame, time.Duration) {
		var last uint64
		for {
			select {
			case f := <-w.C:
				if durable && (f.Tick <= last || f.Rewound) {
					t.Fatalf("durable watch: tick %d after %d (rewound %v)", f.Tick, last, f.Rewound)
				}
				last = f.Tick
				var frame struct {
					HP int64 `msgpack:"hp"`
				}
				if err := client.Decode(f.Payload, &frame); err != nil {
					t.Fatal(err)
				}
				if frame.HP == hit.HP {
					return f, time.Since(sent)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("no frame showing the boss at %d HP in 10 s", hit.HP)
			}
		}
	}
	ff, fastAt := find(fast, false)
	df, durableAt := find(durable, true)
	if df.Tick != ff.Tick || durableAt < fastAt {
		t.Fatalf("the hit shown at tick %d after %v by the durable watch, at tick %d after %v by the fast one",
			df.Tick, durableAt, ff.Tick, fastAt)
	}
	t.Logf("attack answered after %v; its frame (tick %d, stored %d when it left) shown after %v (fast), %v (durable)",
		answered.Round(time.Millisecond), ff.Tick, ff.Stored, fastAt.Round(time.Millisecond), durableAt.Round(time.Millisecond))
}

// TestWatchChosenTopics (issue 35.3): a watch of one topic gets that topic's frames only, and the
// server sends its connection nothing else: the probe publishes ten hud-bob frames for each
// hud-ada one, and the watcher of hud-ada receives about as many messages as it is shown.
func TestWatchChosenTopics(t *testing.T) {
	n := startNode(t, "")
	c := dial(t, n.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Create(ctx, "p2", "probe", nil); err != nil {
		t.Fatal(err)
	}
	ada := dial(t, n.ClientURL()) // a connection of its own: the watch's messages only
	wctx, stop := context.WithCancel(ctx)
	before := ada.Conn().Stats().InMsgs
	w, err := ada.Watch(wctx, "p2", "hud-ada")
	if err != nil {
		t.Fatal(err)
	}
	shown := 0
	for shown < 20 {
		select {
		case f := <-w.C:
			if f.Topic != "hud-ada" {
				t.Fatalf("a frame of topic %q; want hud-ada only", f.Topic)
			}
			shown++
		case <-time.After(10 * time.Second):
			t.Fatalf("%d frames in 10 s; want 20", shown)
		}
	}
	stop()
	in := ada.Conn().Stats().InMsgs - before
	if in > 2*uint64(shown)+10 || w.Invalid() != 0 {
		t.Fatalf("the watcher's connection received %d messages (invalid %d) for %d frames shown; had hud-bob's come, about %d",
			in, w.Invalid(), shown, 11*shown)
	}
	t.Logf("%d messages received for %d hud-ada frames shown", in, shown)
}

// TestPlayerCredential (issue 35.1): on a server enforcing the roles, the smallest credential the
// player page hands out — a player's own — cannot read the cluster record: Dial says at once to
// give the shard count; with it, the client sends as that player (its own subjects) and watches
// frames. An operator's credential reads the record itself, and verifies the frames' grants.
func TestPlayerCredential(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "auth")
	if _, err := auth.Init(dir); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, dir)
	file, err := auth.NewUser(dir, auth.Gateway, "ada")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	if c, err := client.Dial(ctx, n.ClientURL(), client.Creds(file)); err == nil || !strings.Contains(err.Error(), "client.Shards") {
		if c != nil {
			c.Close()
		}
		t.Fatalf("Dial with a player's credential and no shard count: %v; want an error naming client.Shards", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Dial took %v to refuse; want at once", d)
	}
	c := dial(t, n.ClientURL(), client.Creds(file), client.Shards(testShards))
	if c.Player() != "ada" {
		t.Fatalf("Player() = %q; want ada (the credential's name)", c.Player())
	}
	if err := c.Create(ctx, "ada-run", "dungeon", map[string]any{"boss_hp": 300}); err != nil {
		t.Fatalf("a player creates a dungeon: %v", err)
	}
	var j joined
	if err := c.Send(ctx, "ada-run", join{Type: "join", Player: "ada"}, &j); err != nil || j.Joined != "ada" {
		t.Fatalf("join as ada: %+v, %v", j, err)
	}
	if err := c.Send(ctx, "ada-run", join{Type: "join", Player: "bob"}, nil); client.Code(err) != client.CodeForbidden {
		t.Fatalf("ada joins as bob: %v; want %s (the node knows the sender from the subject)", err, client.CodeForbidden)
	}
	w, err := c.Watch(ctx, "ada-run", "")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case f := <-w.C:
		var v map[string]any
		if err := client.Decode(f.Payload, &v); err != nil || v["hp"] != int64(300) {
			t.Fatalf("frame %v, %v; want hp int64(300)", v, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the player saw no frame in 10 s")
	}

	op := dial(t, n.ClientURL(), client.Creds(auth.CredsFile(dir, string(auth.Operator))), client.VerifyGrants())
	if cl, ok := op.Cluster(); !ok || cl.Shards != testShards || op.Player() != "" {
		t.Fatalf("operator: Cluster() = %+v, %v, Player %q; want the record read, %d shards, a trusted sender", cl, ok, op.Player(), testShards)
	}
	ow, err := op.Watch(ctx, "ada-run")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-ow.C:
	case <-time.After(10 * time.Second):
		t.Fatal("the operator saw no frame in 10 s (grants verified against the store)")
	}
}

// TestGivingUp (issue 35.2): the command client's semantics show through: a command given up
// after an attempt that may have been applied wraps ErrOutcomeUnknown (errors.Is, with this
// package's and natscmd's sentinel alike); one given up after certain refusals does not. An owner
// stands in for a node here (no cluster record: Shards is given), on a real embedded server.
func TestGivingUp(t *testing.T) {
	srv, err := natsserver.Start(natsserver.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	conn := func() *nats.Conn {
		nc, err := natskv.Connect("", srv.ConnectOption())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	onc := conn()
	answers := map[string][]byte{
		"unsure":  wire.EncodeReply(wire.Reply{Error: wire.Errorf(wire.CodeUnknownOutcome, "the write's outcome is unknown")}),
		"refused": wire.EncodeReply(wire.Reply{Error: wire.Errorf(wire.CodeRetry, "the shard is being rebuilt")}),
		"game":    wire.EncodeReply(wire.Reply{Error: wire.Errorf("out_of_mana", "not enough mana")}),
	}
	for id, reply := range answers {
		sub, err := onc.Subscribe(wire.Subject(store.ShardOf(id, 8), id), func(m *nats.Msg) {
			if m.Reply != "" {
				_ = m.Respond(reply)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
	}
	if err := onc.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := client.New(ctx, conn(), client.Shards(8), client.Creds("x.creds")); err == nil {
		t.Fatal("New with Creds: no error; want one (the connection is made)")
	}
	c, err := client.New(ctx, conn(), client.Shards(8), client.GiveUp(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cmd := map[string]any{"type": "cast"}
	err = c.Send(ctx, "unsure", cmd, nil)
	if !errors.Is(err, client.ErrOutcomeUnknown) || !errors.Is(err, natscmd.ErrOutcomeUnknown) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("given up after unknown_outcome answers: %v; want ErrOutcomeUnknown and DeadlineExceeded", err)
	}
	err = c.Send(ctx, "refused", cmd, nil)
	if err == nil || errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("given up after retry answers: %v; want an error without ErrOutcomeUnknown (nothing applied)", err)
	}
	err = c.Send(ctx, "game", cmd, nil)
	if client.Code(err) != "out_of_mana" || errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("a game's refusal: %v; want code out_of_mana", err)
	}
	r, err := c.Exec(ctx, "game", "", cmd)
	if err != nil || r.OK || r.Error.Code != "out_of_mana" || len(r.Raw) == 0 {
		t.Fatalf("Exec of a refused command: %+v, %v; want a Reply with the refusal, not an error", r, err)
	}
}
