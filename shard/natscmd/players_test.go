package natscmd_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/shard"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
)

// TestWatchPlayerGetsItsOwnFrames: the publisher puts a frame for one player on that player's
// own subject; a player's watch receives the public frames and its own (To set), another
// player's watch and a public one never see it, and each subject keeps its own order under the
// watcher's rule.
func TestWatchPlayerGetsItsOwnFrames(t *testing.T) {
	cnc, onc := clientConns(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const id = "p-1"
	pub := natscmd.NewFramePublisher(onc, 0, nil)
	defer pub.Close()
	ada := natscmd.NewClient(cnc, clientShards)
	ada.Player, ada.Heartbeat = "ada", -1
	wa, err := ada.Watch(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ada.WatchPlayer(ctx, id, "bob"); !errors.Is(err, natscmd.ErrOtherPlayer) {
		t.Fatalf("ada's client watches bob: %v, want ErrOtherPlayer", err)
	}
	bob := natscmd.NewClient(cnc, clientShards)
	bob.Player, bob.Heartbeat = "bob", -1
	wb, err := bob.Watch(ctx, id, "hud") // chosen topics: its own of that topic too
	if err != nil {
		t.Fatal(err)
	}
	wp, err := natscmd.NewClient(cnc, clientShards).Watch(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	s := store.ShardOf(id, clientShards)
	for tick := uint64(1); tick <= 3; tick++ {
		for i, f := range []shard.Frame{{Topic: ""}, {Topic: "hud", To: "ada"}, {Topic: "hud", To: "bob"}, {To: "ada"}, {Topic: "hud"}} {
			f.Shard, f.Instance, f.Epoch, f.Token, f.Tick, f.Index = s, id, 1, 7, tick, uint64(i)
			f.Payload = []byte(f.To + "/" + f.Topic + "/" + strconv.FormatUint(tick, 10))
			pub.Publish(f)
		}
	}
	got := func(w *natscmd.Watch, n int) map[string]int {
		m := map[string]int{}
		for range n {
			f := next(t, w)
			m[f.To+"/"+f.Topic]++
			if want := f.To + "/" + f.Topic + "/" + strconv.FormatUint(f.Tick, 10); string(f.Payload) != want {
				t.Fatalf("frame on %s/%s carries %q, want %q", f.To, f.Topic, f.Payload, want)
			}
		}
		return m
	}
	if m := got(wa, 12); m["/"] != 3 || m["ada/hud"] != 3 || m["ada/"] != 3 || m["/hud"] != 3 || len(m) != 4 {
		t.Fatalf("ada's watch: %v; want the public frames and hers, 3 each", m)
	}
	if m := got(wb, 6); m["bob/hud"] != 3 || m["/hud"] != 3 || len(m) != 2 {
		t.Fatalf("bob's watch of hud: %v; want the public hud and his", m)
	}
	if m := got(wp, 6); m["/"] != 3 || m["/hud"] != 3 || len(m) != 2 {
		t.Fatalf("a public watch: %v; want the public frames only", m)
	}
	time.Sleep(100 * time.Millisecond)
	for name, w := range map[string]*natscmd.Watch{"ada": wa, "bob": wb, "public": wp} {
		select {
		case f := <-w.C:
			t.Fatalf("%s's watch got one more frame: %+v to %q", name, f.FrameStamp, f.To)
		default:
		}
		if w.Invalid() != 0 || w.Stale() != 0 {
			t.Fatalf("%s's watch: %d invalid, %d stale", name, w.Invalid(), w.Stale())
		}
	}
	// A node whose credential predates frames for one player drops them, counted.
	pub.DropPrivate.Store(true)
	pub.Publish(shard.Frame{Shard: s, Instance: id, Epoch: 1, Token: 7, Tick: 9, To: "ada", Payload: []byte("ada//9")})
	pub.Publish(shard.Frame{Shard: s, Instance: id, Epoch: 1, Token: 7, Tick: 9, Payload: []byte("//9")})
	if f := next(t, wa); f.To != "" || f.Tick != 9 {
		t.Fatalf("after DropPrivate ada got %q to %q", f.Payload, f.To)
	}
}

// TestHeartbeatsReachTheShard: a player's watch sends heartbeats on its own command subject, a
// trusted client's watch for a player on the trusted subject naming it; the server hands them to
// the shard as heartbeats of that player, answers nothing, and drops a trusted one naming no one.
func TestHeartbeatsReachTheShard(t *testing.T) {
	cnc, onc := clientConns(t)
	const id = "p-2"
	sh := store.ShardOf(id, clientShards)
	srv := natscmd.NewServer(onc, clientShards, nil)
	var mu sync.Mutex
	beats := map[string]int{}
	stop, err := srv.Serve(sh, func(c shard.Command) {
		if c.Interest {
			return // a watcher's interest (passivation), not a player's heartbeat
		}
		mu.Lock()
		defer mu.Unlock()
		if !c.Heartbeat || c.Instance != id || c.Type != "" {
			t.Errorf("the shard got %+v, want heartbeats of %s only", c.Request, id)
		}
		key := c.Sender.Player
		if c.Sender.Trusted {
			key += " (trusted)"
		}
		beats[key]++
		c.Reply([]byte("no"))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := onc.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ada := natscmd.NewClient(cnc, clientShards)
	ada.Player, ada.Heartbeat = "ada", 50*time.Millisecond
	if _, err := ada.Watch(ctx, id); err != nil {
		t.Fatal(err)
	}
	gw := natscmd.NewClient(cnc, clientShards)
	gw.Heartbeat = 50 * time.Millisecond
	if _, err := gw.WatchPlayer(ctx, id, "bob"); err != nil {
		t.Fatal(err)
	}
	if _, err := gw.Watch(ctx, id); err != nil { // no player: no heartbeat
		t.Fatal(err)
	}
	// A heartbeat naming no one, and one with a body (a command without a reply), are dropped.
	m := nats.NewMsg(wire.Subject(sh, id))
	m.Header.Set(wire.HeaderHeartbeat, "1")
	_ = cnc.PublishMsg(m)
	m = nats.NewMsg(wire.PlayerSubject(sh, id, "eve"))
	m.Header.Set(wire.HeaderHeartbeat, "1")
	m.Data = []byte{0x80}
	_ = cnc.PublishMsg(m)
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		a, b := beats["ada"], beats["bob (trusted)"]
		mu.Unlock()
		if a >= 3 && b >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("heartbeats in 5 s: %v; want ada's and bob's (through the trusted client), every 50 ms", beats)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if len(beats) != 2 {
		t.Fatalf("heartbeats %v: want ada's and bob's only", beats)
	}
}
