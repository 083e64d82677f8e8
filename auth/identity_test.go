package auth_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/auth"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
)

// player is a per-player credential in the players' account (an untrusted gateway named after
// the player), connected.
func (e *env) player(t *testing.T, name string) *natscmd.Client {
	t.Helper()
	if _, err := auth.NewUser(e.dir, auth.Gateway, name); err != nil {
		t.Fatal(err)
	}
	nc, _ := e.connect(t, name)
	c := natscmd.NewClient(nc, shards)
	c.Player = name // a player sends on its own subjects
	return c
}

// code sends cmd once (no retries) and returns the reply's code ("ok" for an ok).
func code(t *testing.T, c *natscmd.Client, id, req string, cmd map[string]any) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := c.Once(ctx, id, req, cmd)
	if err != nil {
		t.Fatalf("%s %v: %v", id, cmd, err)
	}
	if r.OK {
		return "ok"
	}
	return r.Error.Code
}

// TestCommandsKnowTheirSender: on a cluster set up as the README says, a player's credential
// acts only for its player. It cannot end an instance it did not create, act for another
// player, create a dungeon with a boss a player may not have, create without bound, or reach
// another player's exactly-once state through its client or request IDs.
func TestCommandsKnowTheirSender(t *testing.T) {
	e := newEnv(t)
	alice, bob := e.player(t, "alice"), e.player(t, "bob")

	// Instances: a player may open a dungeon and end it; another player may not end it, nor
	// may anyone untrusted end the trusted gateway's d1.
	if c := code(t, alice, "da", "a-create", map[string]any{"type": "create", "kind": "dungeon", "boss_hp": 500}); c != "ok" {
		t.Fatalf("alice creates da: %s", c)
	}
	if c := code(t, bob, "da", "b-end", map[string]any{"type": "end"}); c != wire.CodeForbidden {
		t.Errorf("bob ends alice's da: %s, want forbidden", c)
	}
	if c := code(t, alice, "d1", "a-end1", map[string]any{"type": "end"}); c != wire.CodeForbidden {
		t.Errorf("alice ends the trusted gateway's d1: %s, want forbidden", c)
	}
	if c := code(t, alice, "big", "a-big", map[string]any{"type": "create", "kind": "dungeon", "boss_hp": int64(1e12)}); c != wire.CodeForbidden {
		t.Errorf("alice creates a 1e12 HP boss: %s, want forbidden", c)
	}

	// Players act for themselves only (the demo dungeon authorises on the sender).
	if c := code(t, alice, "d1", "a-join", map[string]any{"type": "join", "player": "alice"}); c != "ok" {
		t.Fatalf("alice joins d1 as alice: %s", c)
	}
	for _, typ := range []string{"join", "attack", "leave"} {
		if c := code(t, bob, "d1", "b-"+typ, map[string]any{"type": typ, "player": "alice"}); c != wire.CodeForbidden {
			t.Errorf("bob %ss as alice: %s, want forbidden", typ, c)
		}
	}
	// The trusted gateway may act for a player it names, and only for that one.
	gwc, _ := e.connect(t, "gateway")
	trusted := func(player, req string, cmd map[string]any) string {
		m := nats.NewMsg(wire.Subject(e.shard, "d1"))
		m.Header.Set(wire.HeaderRequestID, req)
		m.Header.Set(natscmd.HeaderPlayer, player)
		m.Data = mustCanonical(t, cmd)
		r, err := gwc.RequestMsg(m, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := wire.DecodeReply(r.Data, false)
		if err != nil {
			t.Fatal(err)
		}
		if rep.OK {
			return "ok"
		}
		return rep.Error.Code
	}
	if c := trusted("carol", "g-join", map[string]any{"type": "join", "player": "carol"}); c != "ok" {
		t.Errorf("the trusted gateway joins for carol: %s", c)
	}
	if c := trusted("carol", "g-join2", map[string]any{"type": "join", "player": "dave"}); c != wire.CodeForbidden {
		t.Errorf("the trusted gateway acting for carol joins dave: %s, want forbidden", c)
	}

	// Exactly-once state is per sender. Alice attacks once with request a-hit; bob then floods
	// the request window with 3 × its size of his own IDs and sends a-hit himself: alice's
	// retransmission still gets her first answer (not a second attack), and bob's a-hit is his
	// own new command.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	hit := map[string]any{"type": "attack", "player": "alice"}
	first, err := alice.SendMap(ctx, "d1", "a-hit", hit)
	if err != nil || !first.OK {
		t.Fatalf("alice attacks: %+v %v", first, err)
	}
	if c := code(t, bob, "d1", "b-join-self", map[string]any{"type": "join", "player": "bob"}); c != "ok" {
		t.Fatalf("bob joins: %s", c)
	}
	for i := range 3 * store.RequestWindow {
		if r, err := bob.SendMap(ctx, "d1", "junk-"+strconv.Itoa(i), map[string]any{"type": "status"}); err != nil || !r.OK {
			t.Fatalf("bob's junk %d: %+v %v", i, r, err)
		}
	}
	if r, err := bob.SendMap(ctx, "d1", "a-hit", map[string]any{"type": "attack", "player": "bob"}); err != nil || !r.OK {
		t.Errorf("bob's own a-hit (another sender's request ID): %+v %v, want applied", r, err)
	}
	again, err := alice.SendMap(ctx, "d1", "a-hit", hit)
	if err != nil || fmt.Sprint(again) != fmt.Sprint(first) {
		t.Errorf("alice's retransmitted a-hit: %+v %v, want her first answer %+v", again, err, first)
	}

	// Bob takes alice's client ID and sequence number: his command is his own (applied, his
	// answer), not hers.
	compact := func(player string) map[string]any { return map[string]any{"type": "join", "player": player} }
	send := func(conn *nats.Conn, player string) wire.Reply {
		m := nats.NewMsg(wire.PlayerSubject(e.shard, "d1", player))
		m.Header.Set(wire.HeaderClient, "shared-client")
		m.Header.Set(wire.HeaderSeq, "1")
		m.Data = mustCanonical(t, compact(player))
		r, err := conn.RequestMsg(m, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := wire.DecodeReply(r.Data, false)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	_, aliceConn := e.connect(t, "alice")
	_, bobConn := e.connect(t, "bob")
	ra := send(aliceConn.Conn, "alice")
	rb := send(bobConn.Conn, "bob")
	if !ra.OK || !rb.OK {
		t.Fatalf("alice's and bob's seq 1 of client shared-client: %+v, %+v; want both applied", ra, rb)
	}
	if fmt.Sprint(ra.Result) == fmt.Sprint(rb.Result) {
		t.Errorf("bob got alice's answer for her client ID: %+v", rb)
	}

	// Creates are bounded per sender: a burst past the quota is refused rate_limited, at once.
	limited := 0
	for i := range natscmd.DefaultQuota.CreateBurst + 5 {
		if code(t, bob, fmt.Sprintf("bob-d%d", i), "c", map[string]any{"type": "create", "kind": "dungeon"}) == wire.CodeRateLimited {
			limited++
		}
	}
	if limited == 0 {
		t.Errorf("bob created %d dungeons at once, none refused rate_limited", natscmd.DefaultQuota.CreateBurst+5)
	}
}

// TestPlayerCannotTakeAnEndedID: while its tombstone lasts, an ended instance's ID is its
// creator's: a player cannot create the trusted gateway's ended d1 again, nor another player's
// ended instance; its own it may. (Review of issue 33: a player revived d1 and became its creator.)
func TestPlayerCannotTakeAnEndedID(t *testing.T) {
	e := newEnv(t)
	gw, _ := e.connect(t, "gateway")
	g := natscmd.NewClient(gw, shards)
	alice, mallory := e.player(t, "alice"), e.player(t, "mallory")
	if c := code(t, g, "d1", "g-end", map[string]any{"type": "end"}); c != "ok" {
		t.Fatalf("the gateway ends d1: %s", c)
	}
	if c := code(t, mallory, "d1", "m-revive", map[string]any{"type": "create", "kind": "dungeon"}); c != wire.CodeForbidden {
		t.Errorf("a player creates the trusted gateway's ended d1: %s, want forbidden", c)
	}
	if c := code(t, alice, "da", "a-create", map[string]any{"type": "create", "kind": "dungeon"}); c != "ok" {
		t.Fatalf("alice creates da: %s", c)
	}
	if c := code(t, alice, "da", "a-end", map[string]any{"type": "end"}); c != "ok" {
		t.Fatalf("alice ends da: %s", c)
	}
	if c := code(t, mallory, "da", "m-take", map[string]any{"type": "create", "kind": "dungeon"}); c != wire.CodeForbidden {
		t.Errorf("mallory creates alice's ended da: %s, want forbidden", c)
	}
	if c := code(t, alice, "da", "a-again", map[string]any{"type": "create", "kind": "dungeon"}); c != "ok" {
		t.Errorf("alice creates her own ended da again: %s", c)
	}
	if c := code(t, g, "d1", "g-again", map[string]any{"type": "create", "kind": "dungeon"}); c != "ok" {
		t.Errorf("the gateway creates its ended d1 again: %s", c)
	}
}

// TestMalformedCommandsCountAgainstTheQuota: a player's malformed commands cost the node a
// decode each and are counted against its quota like good ones: past its burst, they are refused
// rate_limited before they are decoded. (Review of issue 33: 1 000 malformed commands were each
// decoded and answered bad_request.)
func TestMalformedCommandsCountAgainstTheQuota(t *testing.T) {
	e := newEnv(t)
	e.player(t, "mallory")
	_, m := e.connect(t, "mallory")
	codes := map[string]int{}
	n := natscmd.DefaultQuota.Burst + 50
	for i := range n {
		msg := nats.NewMsg(wire.PlayerSubject(e.shard, "d1", "mallory"))
		msg.Header.Set(wire.HeaderRequestID, fmt.Sprintf("bad-%d", i))
		msg.Data = []byte{0xc1} // never msgpack
		r, err := m.RequestMsg(msg, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := wire.DecodeReply(r.Data, false)
		if err != nil {
			t.Fatal(err)
		}
		codes[rep.Error.Code]++
	}
	if codes[wire.CodeRateLimited] == 0 || codes[wire.CodeBadRequest] > natscmd.DefaultQuota.Burst+int(natscmd.DefaultQuota.Commands)*2 {
		t.Errorf("%d malformed commands of one player answered %v: want those past the quota rate_limited", n, codes)
	}
}

// TestPlayerLimits: a player's credential holds at most auth.PlayerMaxSubs subscriptions and sends
// no message over auth.PlayerMaxPayload, whatever its client does: the server refuses the rest.
func TestPlayerLimits(t *testing.T) {
	e := newEnv(t)
	if _, err := auth.NewUser(e.dir, auth.Gateway, "mallory"); err != nil {
		t.Fatal(err)
	}
	nc, c := e.connect(t, "mallory")
	for i := range auth.PlayerMaxSubs + 8 {
		if _, err := nc.SubscribeSync(wire.FrameSubject(uint32(i), fmt.Sprintf("w%d", i), "")); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	refusedSubs := 0
	for _, err := range c.violations() {
		if strings.Contains(strings.ToLower(err.Error()), "maximum subscriptions") {
			refusedSubs++
		}
	}
	if refusedSubs == 0 {
		t.Errorf("%d subscriptions of a player: none refused, want those over %d", auth.PlayerMaxSubs+8, auth.PlayerMaxSubs)
	}

	// One command over the payload limit, on mallory's own subject: the server refuses it (and
	// closes the connection), the node never sees it.
	big := nats.NewMsg(wire.PlayerSubject(e.shard, "d1", "mallory"))
	big.Header.Set(wire.HeaderRequestID, "m-big")
	big.Data = make([]byte, auth.PlayerMaxPayload+1)
	nc2, c2 := e.connect(t, "mallory")
	_, err := nc2.RequestMsg(big, 2*time.Second)
	if err == nil {
		t.Fatal("a command over the player's payload limit was answered")
	}
	if nc2.IsConnected() {
		var saw bool
		for _, v := range c2.violations() {
			saw = saw || strings.Contains(strings.ToLower(v.Error()), "payload")
		}
		if !saw && !errors.Is(err, nats.ErrMaxPayload) {
			t.Errorf("a command of %d bytes: %v, the connection still up and no payload violation", len(big.Data), err)
		}
	}
}
