package auth_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/auth"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/shard/wire"
)

// Review 35: what a player's credential (the smallest handed out) can do with the new messages of
// issue 35 against a node: heartbeats, interest, built-in join/leave, private frames, stored
// notices, operator requests.
func TestReview35PlayerAttacks(t *testing.T) {
	e := newRoomEnv(t)
	for _, p := range []string{"ada", "bob"} {
		if _, err := auth.NewUser(e.dir, auth.Gateway, p); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	bob := e.dial(t, "bob")
	if err := bob.Send(ctx, "r1", map[string]any{"type": "join"}, nil); err != nil {
		t.Fatalf("bob joins: %v", err)
	}
	s := e.shard
	adaNC, ada := e.connect(t, "ada")
	adaC := natscmd.NewClient(adaNC, shards)
	adaC.Player = "ada"

	// join and leave for another player.
	for _, typ := range []string{"leave", "join"} {
		if c := code(t, adaC, "r1", "ada-"+typ, map[string]any{"type": typ, "player": "bob"}); c != wire.CodeForbidden {
			t.Errorf("ada's %s for bob: %s, want forbidden", typ, c)
		}
	}

	// The subjects a player must not reach.
	pub := func(subj string, h nats.Header) func() error {
		return func() error {
			m := nats.NewMsg(subj)
			for k, v := range h {
				m.Header[k] = v
			}
			return ada.PublishMsg(m)
		}
	}
	stored := nats.Header{wire.HeaderEpoch: {"99"}, wire.HeaderToken: {"99"}, wire.HeaderStored: {"999999"}}
	refused(t, ada, "a forged stored notice", pub(wire.StoredSubject(s, "r1"), stored))
	refused(t, ada, "a forged private frame for bob", pub(wire.PrivateFrameSubject(s, "r1", "bob", ""), nil))
	refused(t, ada, "a heartbeat for bob on the trusted subject", pub(wire.Subject(s, "r1"),
		nats.Header{wire.HeaderHeartbeat: {"1"}, natscmd.HeaderPlayer: {"bob"}}))
	refused(t, ada, "an interest on the trusted subject", pub(wire.Subject(s, "r1"), nats.Header{wire.HeaderWatch: {"1"}}))
	refused(t, ada, "a heartbeat on bob's subject", pub(wire.PlayerSubject(s, "r1", "bob"), nats.Header{wire.HeaderHeartbeat: {"1"}}))
	refused(t, ada, "an operator's reload", request(ada, wire.OperatorSubject(s, "r1"), `{"type":"reload"}`))
	for _, subj := range []string{"tickfence.to.>", "tickfence.to.*.*.bob", "tickfence.to.*.*.*", "tickfence.to.*.>", "tickfence.op.>"} {
		subj := subj
		refused(t, ada, "a queue subscription of "+subj, func() error {
			_, err := ada.QueueSubscribe(subj, "relay", func(*nats.Msg) {})
			return err
		})
	}

	// ada heartbeats on her own subject naming bob in a header: bob is not kept in.
	hbctx, hbcancel := context.WithCancel(ctx)
	defer hbcancel()
	go func() {
		for hbctx.Err() == nil {
			m := nats.NewMsg(wire.PlayerSubject(s, "r1", "ada"))
			m.Header.Set(wire.HeaderHeartbeat, "1")
			m.Header.Set(natscmd.HeaderPlayer, "bob")
			_ = ada.PublishMsg(m)
		}
	}()
	gw := e.dial(t, "gateway")
	var who struct {
		In   []string `msgpack:"in"`
		Left []string `msgpack:"left"`
	}
	waitUntil(t, "bob disconnected despite ada's heartbeats naming him", func() bool {
		if err := gw.Send(ctx, "r1", map[string]any{"type": "who"}, &who); err != nil {
			t.Fatal(err)
		}
		return slices.Contains(who.Left, "bob disconnected")
	})
	hbcancel()

	// An interest flood costs the player its quota: its next command is rate limited.
	for range 400 {
		m := nats.NewMsg(wire.PlayerSubject(s, "r1", "ada"))
		m.Header.Set(wire.HeaderWatch, "1")
		_ = ada.PublishMsg(m)
	}
	_ = ada.Flush() // same connection and subscription as the command below: handled before it, in order
	if c := code(t, adaC, "r1", "ada-after-flood", map[string]any{"type": "who"}); c != wire.CodeRateLimited {
		t.Errorf("ada's command after 400 interest messages: %s, want rate_limited (the flood is free)", c)
	}
}

// The control of the interest flood above: a heartbeat flood (charged at time.Now()) does cost the
// player its quota.
func TestReview35HeartbeatFloodCharged(t *testing.T) {
	e := newRoomEnv(t)
	if _, err := auth.NewUser(e.dir, auth.Gateway, "ada"); err != nil {
		t.Fatal(err)
	}
	adaNC, ada := e.connect(t, "ada")
	adaC := natscmd.NewClient(adaNC, shards)
	adaC.Player = "ada"
	for range 400 {
		m := nats.NewMsg(wire.PlayerSubject(e.shard, "r1", "ada"))
		m.Header.Set(wire.HeaderHeartbeat, "1")
		_ = ada.PublishMsg(m)
	}
	_ = ada.Flush() // same connection and subscription as the command below: handled before it, in order
	if c := code(t, adaC, "r1", "ada-after-flood", map[string]any{"type": "who"}); c != wire.CodeRateLimited {
		t.Errorf("ada's command after 400 heartbeats: %s, want rate_limited", c)
	}
}
