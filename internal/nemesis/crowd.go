package nemesis

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/tickfence/tickfence/shard"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
)

// Many clients per instance, and clients that go quiet (issue 34 item 4). A crowd is
// store.MaxClientSessions+8 clients of one instance, each with a client ID of its own in the
// compact form (a client session): a raid with a gateway connection per player, or a gateway
// restarted again and again. Most are trusted gateways (no per-sender cap applies to them), one
// in four a player of its own. Each sends one add, at a random moment within 3 s, and then goes
// quiet once it has nothing in flight, as the Go client does: it acknowledges alone (a message
// with only its client ID and its ack: no number, no body, no reply subject), so that the
// owner may drop the answer its session holds. Before that:
//
//   - some vanish instead (a gateway that crashed): they never acknowledge, and their sessions
//     hold their answers until they expire or are let go of; in one crowd of three, a wave of
//     crashes: 88 clients, four in five vanishing, more than the record keeps sessions;
//   - some send a second add later, acknowledging the first with it;
//   - some lost the answer, as far as they know: they send the same number again, 0.3–4 s later,
//     after most of the crowd came, and must get the first answer (same position). A session
//     the record let go of while its client could still retransmit shows here: the add is
//     applied a second time.
//
// Every client's new session (its first command to the instance) is subject to send's liveness
// check: refused busy for longer than Config.Settle in a row is a violation. A record that keeps
// at most MaxClientSessions sessions, each holding an answer until its client's next command,
// locks every later client out.
var crowdShare = 0.3

// Review 34: a heavier crowd (set by -nemesis.crowdheavy): more clients than sessions plus
// sessions let go of, more of them vanishing, more retransmitting.
// crowdAgain and the 0.22 after it are shares of the clients that do not vanish.
var crowdExtra, crowdVanish, crowdAgain = 8, 0.1, 0.28

// crowdPlanned decides, from the seed alone, whether a run has a crowd.
func crowdPlanned(seed uint64) bool {
	return rand.New(rand.NewPCG(seed, 0x63726f7764)).Float64() < crowdShare
}

// crowd waits for a moment of the fault phase, picks a live instance and starts the crowd's
// clients (goroutines of c.clients: Run waits for them).
func (c *cluster) crowd() {
	time.Sleep(c.dur(time.Second, max(c.cfg.Chaos-4*time.Second, time.Second)))
	var in *inst
	for range 20 {
		c.mu.Lock()
		var live []*inst
		for _, x := range c.insts {
			if x.created && !x.ending && !x.gone {
				live = append(live, x)
			}
		}
		c.mu.Unlock()
		if len(live) > 0 {
			in = live[c.intn(len(live))]
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if in == nil {
		return
	}
	n, vanish := store.MaxClientSessions+crowdExtra, crowdVanish
	if wave := c.float() < 0.3; wave && crowdExtra == 8 {
		// A wave of crashes (a gateway fleet restarted at once): most of the crowd vanishes
		// holding its answers, more of them than the record keeps sessions. Later clients must
		// still get in (the least recently seen silent session is let go of).
		n, vanish = store.MaxClientSessions+24, 0.8
	}
	c.edges.crowds.Add(1)
	c.edges.crowdClients.Add(int64(n))
	c.net.Logf("nemesis: a crowd of %d clients, each with a session of its own, on %s (shard %d), %.0f%% of them vanishing", n, in.id, in.shard, 100*vanish)
	for j := 1; j <= n; j++ {
		name := fmt.Sprintf("k%d", j)
		player := c.intn(4) == 0
		delay, fate := c.dur(0, 3*time.Second), c.float()
		c.mu.Lock()
		c.sessions[name] = &session{id: fmt.Sprintf("nemesis-%s-%d", name, c.seed), seen: map[string]bool{}}
		c.players[name] = player
		c.mu.Unlock()
		c.clients.Add(1) // from a goroutine of c.clients: it is not zero
		go func() {
			defer c.clients.Done()
			time.Sleep(delay)
			c.crowdClient(name, in, fate, vanish)
		}()
	}
}

// crowdClient is one client of a crowd: one add, then the first again, a second add, or nothing
// more; then an acknowledgement alone, unless it vanishes.
func (c *cluster) crowdClient(name string, in *inst, fate, vanish float64) {
	op := c.add(name, 1, in)
	s := c.sessionOf(name)
	if op == nil || !op.ok || s.seq != 1 { // not answered ok at number 1 (a re-issue after too_large)
		return
	}
	if fate < vanish {
		return // vanished
	}
	fate = (fate - vanish) / (1 - vanish) // the others' fates
	switch {
	case fate < crowdAgain:
		time.Sleep(c.dur(300*time.Millisecond, 4*time.Second))
		c.sendAgain(name, in, op, 1)
	case fate < crowdAgain+0.22:
		time.Sleep(c.dur(100*time.Millisecond, 3*time.Second))
		c.add(name, 2, in)
	}
	c.ackAlone(name, in, s.seq)
}

// ackAlone publishes client's acknowledgement alone of every answer up to ack from in (no
// number, no body, no reply expected), to every host that has the shard, once.
func (c *cluster) ackAlone(client string, in *inst, ack uint64) {
	s := c.sessionOf(client)
	body, err := wire.Canonical(map[string]any{"type": "get"})
	if err != nil {
		panic(err)
	}
	req, err := wire.DecodeRequest(wire.Subject(in.shard, in.id), "ack", "", body, c.cfg.Shards)
	if err != nil {
		panic(err)
	}
	req.ID, req.Client, req.Seq, req.Ack, req.Type, req.Body, req.Fingerprint = "", s.id, 0, ack, "", nil, 0
	sender, player := c.playerOf(client)
	for _, h := range c.hostsOf(in.shard) {
		cmd := shard.Command{Request: req, Received: time.Now(), Reply: func([]byte) {}}
		if player {
			cmd.SetSender(sender)
		}
		h.Submit(cmd)
	}
}

// sendAgain retransmits op, answered at number seq of client's session, as a client that lost
// the answer does (acknowledging nothing new): it must get the first answer. Not across an
// epoch change (a restore may have rolled the first one back).
func (c *cluster) sendAgain(client string, in *inst, op *opRec, seq uint64) {
	gen := c.audit.generation()
	c.mu.Lock()
	if gen != op.gen || in.ending || in.gone {
		c.mu.Unlock()
		return
	}
	in.inflight++ // its creator does not end it meanwhile (a retransmission past a tombstone's life may get unknown_instance)
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		in.inflight--
		c.mu.Unlock()
	}()
	c.edges.crowdAgain.Add(1)
	r, ok := c.sendWith(client, in, op.id, map[string]any{"type": "add", "op": op.id}, sendOpts{again: true, seq: seq, ack: seq - 1})
	if !ok || !r.OK && c.lostToRestore(in, r) || c.audit.generation() != gen {
		return
	}
	if pos, isInt := toInt(r.Result); r.OK && isInt && pos-1 == op.pos {
		return
	}
	if !r.OK && r.Error.Code == wire.CodeAnswerForgotten {
		c.edges.forgotten.Add(1) // its session was let go of for the crowd: applied, never again (the ledger checks it)
		return
	}
	c.violate("exactly-once: client %s sent add %s (its number %d) to %s again %v after its first answer (position %d) and got ok=%v result %v error %v, not the first answer (DESIGN 2.3)",
		client, op.id, seq, in.id, time.Since(op.acked).Round(time.Millisecond), op.pos+1, r.OK, r.Result, r.Error)
}
