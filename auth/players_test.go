package auth_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/tickfence/tickfence"
	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/auth"
	"github.com/tickfence/tickfence/client"
	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/internal/syncbuf"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
)

// room is a kind that tracks its players and shows each, every tick, a frame of its own ("for
// <player>", topic hud) besides one for everyone ("tick"); "who" answers who is in. A player
// is disconnected after 30 ticks (1.5 s) without a command or a heartbeat.
type room struct{}

func (room) Name() string { return "room" }
func (room) New(string, actor.Command) (actor.Logic, error) {
	return &roomState{}, nil
}
func (room) Restore(_ string, b []byte) (actor.Logic, error) {
	s := &roomState{}
	return s, msgpack.Unmarshal(b, s)
}

type roomState struct {
	In   []string `msgpack:"in"`
	Left []string `msgpack:"left"`
	actor.Frames
}

func (s *roomState) Join(_ uint64, who actor.Sender) error {
	s.In = append(s.In, who.Player)
	return nil
}
func (s *roomState) Leave(_ uint64, p string, why actor.LeaveReason) {
	s.In = slices.DeleteFunc(s.In, func(q string) bool { return q == p })
	s.Left = append(s.Left, p+" "+string(why))
}
func (s *roomState) PresenceTimeout() uint64 { return 30 }
func (s *roomState) Tick(tick uint64) {
	_ = s.Publish("", []byte("tick"))
	for _, p := range s.In {
		_ = s.PublishTo(p, "hud", []byte("for "+p))
	}
}
func (s *roomState) Handle(uint64, actor.Command) (any, error) {
	return map[string]any{"in": s.In, "left": s.Left}, nil
}
func (s *roomState) MarshalState() ([]byte, error) { return msgpack.Marshal(s) }

// newRoomEnv is newEnv with room r1 instead of dungeon d1.
func newRoomEnv(t *testing.T) *env {
	t.Helper()
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
	e := &env{dir: adir, url: srv.ClientURL(), shard: store.ShardOf("r1", shards), logs: &syncbuf.Buffer{}}
	initCluster(t, adir, e.url, shards)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := tickfence.Start(ctx, tickfence.Options{Kinds: []actor.Kind{room{}}, NodeID: "n1", NATS: e.url,
		Creds: auth.CredsFile(adir, "node"), Shards: shards, Logger: slog.New(slog.NewJSONHandler(e.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	gw := e.dial(t, "gateway")
	if err := gw.Create(ctx, "r1", "room", nil); err != nil {
		t.Fatalf("gateway creates r1: %v", err)
	}
	return e
}

// dial is a client.Client on the credential name.creds (a player's sends as that player).
func (e *env) dial(t *testing.T, name string, opts ...client.Option) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, e.url, append([]client.Option{client.Creds(auth.CredsFile(e.dir, name)), client.Shards(shards)}, opts...)...)
	if err != nil {
		t.Fatalf("dial as %s: %v", name, err)
	}
	t.Cleanup(c.Close)
	return c
}

// frames collects what a subscription receives, by subject.
type frames struct {
	mu  sync.Mutex
	got map[string]int
}

func (f *frames) add(m *nats.Msg) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.got == nil {
		f.got = map[string]int{}
	}
	f.got[m.Subject+" "+string(m.Data)]++
}

func (f *frames) has(part string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k := range f.got {
		if strings.Contains(k, part) {
			return true
		}
	}
	return false
}

// TestPlayerSeesOnlyItsOwnFrames: with real credentials, a frame a game makes for one player
// (PublishTo) reaches that player's client.Watch and trusted watchers, and no other player:
// every subscription another player's credential could make to reach it is refused by the
// server, and what it may subscribe carries none. A player cannot forge one either. Presence
// over NATS: a player whose client watches (heartbeats) stays in; one that went quiet is
// disconnected after the game's timeout.
func TestPlayerSeesOnlyItsOwnFrames(t *testing.T) {
	e := newRoomEnv(t)
	for _, p := range []string{"ada", "bob"} {
		if _, err := auth.NewUser(e.dir, auth.Gateway, p); err != nil {
			t.Fatal(err)
		}
	}
	ada := e.dial(t, "ada", client.Heartbeat(200*time.Millisecond))
	bob := e.dial(t, "bob", client.Heartbeat(200*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, c := range []*client.Client{ada, bob} {
		if err := c.Send(ctx, "r1", map[string]any{"type": "join"}, nil); err != nil {
			t.Fatalf("%s joins: %v", c.Player(), err)
		}
	}

	// bob watches too (its heartbeats keep him in), until he goes quiet below.
	bctx, bcancel := context.WithCancel(ctx)
	defer bcancel()
	if _, err := bob.Watch(bctx, "r1"); err != nil {
		t.Fatal(err)
	}

	// ada's Watch: the public frames and her own, never bob's.
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	w, err := ada.Watch(wctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	var public, mine int
	for deadline := time.After(3 * time.Second); public < 5 || mine < 5; {
		select {
		case f := <-w.C:
			switch {
			case f.To == "" && f.Topic == "" && string(f.Payload) == "tick":
				public++
			case f.To == "ada" && f.Topic == "hud" && string(f.Payload) == "for ada":
				mine++
			default:
				t.Fatalf("ada's watch got %+v (to %q, topic %q, %q)", f.FrameStamp, f.To, f.Topic, f.Payload)
			}
		case <-deadline:
			t.Fatalf("ada's watch: %d public frames, %d of her own in 3 s", public, mine)
		}
	}
	if _, err := ada.WatchPlayer(ctx, "r1", "bob"); err == nil {
		t.Fatal("ada's client watches bob's frames: no error")
	}

	// Everything ada's credential might subscribe to reach bob's frames is refused.
	s := e.shard
	_, raw := e.connect(t, "ada")
	var seen frames
	sub := func(subj string) func() error {
		return func() error { _, err := raw.Subscribe(subj, seen.add); return err }
	}
	for _, subj := range []string{
		">", "tickfence.>", "tickfence.to.>", "tickfence.to.*.>", "tickfence.to.*.*.>", "tickfence.to.*.*.*",
		"tickfence.to.*.*.*.*", "tickfence.to.*.*.*.>", "tickfence.to.*.*.bob", "tickfence.to.*.*.bob.>",
		wire.PrivateFrameSubject(s, "r1", "bob", ""), wire.PrivateFrameSubject(s, "r1", "bob", "hud"),
		wire.PrivateFrameSubject(s, "r1", "*", ""), wire.PrivateFrameSubject(s, "r1", "*", "hud"),
		fmt.Sprintf("tickfence.to.%d.>", s), fmt.Sprintf("tickfence.to.%d.r1.>", s),
	} {
		refused(t, raw, "ada subscribes "+subj, sub(subj))
	}
	// What she may subscribe carries the public frames and hers only.
	for _, subj := range []string{"tickfence.out.>", "tickfence.to.*.*.ada", "tickfence.to.*.*.ada.*", "tickfence.to.*.*.ada.>"} {
		if _, err := raw.Subscribe(subj, seen.add); err != nil {
			t.Fatal(err)
		}
	}
	if err := raw.Flush(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if v := raw.violations(); len(v) > 0 {
		t.Fatalf("ada's own subscriptions refused: %v", v)
	}
	if seen.has("for bob") || !seen.has("for ada") || !seen.has(" tick") {
		t.Fatalf("what ada's subscriptions received: %v; want public frames and hers, none of bob's", seen.got)
	}
	// Nor can she make one of bob's (or her own): only nodes publish frames.
	refused(t, raw, "ada publishes a frame for bob", func() error {
		return raw.Publish(wire.PrivateFrameSubject(s, "r1", "bob", "hud"), []byte("forged"))
	})

	// A trusted gateway, which relays them, an operator and an observer see everyone's; none of
	// them, nor the effects service, may publish one; the effects service sees none.
	for _, who := range []string{"gateway", "operator", "observer"} {
		_, tc := e.connect(t, who)
		var got frames
		if _, err := tc.Subscribe("tickfence.to.>", got.add); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, who+" sees ada's and bob's frames", func() bool { return got.has("for ada") && got.has("for bob") })
		if v := tc.violations(); len(v) > 0 {
			t.Fatalf("%s: %v", who, v)
		}
		refused(t, tc, who+" publishes a frame for bob", func() error {
			return tc.Publish(wire.PrivateFrameSubject(s, "r1", "bob", "hud"), []byte("forged"))
		})
	}
	_, fx := e.connect(t, "effects")
	refused(t, fx, "the effects service subscribes tickfence.to.>", func() error { _, err := fx.Subscribe("tickfence.to.>", seen.add); return err })
	refused(t, fx, "the effects service publishes a frame for bob", func() error {
		return fx.Publish(wire.PrivateFrameSubject(s, "r1", "bob", "hud"), []byte("forged"))
	})
	gw := e.dial(t, "gateway")
	gw2, err := gw.WatchPlayer(wctx, "r1", "bob", "hud")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case f := <-gw2.C:
		if f.To != "bob" || string(f.Payload) != "for bob" {
			t.Fatalf("the gateway's watch of bob's hud: to %q %q", f.To, f.Payload)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the gateway's watch of bob's hud: nothing")
	}
	wcancel() // the gateway stops speaking for bob, ada's watch stops too
	w, err = ada.Watch(ctx, "r1", "hud")
	if err != nil {
		t.Fatal(err)
	}
	_ = w

	// bob's client goes quiet (its watch ends): he is disconnected after 30 ticks; ada, whose
	// watch sends heartbeats, stays in.
	bcancel()
	var who struct {
		In   []string `msgpack:"in"`
		Left []string `msgpack:"left"`
	}
	waitUntil(t, "bob disconnected", func() bool {
		if err := gw.Send(ctx, "r1", map[string]any{"type": "who"}, &who); err != nil {
			t.Fatal(err)
		}
		return slices.Contains(who.Left, "bob disconnected")
	})
	time.Sleep(2 * time.Second) // past ada's timeout too: her heartbeats keep her in
	if err := gw.Send(ctx, "r1", map[string]any{"type": "who"}, &who); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(who.In, []string{"ada"}) || !slices.Equal(who.Left, []string{"bob disconnected"}) {
		t.Fatalf("in %v, left %v: want ada in (her watch's heartbeats), bob disconnected", who.In, who.Left)
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

// TestOldNodeCredentialDropsPlayerFrames: a node credential made before frames for one player
// (it may not publish tickfence.to.>) is told apart, so that its node drops them instead of
// having the server refuse each; one made now is not.
func TestOldNodeCredentialDropsPlayerFrames(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "auth")
	if _, err := auth.Init(dir); err != nil {
		t.Fatal(err)
	}
	node := auth.CredsFile(dir, "node")
	if w := auth.PlayerFramesWarning(node); w != "" {
		t.Fatalf("a node credential made now: %q", w)
	}
	for _, r := range []string{"gateway", "operator"} {
		if w := auth.PlayerFramesWarning(auth.CredsFile(dir, r)); w != "" {
			t.Fatalf("the %s's credential is judged: %q", r, w)
		}
	}
	// The same credential as an older auth init signed it: without tickfence.to.>.
	b, err := os.ReadFile(node)
	if err != nil {
		t.Fatal(err)
	}
	token, err := jwt.ParseDecoratedJWT(b)
	if err != nil {
		t.Fatal(err)
	}
	uc, err := jwt.DecodeUserClaims(token)
	if err != nil {
		t.Fatal(err)
	}
	uc.Pub.Allow = slices.DeleteFunc(uc.Pub.Allow, func(s string) bool { return s == auth.PlayerFrames })
	seed, err := os.ReadFile(filepath.Join(dir, "account.nk"))
	if err != nil {
		t.Fatal(err)
	}
	acc, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(seed))))
	if err != nil {
		t.Fatal(err)
	}
	old, err := uc.Encode(acc)
	if err != nil {
		t.Fatal(err)
	}
	nkey, err := jwt.ParseDecoratedUserNKey(b)
	if err != nil {
		t.Fatal(err)
	}
	useed, _ := nkey.Seed()
	creds, err := jwt.FormatUserConfig(old, useed)
	if err != nil {
		t.Fatal(err)
	}
	oldFile := filepath.Join(t.TempDir(), "old-node.creds")
	if err := os.WriteFile(oldFile, creds, 0o600); err != nil {
		t.Fatal(err)
	}
	if w := auth.PlayerFramesWarning(oldFile); !strings.Contains(w, "tickctl auth init") {
		t.Fatalf("an older node credential: %q, want a warning naming tickctl auth init", w)
	}
}
