package shard_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/shard"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/memstore"
)

// lobby is a kind that tracks its players: it logs every join and leave in its state (and emits
// an effect for each, which a tombstone keeps), refuses "mallory", shows each joining player a
// private frame, and disconnects after the create's "timeout" ticks of silence.
type lobby struct{}

func (lobby) Name() string { return "lobby" }
func (lobby) New(_ string, c actor.Command) (actor.Logic, error) {
	var a struct {
		Timeout uint64 `msgpack:"timeout"`
	}
	if err := c.Decode(&a); err != nil {
		return nil, err
	}
	return &lobbyState{Timeout: a.Timeout}, nil
}
func (lobby) Restore(_ string, b []byte) (actor.Logic, error) {
	s := &lobbyState{}
	return s, msgpack.Unmarshal(b, s)
}

type lobbyState struct {
	Timeout uint64   `msgpack:"timeout"`
	Log     []string `msgpack:"log"`
	N       int64    `msgpack:"n"`
	actor.Frames
	actor.Effects
}

func (s *lobbyState) Join(tick uint64, who actor.Sender) error {
	if who.Player == "mallory" {
		return actor.Reject("mallory is banned")
	}
	e := fmt.Sprintf("join %s @%d", who.Player, tick)
	s.Log = append(s.Log, e)
	_ = s.Emit("presence", []byte(e))
	return s.PublishTo(who.Player, "hud", []byte("welcome "+who.Player))
}

func (s *lobbyState) Leave(tick uint64, player string, why actor.LeaveReason) {
	e := fmt.Sprintf("leave %s %s @%d", player, why, tick)
	s.Log = append(s.Log, e)
	_ = s.Emit("presence", []byte(e))
	_ = s.PublishTo(player, "hud", []byte(fmt.Sprintf("bye %s %s", player, why)))
}

func (s *lobbyState) PresenceTimeout() uint64 { return s.Timeout }
func (s *lobbyState) Tick(uint64)             {}
func (s *lobbyState) Handle(_ uint64, c actor.Command) (any, error) {
	switch c.Type {
	case "add":
		s.N++
		return s.N, nil
	case "hud": // a frame for the sender's player only, and one for everyone
		if err := s.PublishTo(c.Sender.Player, "hud", []byte("yours "+c.Sender.Player)); err != nil {
			return nil, &actor.Rejected{Code: wire.CodeBadRequest, Message: err.Error()}
		}
		return "ok", s.Publish("", []byte("everyone"))
	}
	return nil, actor.Reject("unknown %q", c.Type)
}
func (s *lobbyState) MarshalState() ([]byte, error) { return msgpack.Marshal(s) }

// sendAs submits a command (request ID req) as sender, as the transport would, and waits for
// its answer; busy (admission control, on a loaded machine) is retried with the same request.
func (n *node) sendAs(sender actor.Sender, id, req string, cmd map[string]any) wire.Reply {
	n.t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		r := n.sendAsOnce(sender, id, req, cmd)
		if r.OK || r.Error.Code != wire.CodeBusy || time.Now().After(deadline) {
			return r
		}
	}
}

// submitAs submits a command as sender and returns where its answer will arrive.
func (n *node) submitAs(sender actor.Sender, id, req string, cmd map[string]any) <-chan []byte {
	n.t.Helper()
	r, err := wire.DecodeRequest(wire.Subject(store.ShardOf(id, testShards), id), req, "", mustBody(n.t, cmd), testShards)
	if err != nil {
		n.t.Fatalf("bad test command: %v", err)
	}
	ch := make(chan []byte, 1)
	c := shard.Command{Request: r, Received: time.Now(), Reply: func(b []byte) { ch <- b }}
	c.SetSender(sender)
	n.host.Submit(c)
	return ch
}

func (n *node) sendAsOnce(sender actor.Sender, id, req string, cmd map[string]any) wire.Reply {
	n.t.Helper()
	ch := n.submitAs(sender, id, req, cmd)
	select {
	case b := <-ch:
		rep, err := wire.DecodeReply(b, false)
		if err != nil {
			n.t.Fatal(err)
		}
		return rep
	case <-time.After(10 * time.Second):
		n.t.Fatalf("%s: no answer to %s %v", n.name, req, cmd)
	}
	return wire.Reply{}
}

// heartbeat submits a heartbeat of sender's player, as the transport does.
func (n *node) heartbeat(sender actor.Sender, id string) {
	c := shard.Command{Request: wire.Request{Shard: store.ShardOf(id, testShards), Instance: id}, Received: time.Now(),
		Reply: func([]byte) { panic("a heartbeat answered") }, Heartbeat: true}
	c.SetSender(sender)
	n.host.Submit(c)
}

func playerSender(name string) actor.Sender { return actor.Sender{Name: name, Player: name} }

// lobbyLog is the stored lobby's record and log.
func lobbyLog(t *testing.T, st store.Store, id string) (store.Record, *lobbyState) {
	t.Helper()
	rec, _, err := st.Load(context.Background(), 1, store.ShardOf(id, testShards), id)
	if err != nil {
		t.Fatalf("load %s: %v", id, err)
	}
	s := &lobbyState{}
	if len(rec.State) > 0 {
		if err := msgpack.Unmarshal(rec.State, s); err != nil {
			t.Fatal(err)
		}
	}
	return rec, s
}

func players(rec store.Record) []string {
	var out []string
	for _, p := range rec.Players {
		out = append(out, p.Player)
	}
	return out
}

// count is how many entries of log start with prefix.
func count(log []string, prefix string) int {
	n := 0
	for _, e := range log {
		if strings.HasPrefix(e, prefix) {
			n++
		}
	}
	return n
}

// tickOf is the tick of a log entry ("… @T").
func tickOf(t *testing.T, e string) uint64 {
	t.Helper()
	var tick uint64
	if _, err := fmt.Sscanf(e[strings.LastIndexByte(e, '@'):], "@%d", &tick); err != nil {
		t.Fatalf("log entry %q: %v", e, err)
	}
	return tick
}

func entry(log []string, prefix string) string {
	for _, e := range log {
		if strings.HasPrefix(e, prefix) {
			return e
		}
	}
	return ""
}

// TestPlayersJoinAndLeave: a player joins with its first command (Join first, which may refuse
// it) or the built-in join; leaves with the built-in leave, by a trusted sender's leave naming
// it, when silent for the timeout (measured in ticks from the last command or heartbeat), or
// when the instance ends; each hook is called once per join, and what it made is stored with
// the presence it goes with.
func TestPlayersJoinAndLeave(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		st := b.open(t)
		pub := &collect{}
		const timeout = 25
		n := newNode(t, st, "A", nodeOpt{checkpointEvery: 1 << 30, kinds: []actor.Kind{lobby{}},
			frames: func(prometheus.Registerer) shard.FramePublisher { return pub }})
		const s = 2
		n.grant(s)
		id := idIn(s, 0)
		mustOK(t, n.sendRetryingBusy(id, "c", map[string]any{"type": "create", "kind": "lobby", "timeout": timeout}), "create")
		ada, bob, cid, mallory, eve := playerSender("ada"), playerSender("bob"), playerSender("cid"), playerSender("mallory"), playerSender("eve")

		// ada joins with her first command, which is then handled.
		r := n.sendAs(ada, id, "a1", map[string]any{"type": "add"})
		mustOK(t, r, "ada's add")
		// A retransmission is no second join.
		mustOK(t, n.sendAs(ada, id, "a1", map[string]any{"type": "add"}), "ada's add again")
		// bob joins with the built-in join, twice: one join.
		r = n.sendAs(bob, id, "b1", map[string]any{"type": "join"})
		mustOK(t, r, "bob joins")
		since := r.Result.(map[string]any)["since"]
		r = n.sendAs(bob, id, "b2", map[string]any{"type": "join"})
		if !r.OK || fmt.Sprint(r.Result.(map[string]any)["since"]) != fmt.Sprint(since) {
			t.Fatalf("bob joins again: %+v, want ok since %v", r, since)
		}
		// Join refuses mallory: her command is refused and not handled, and she is not in.
		wantCode(t, n.sendAs(mallory, id, "m1", map[string]any{"type": "add"}), wire.CodeRejected, "mallory's add")
		// A player acts for itself only; a trusted sender for the player it names.
		wantCode(t, n.sendAs(eve, id, "e1", map[string]any{"type": "join", "player": "ada"}), wire.CodeForbidden, "eve joins as ada")
		gw := actor.Sender{Trusted: true, Player: "dan"}
		mustOK(t, n.sendAs(gw, id, "g1", map[string]any{"type": "add"}), "the gateway's add for dan")
		mustOK(t, n.sendAs(actor.Sender{Trusted: true}, id, "o1", map[string]any{"type": "add"}), "an operator's add (no player)")
		wantCode(t, n.sendAs(actor.Sender{Trusted: true}, id, "o2", map[string]any{"type": "join"}), wire.CodeBadRequest, "a join for no player")

		rec, ls := lobbyLog(t, st, id)
		if got, want := players(rec), []string{"ada", "bob", "dan"}; !slices.Equal(got, want) {
			t.Fatalf("players in: %v, want %v (log %v)", got, want, ls.Log)
		}
		if ls.N != 3 || count(ls.Log, "join ada") != 1 || count(ls.Log, "join bob") != 1 || count(ls.Log, "join mallory") != 0 {
			t.Fatalf("n %d, log %v: want 3 adds, ada and bob joined once, mallory never", ls.N, ls.Log)
		}
		if rec.V != store.PresenceVersion {
			t.Fatalf("a record holding players written as version %d, want %d", rec.V, store.PresenceVersion)
		}
		adaSeen, _ := rec.Present("ada") // her retransmission was heard too
		if p, _ := rec.Present("ada"); p.Seen <= p.Since {
			t.Fatalf("ada %+v: her retransmission, a tick after her add, was not heard", p)
		}
		// The welcome frame went to each joining player only.
		var welcomed []string
		for _, f := range pub.take() {
			if f.Topic == "hud" && strings.HasPrefix(string(f.Payload), "welcome") {
				if f.To == "" || string(f.Payload) != "welcome "+f.To {
					t.Fatalf("frame %q for %q", f.Payload, f.To)
				}
				welcomed = append(welcomed, f.To)
			}
		}
		if !slices.Equal(welcomed, []string{"ada", "bob", "dan"}) {
			t.Fatalf("welcomed %v, want ada, bob, dan", welcomed)
		}

		// bob leaves; a second leave finds him out. The gateway makes dan leave.
		r = n.sendAs(bob, id, "b3", map[string]any{"type": "leave"})
		if !r.OK || r.Result.(map[string]any)["left"] != true {
			t.Fatalf("bob leaves: %+v", r)
		}
		r = n.sendAs(bob, id, "b4", map[string]any{"type": "leave"})
		if !r.OK || r.Result.(map[string]any)["left"] != false {
			t.Fatalf("bob leaves again: %+v, want left false", r)
		}
		mustOK(t, n.sendAs(actor.Sender{Trusted: true}, id, "o3", map[string]any{"type": "leave", "player": "dan"}), "dan made to leave")

		// cid keeps a heartbeat going for 3 timeouts; ada says nothing: she is disconnected
		// exactly timeout ticks after she was last heard from (her add), cid not.
		mustOK(t, n.sendAs(cid, id, "c1", map[string]any{"type": "join"}), "cid joins")
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n.heartbeat(cid, id)
				select {
				case <-stop:
					return
				case <-time.After(40 * time.Millisecond): // 2 ticks at 50 Hz
				}
			}
		}()
		waitFor(t, "ada disconnected", func() bool {
			_, ls := lobbyLog(t, st, id)
			return count(ls.Log, "leave ada") == 1
		})
		time.Sleep(3 * timeout * 20 * time.Millisecond)
		close(stop)
		wg.Wait()
		rec, ls = lobbyLog(t, st, id)
		if got := players(rec); !slices.Equal(got, []string{"cid"}) {
			t.Fatalf("players in after %d ticks: %v, want cid (heartbeats) only; log %v", 3*timeout, got, ls.Log)
		}
		left := entry(ls.Log, "leave ada disconnected")
		if left == "" || tickOf(t, left) != adaSeen.Seen+timeout {
			t.Fatalf("ada: %+v then %q; want disconnected %d ticks after she was last heard from", adaSeen, left, timeout)
		}
		// Without heartbeats cid goes too, a timeout after the last one was heard: long after a
		// timeout past his last sight the record holds (heartbeats write nothing by themselves;
		// the next write stores them).
		seen := rec.Players[0].Seen
		waitFor(t, "cid disconnected", func() bool {
			_, ls := lobbyLog(t, st, id)
			return count(ls.Log, "leave cid") == 1
		})
		_, ls = lobbyLog(t, st, id)
		if e := entry(ls.Log, "leave cid disconnected"); tickOf(t, e) < seen+2*timeout {
			t.Fatalf("cid: %q, last stored sight at %d: want the heartbeats of %d ticks to have kept him in", e, seen, 3*timeout)
		}

		// The end: everyone in leaves, ended; the tombstone keeps the leaves' effects.
		mustOK(t, n.sendAs(ada, id, "a2", map[string]any{"type": "add"}), "ada back")
		mustOK(t, n.sendAs(bob, id, "b5", map[string]any{"type": "add"}), "bob back")
		end := n.sendRetryingBusy(id, "end", map[string]any{"type": "end"})
		mustOK(t, end, "end")
		rec, _ = lobbyLog(t, st, id)
		var ended []string
		for _, e := range rec.Fx {
			if strings.Contains(string(e.Payload), " ended ") {
				ended = append(ended, string(e.Payload))
			}
		}
		if !rec.Ended || len(rec.Players) != 0 || len(ended) != 2 || !strings.HasPrefix(ended[0], "leave ada ended") || !strings.HasPrefix(ended[1], "leave bob ended") {
			t.Fatalf("tombstone: ended %v, players %v, the leaves it holds %v; want ada and bob left, ended", rec.Ended, rec.Players, ended)
		}
		if rec.V != 4 {
			t.Fatalf("a record holding no players written as version %d, want 4", rec.V)
		}
		// What the leaves showed in the tick the logic ended is published after it.
		// They carry the tick they were made at, after every frame before (a tombstone does not
		// tick: its record's tick is the one before the end's).
		var bye shard.Frame
		waitFor(t, "the leaves' frames of the end", func() bool {
			for _, f := range pub.take() {
				if f.To == "bob" && string(f.Payload) == "bye bob ended" {
					bye = f
					return true
				}
			}
			return false
		})
		if endTick := end.Result.(map[string]any)["tick"]; fmt.Sprint(bye.Tick) != fmt.Sprint(endTick.(int64)+1) {
			t.Fatalf("bob's bye at tick %d; the end answered at tick %v, want the tick after", bye.Tick, endTick)
		}
	})
}

// TestPlayersSurviveFailover: presence is stored with the state, so a failover neither repeats
// nor loses a join or a leave. A join applied by an owner that dies before storing it never
// happened: its command, retransmitted to the next owner, joins there once. A disconnect decided
// by an owner that dies before storing it is decided again by the next, at the same tick (the
// last stored sight of the player plus the timeout: ticks, not clocks), and stored once.
func TestPlayersSurviveFailover(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		const s = 3
		const timeout = 50
		id := idIn(s, 1)
		opt := nodeOpt{checkpointEvery: 1 << 30, kinds: []actor.Kind{lobby{}}}
		a := newNode(t, b.open(t), "A", opt)
		a.grant(s)
		mustOK(t, a.sendRetryingBusy(id, "c", map[string]any{"type": "create", "kind": "lobby", "timeout": timeout}), "create")
		ada, bob, cid := playerSender("ada"), playerSender("bob"), playerSender("cid")
		mustOK(t, a.sendAs(ada, id, "a1", map[string]any{"type": "add"}), "ada joins at A")

		// Heartbeats of ada and cid reach every node, as they reach whichever owns the shard.
		nodes := []*node{a}
		var mu sync.Mutex
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				for _, n := range nodes {
					n.heartbeat(ada, id)
					n.heartbeat(cid, id)
				}
				mu.Unlock()
				select {
				case <-stop:
					return
				case <-time.After(40 * time.Millisecond):
				}
			}
		}()
		defer func() { close(stop); wg.Wait() }()

		// cid's first command joins him at A, which freezes before storing it.
		frozen := a.freeze.arm(id)
		for held := false; !held; {
			select {
			case <-frozen:
				held = true
			case b := <-a.submitAs(cid, id, "c1", map[string]any{"type": "add"}):
				if r, _ := wire.DecodeReply(b, false); r.OK || r.Error.Code != wire.CodeBusy {
					t.Fatalf("cid's add at A answered before its write: %+v", r)
				}
				time.Sleep(20 * time.Millisecond) // busy: again, as a client would
			}
		}
		bn := newNode(t, b.open(t), "B", opt)
		mu.Lock()
		nodes = append(nodes, bn)
		mu.Unlock()
		bn.grant(s)
		rec, ls := lobbyLog(t, b.open(t), id)
		if got := players(rec); !slices.Equal(got, []string{"ada"}) || count(ls.Log, "join cid") != 0 {
			t.Fatalf("B loaded players %v, log %v: want ada only (cid's join was never stored)", got, ls.Log)
		}
		a.freeze.release()
		waitFor(t, "A stops the shard", func() bool { return !a.host.Running(s) })
		// cid retransmits his command to B: he joins there, once.
		mustOK(t, bn.sendAs(cid, id, "c1", map[string]any{"type": "add"}), "cid's add at B")
		mustOK(t, bn.sendAs(bob, id, "b1", map[string]any{"type": "join"}), "bob joins at B")
		rec, ls = lobbyLog(t, b.open(t), id)
		if got := players(rec); !slices.Equal(got, []string{"ada", "bob", "cid"}) || count(ls.Log, "join cid") != 1 || ls.N != 2 {
			t.Fatalf("at B: players %v, n %d, log %v; want ada, bob, cid, cid joined once, 2 adds", got, ls.N, ls.Log)
		}
		bobJoined := tickOf(t, entry(ls.Log, "join bob"))

		// bob says nothing: B disconnects him in memory and freezes before storing it.
		frozen = bn.freeze.arm(id)
		<-frozen
		c := newNode(t, b.open(t), "C", opt)
		mu.Lock()
		nodes = append(nodes, c)
		mu.Unlock()
		c.grant(s)
		rec, ls = lobbyLog(t, b.open(t), id)
		if got := players(rec); !slices.Equal(got, []string{"ada", "bob", "cid"}) || count(ls.Log, "leave") != 0 {
			t.Fatalf("C loaded players %v, log %v: want all three in (bob's leave was never stored)", got, ls.Log)
		}
		p, _ := rec.Present("bob")
		bn.freeze.release()
		waitFor(t, "B stops the shard", func() bool { return !bn.host.Running(s) })
		waitFor(t, "C disconnects bob", func() bool {
			_, ls := lobbyLog(t, b.open(t), id)
			return count(ls.Log, "leave bob") > 0
		})
		time.Sleep(20 * 20 * time.Millisecond) // another 20 ticks: nothing more happens
		rec, ls = lobbyLog(t, b.open(t), id)
		left := entry(ls.Log, "leave bob")
		if count(ls.Log, "leave bob") != 1 || left != fmt.Sprintf("leave bob disconnected @%d", bobJoined+timeout) || p.Seen != bobJoined {
			t.Fatalf("log %v: want bob disconnected once, at tick %d (joined at %d, seen last at %d, timeout %d)", ls.Log, bobJoined+timeout, bobJoined, p.Seen, timeout)
		}
		if got := players(rec); !slices.Equal(got, []string{"ada", "cid"}) {
			t.Fatalf("players in at C: %v, want ada and cid (their heartbeats reached C)", got)
		}
		for _, who := range []string{"ada", "bob", "cid"} {
			if count(ls.Log, "join "+who) != 1 {
				t.Fatalf("log %v: %s joined %d times, want once", ls.Log, who, count(ls.Log, "join "+who))
			}
		}
		q, _ := rec.Present("ada")
		if q.Since != tickOf(t, entry(ls.Log, "join ada")) {
			t.Fatalf("ada in since %d at C, joined at %q", q.Since, entry(ls.Log, "join ada"))
		}
	})
}

// TestPrivateFramesGoToTheirPlayer: a frame made with PublishTo reaches the publisher addressed
// to its player, a Publish'd one to nobody in particular; a bad player name is refused at the
// call.
func TestPrivateFramesGoToTheirPlayer(t *testing.T) {
	pub := &collect{}
	n := newNode(t, memstore.New(), "A", nodeOpt{kinds: []actor.Kind{lobby{}}, frames: func(prometheus.Registerer) shard.FramePublisher { return pub }})
	const s = 5
	n.grant(s)
	id := idIn(s, 2)
	mustOK(t, n.sendRetryingBusy(id, "c", map[string]any{"type": "create", "kind": "lobby"}), "create")
	mustOK(t, n.sendAs(playerSender("ada"), id, "a1", map[string]any{"type": "hud"}), "ada's hud")
	wantCode(t, n.sendAs(actor.Sender{Trusted: true}, id, "o1", map[string]any{"type": "hud"}), wire.CodeBadRequest, "a hud for no player")
	waitFor(t, "frames", func() bool { return pub.count() >= 3 })
	var got []string
	for _, f := range pub.take() {
		if f.Notice {
			continue // a stored notice (frames.go), no frame
		}
		got = append(got, fmt.Sprintf("%s:%s:%s", f.To, f.Topic, f.Payload))
	}
	want := []string{"ada:hud:welcome ada", "ada:hud:yours ada", "::everyone"} // (ada never leaves)
	if !slices.Equal(got, want) {
		t.Fatalf("frames %v, want %v", got, want)
	}
	var f actor.Frames
	if err := f.PublishTo("a.b", "", nil); err == nil {
		t.Fatal("PublishTo a player named a.b: no error")
	}
}
