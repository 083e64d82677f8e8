package store_test

import (
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/tickfence/tickfence/internal/fnvcollide"
	"github.com/tickfence/tickfence/store"
)

// Review 34 (hash collision): GoneSession keeps only the 64-bit FNV-1a of a client ID, and a
// gone entry matches every client of that hash, whoever sent it. A player (its IDs prefixed
// "s:<digest> " by the transport) computes in under a second a client ID of its own whose
// hash is a victim's (here a trusted natscmd client, "go-<16 hex>"), sends one command
// numbered 2^62 with ack 2^62-1 (any ack below the number passes wire.DecodeCommand), and lets
// that session go by opening MaxSenderSessions more of its own (the per-sender eviction lets
// go of its own least recently seen one). The record now holds {hash(victim), ack 2^62-1}: every
// command of the victim — it has a session or not, it was ever let go of or not — is answered
// answer_forgotten, "applied, never applied again", and is never applied. The comment on
// ClientHash ("can only make the later one's commands look applied") hides that the later one
// is the victim and that "look applied" means "dropped while the client is told it was applied";
// the player refreshes the entry (a new session under the same ID, let go again) to keep it
// for as long as it likes. DESIGN 9 ("no sender reaches another's exactly-once state") is broken.
//
// Fixed: ClientHash is now 8 bytes of SHA-256, so the attack's FNV-1a preimage no longer
// collides, and the victim's commands are applied.
func TestR34HashCollisionForgetsAnotherClientsCommands(t *testing.T) {
	victim := "go-5f0c2a9e81d3b476" // natscmd.NewClient's form
	sender := "s:0123456789abcdef " // shard.SenderKey(player) + " "
	suffix, ok := fnvcollide.Preimage(sender, fnv64a(victim))
	if !ok {
		t.Fatal("no preimage found")
	}
	attacker := sender + suffix
	if fnv64a(attacker) != fnv64a(victim) || store.SenderOf(attacker) != sender || store.SenderOf(victim) != "" {
		t.Fatalf("setup: %q", attacker)
	}
	t.Logf("the player's client ID %q (as the transport prefixes it) has the FNV-1a hash of %q: %#x", attacker, victim, fnv64a(victim))

	var r store.Record
	tick := uint64(1)
	// The victim works normally: its command 1 applied and answered, acknowledged with command 2.
	r.RememberSession(victim, 0, store.SeqResult{Seq: 1, Result: []byte("one")}, tick, ttl)
	tick++
	// The player: its colliding client sends one command numbered 2^62 (ack 2^62-1), then four
	// more clients of its own one command each; the fifth lets the first go.
	const big = uint64(1) << 62
	send := func(id string, seq, ack uint64) {
		t.Helper()
		if st, _ := r.CheckSession(id, seq, ack, tick, ttl); st != store.SessionNew {
			t.Fatalf("%q %d: %v, want new", id, seq, st)
		}
		r.RememberSession(id, ack, store.SeqResult{Seq: seq, Result: []byte("x")}, tick, ttl)
		tick += ttl / store.GoneSilence // silent long enough to be let go of
	}
	send(attacker, big, big-1)
	for i := range store.MaxSenderSessions {
		send(sender+"own-"+strconv.Itoa(i), 1, 0)
	}
	if len(r.Gone) != 1 || r.Gone[0].Client != store.ClientHash(attacker) {
		t.Fatalf("gone: %+v", r.Gone)
	}
	// The victim's next command, never applied: it must be new.
	if st, _ := r.CheckSession(victim, 2, 1, tick, ttl); st != store.SessionNew {
		t.Errorf("the victim's (trusted) command 2, never applied: %v, want new (%d = SessionForgotten: answered answer_forgotten, i.e. 'applied', and dropped)", st, st)
	}
	// A fresh victim client of the same ID with no session at all: likewise.
	var r2 store.Record
	r2.Gone = r.Gone
	if st, _ := r2.CheckSession(victim, 1, 0, tick, ttl); st != store.SessionNew {
		t.Errorf("the victim's first command, no session: %v, want new", st)
	}
}

// Review 34 (gone budget): MaxGoneSessions is one budget for the whole record, and a player fills
// it alone: with its MaxSenderSessions sessions each holding one answer, every new client ID of
// its own lets go of its own oldest (one command each; 128 commands is ~3 s of the default
// player quota). Then a trusted client facing 64 silent sessions — what issue 34.4 fixed — is
// refused busy again (SessionNoRoom) for a TTL, and the player can keep it so. Before the change
// the player's fifth client was refused (sender full) and consumed nothing of anyone's.
func TestR34OnePlayerFillsTheGoneBudget(t *testing.T) {
	var r store.Record
	tick := uint64(1)
	for i := range store.MaxClientSessions - store.MaxSenderSessions { // silent trusted clients, one answer each
		r.RememberSession("gw-"+strconv.Itoa(i), 0, store.SeqResult{Seq: 1}, tick, ttl)
		tick++
	}
	player := "s:00000000deadbeef "
	n := 0
	for i := 0; ; i++ {
		id := player + "c" + strconv.Itoa(i)
		st, _ := r.CheckSession(id, 1, 0, tick, ttl)
		if st != store.SessionNew {
			break
		}
		r.RememberSession(id, 0, store.SeqResult{Seq: 1}, tick, ttl)
		tick += ttl / store.GoneSilence // each of its clients silent long enough to be let go of
		n++
	}
	t.Logf("one player opened %d client IDs; %d sessions, %d let go of", n, len(r.Clients), len(r.Gone))
	if n != store.MaxSenderSessions+store.MaxSenderGone || len(r.Gone) != store.MaxSenderGone {
		t.Errorf("the player opened %d client IDs, %d let go of; want %d and %d (fixed: a sender's own budget of sessions let go of)",
			n, len(r.Gone), store.MaxSenderSessions+store.MaxSenderGone, store.MaxSenderGone)
	}
	if st, _ := r.CheckSession("gw-new", 1, 0, tick, ttl); st != store.SessionNew {
		t.Errorf("a new trusted client, the trusted sessions silent with one answer each, after one player's churn: %v, want new (4 = SessionNoRoom: busy for a TTL)", st)
	}
}

// Review 34 (minor): ApproxSize ("at least about the encoded size") counts a gone entry as
// 40+9n bytes; it encodes as up to 45+9n (hash 9, ack 9, seen 9, names and headers 18).
func TestR34ApproxSizeCoversGoneEntries(t *testing.T) {
	r := store.Record{Kind: "k"}
	for i := range store.MaxGoneSessions {
		r.Gone = append(r.Gone, store.GoneSession{Client: ^uint64(i), Ack: 1 << 40, Done: []uint64{1<<40 + 1}, Seen: 1 << 40})
	}
	b, err := store.EncodeRecord(r)
	if err != nil {
		t.Fatal(err)
	}
	if r.ApproxSize() < len(b) {
		t.Errorf("ApproxSize %d < encoded %d bytes", r.ApproxSize(), len(b))
	}
}

// Review 34: DecodeRecord refuses two client sessions of one ID, but not two gone entries of one
// hash. CheckSession consults only the first live one (Record.gone), so the second's applied
// commands are new again: here command 3, applied (below the second entry's ack 5), is applied
// a second time. Only a hand-made or corrupt record has this, but DecodeRecord's checks exist for
// exactly that.
func TestR34DecodeRefusesDuplicateGoneHashes(t *testing.T) {
	h := store.ClientHash("c")
	b, err := store.EncodeRecord(store.Record{Kind: "k", Tick: 10, Gone: []store.GoneSession{
		{Client: h, Ack: 0, Done: []uint64{1}, Seen: 10}, {Client: h, Ack: 5, Seen: 10}}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := store.DecodeRecord(b)
	if err == nil {
		if st, _ := r.CheckSession("c", 3, 0, 11, ttl); st == store.SessionNew {
			t.Errorf("a record with two gone entries of one hash decodes, and command 3 (below the second's ack 5) is new again")
		}
	}
}

// Review 34 (design): "let go of" is meant for clients that vanished, but the session let go of
// is only the least recently seen, however recently that was. 64 clients that each sent one
// command in the last tick (their answers are still waiting for the write that stores them)
// and a 65th: one of the 64 is let go of at once. If its answer is then lost (the write's outcome
// unknown, a node failing over), its retransmission gets answer_forgotten instead of its answer,
// so the client never learns the result. Before, the 65th client waited (busy).
func TestR34ActiveClientIsLetGoOf(t *testing.T) {
	var r store.Record
	for i := range store.MaxClientSessions {
		r.RememberSession("active-"+strconv.Itoa(i), 0, store.SeqResult{Seq: 1}, 100, ttl)
	}
	r.RememberSession("new", 0, store.SeqResult{Seq: 1}, 101, ttl)
	for i := range store.MaxClientSessions {
		if st, _ := r.CheckSession("active-"+strconv.Itoa(i), 1, 0, 102, ttl); st == store.SessionForgotten {
			t.Errorf("active-%d, seen 1 tick before, holding an answer not yet delivered, was let go of (a minimum silence, e.g. a few seconds of ticks, would keep it)", i)
		}
	}
}

// Review 34: a model of the instance's use of the record — trusted clients and three players
// (prefixed IDs, MaxSenderSessions each), pipelined numbers with gaps, retransmissions of any
// unacknowledged number (TouchSession on a duplicate, as apply does), acknowledgements alone, and
// writes: a snapshot stored (Capped), and reverts to it (a refused write), the clients' answers
// given only for what a stored snapshot holds. All within one TTL. Never: a command applied
// twice, answer_forgotten or duplicate for one not applied, stale for one above the client's ack.
func TestR34ModelNeverAppliesTwice(t *testing.T) {
	for _, ttl := range []uint64{ttl, 40} { // 40: sessions and gone entries expire all the time
		t.Run(strconv.FormatUint(ttl, 10), func(t *testing.T) { modelNeverAppliesTwice(t, ttl) })
	}
}

func modelNeverAppliesTwice(t *testing.T, ttl uint64) {
	type client struct {
		id                    string
		next, ack             uint64
		sent                  map[uint64]uint64 // number: tick first sent
		givenUp               map[uint64]bool
		applied, storeApplied map[uint64]bool
	}
	for seed := range uint64(6) {
		rng := rand.New(rand.NewPCG(seed, 34))
		var cls []*client
		for i := range 90 {
			cls = append(cls, &client{id: "t" + strconv.Itoa(i)})
		}
		for p := range 3 {
			for i := range 12 {
				cls = append(cls, &client{id: fmt.Sprintf("s:%016x c%d", p, i)})
			}
		}
		for _, c := range cls {
			c.sent, c.givenUp, c.applied, c.storeApplied = map[uint64]uint64{}, map[uint64]bool{}, map[uint64]bool{}, map[uint64]bool{}
		}
		var r, stored store.Record
		stats := map[store.SessionCheck]int{}
		tick := uint64(1)
		for step := range 8000 {
			if rng.IntN(6) == 0 {
				tick++
			}
			c := cls[rng.IntN(len(cls))]
			// The client's ack: every number up to it answered (stored) or given up.
			var nums []uint64
			for q := range c.sent {
				nums = append(nums, q)
			}
			slices.Sort(nums)
			for _, q := range nums {
				if q <= c.ack {
					continue
				}
				if !c.storeApplied[q] && !c.givenUp[q] {
					break
				}
				if rng.IntN(3) != 0 {
					c.ack = q
				}
			}
			switch op := rng.IntN(16); {
			case op == 0:
				stored = r.Capped()
				for _, x := range cls {
					x.storeApplied = maps.Clone(x.applied)
				}
				continue
			case op == 1 && rng.IntN(2) == 0:
				r = stored.Capped()
				for _, x := range cls {
					x.applied = maps.Clone(x.storeApplied)
				}
				continue
			case op == 2:
				if c.ack > 0 {
					r.AckSession(c.id, c.ack)
				}
				continue
			}
			var seq uint64
			var pending []uint64
			for q := range c.sent {
				if q > c.ack && !c.givenUp[q] && tick-c.sent[q] <= ttl { // never past the TTL
					pending = append(pending, q)
				}
			}
			if len(pending) > 0 && rng.IntN(3) == 0 {
				seq = pending[rng.IntN(len(pending))]
			} else {
				c.next += 1 + uint64(rng.IntN(2))
				seq = c.next
				c.sent[seq] = tick
			}
			st, _ := r.CheckSession(c.id, seq, c.ack, tick, ttl)
			stats[st]++
			switch st {
			case store.SessionNew:
				if c.applied[seq] {
					t.Fatalf("seed %d step %d: %s's %d, applied, is new again", seed, step, c.id, seq)
				}
				r.RememberSession(c.id, c.ack, store.SeqResult{Seq: seq}, tick, ttl)
				c.applied[seq] = true
			case store.SessionDuplicate:
				if !c.applied[seq] {
					t.Fatalf("seed %d step %d: %s's %d duplicate, never applied", seed, step, c.id, seq)
				}
				r.TouchSession(c.id, tick)
			case store.SessionForgotten:
				if !c.applied[seq] {
					t.Fatalf("seed %d step %d: %s's %d answer_forgotten, never applied", seed, step, c.id, seq)
				}
			case store.SessionStale:
				t.Fatalf("seed %d step %d: %s's %d stale, its ack %d", seed, step, c.id, seq, c.ack)
			case store.SessionNoRoom, store.SessionSenderFull:
				if c.applied[seq] {
					t.Fatalf("seed %d step %d: %s's %d, applied, refused %v: it would be applied again with room", seed, step, c.id, seq, st)
				}
				c.givenUp[seq] = true
			}
		}
		if seed == 0 {
			t.Logf("checks %v; %d sessions, %d gone", stats, len(r.Clients), len(r.Gone))
		}
	}
}

func fnv64a(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}
