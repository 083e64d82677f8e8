package store_test

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/tickfence/tickfence/store"
)

const ttl = 6000 // ClientSessionTTL in ticks at 20 Hz

func TestSessionsAreCopiedOnWriteAndExpire(t *testing.T) {
	var r store.Record
	r.RememberSession("a", 0, store.SeqResult{Seq: 1, Fingerprint: 11, Result: []byte("one")}, 100, ttl)
	held := r // a record in flight shares the sessions
	r.RememberSession("a", 1, store.SeqResult{Seq: 3, Fingerprint: 33}, 101, ttl)
	if len(held.Clients) != 1 || held.Clients[0].Ack != 0 || len(held.Clients[0].Done) != 1 || held.Clients[0].Done[0].Seq != 1 {
		t.Fatalf("a record holding the sessions changed: %+v", held.Clients)
	}
	if st, q := held.CheckSession("a", 1, 0, 101, ttl); st != store.SessionDuplicate || string(q.Result) != "one" {
		t.Fatalf("held: seq 1 = %v %+v", st, q)
	}
	if st, _ := r.CheckSession("a", 1, 0, 101, ttl); st != store.SessionStale {
		t.Fatalf("seq 1 below the ack: %v, want stale", st)
	}
	if st, q := r.CheckSession("a", 3, 1, 101, ttl); st != store.SessionDuplicate || q.Fingerprint != 33 {
		t.Fatalf("seq 3: %v %+v", st, q)
	}
	if st, _ := r.CheckSession("a", 2, 1, 101, ttl); st != store.SessionNew {
		t.Fatalf("seq 2 (a gap): %v, want new", st)
	}
	if st, _ := r.CheckSession("b", 1, 0, 101, ttl); st != store.SessionNew {
		t.Fatalf("another client: %v, want new", st)
	}
	// An idle session is forgotten after the TTL (in the instance's ticks), when the record changes.
	r.RememberSession("b", 0, store.SeqResult{Seq: 1}, 101+ttl+1, ttl)
	if len(r.Clients) != 1 || r.Clients[0].ID != "b" {
		t.Fatalf("sessions after the TTL: %+v, want only b", r.Clients)
	}
}

// A session holding an unacknowledged answer is evicted for a new client only by being let go
// of (issue 34.4): its commands are remembered as applied, so a retransmission is answered
// forgotten and never applied twice (a review found the opposite once: the eviction branch
// dropped answers a client could still ask for). One holding more than MaxGoneAnswers is never.
func TestSessionLetGoOfIsNeverAppliedAgain(t *testing.T) {
	var r store.Record
	r.RememberSession("victim", 9, store.SeqResult{Seq: 10, Fingerprint: 1}, 1, ttl)
	for i := range store.MaxClientSessions - 1 {
		r.RememberSession("other-"+strconv.Itoa(i), 0, store.SeqResult{Seq: 1}, uint64(2+i), ttl)
	}
	if st, _ := r.CheckSession("new", 1, 0, 100, ttl); st != store.SessionNew {
		t.Fatalf("a new client with every session holding one answer: %v, want new (the oldest is let go of)", st)
	}
	snap := r.Capped()
	r.RememberSession("new", 0, store.SeqResult{Seq: 1}, 100, ttl)
	if len(snap.Gone) != 0 || len(snap.Clients) != store.MaxClientSessions {
		t.Fatalf("a copy taken before changed: %d gone, %d sessions", len(snap.Gone), len(snap.Clients))
	}
	if st, _ := r.CheckSession("victim", 10, 9, 101, ttl); st != store.SessionForgotten {
		t.Fatalf("the victim's seq 10 again: %v, want forgotten", st)
	}
	if st, _ := r.CheckSession("victim", 11, 10, 101, ttl); st != store.SessionNew {
		t.Fatalf("the victim's next command: %v, want new", st)
	}
	// It comes back (another session is let go of for it), and its old command stays applied.
	r.RememberSession("victim", 9, store.SeqResult{Seq: 11}, 101, ttl)
	if st, _ := r.CheckSession("victim", 10, 9, 102, ttl); st != store.SessionForgotten {
		t.Fatalf("the victim's seq 10 once it has a session again: %v, want forgotten", st)
	}
	// The record reads back with what it let go of.
	b, err := store.EncodeRecord(store.Record{Kind: "k", Clients: r.Clients, Gone: r.Gone})
	if err != nil {
		t.Fatal(err)
	}
	back, err := store.DecodeRecord(b)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := back.CheckSession("other-0", 1, 0, 103, ttl); st != store.SessionForgotten {
		t.Fatalf("other-0 (let go of for the victim) after a reload: %v, want forgotten", st)
	}
	// Entries expire with the sessions they were.
	if st, _ := back.CheckSession("other-0", 1, 0, 103+ttl, ttl); st != store.SessionNew {
		t.Fatalf("other-0's command past its session's TTL: %v, want new", st)
	}

	// Sessions each holding more than MaxGoneAnswers answers are never let go of.
	var full store.Record
	for i := range store.MaxClientSessions {
		for seq := range uint64(store.MaxGoneAnswers + 1) {
			full.RememberSession("busy-"+strconv.Itoa(i), 0, store.SeqResult{Seq: seq + 1}, 1, ttl)
		}
	}
	if st, _ := full.CheckSession("new", 1, 0, 2, ttl); st != store.SessionNoRoom {
		t.Fatalf("every session holding %d answers: %v, want no room", store.MaxGoneAnswers+1, st)
	}
}

// At most MaxGoneSessions are remembered: past that, a new client waits (busy) rather than a
// session being let go of without a trace.
func TestGoneSessionsAreBounded(t *testing.T) {
	var r store.Record
	tick := uint64(1)
	for i := range store.MaxClientSessions + store.MaxGoneSessions + 1 {
		id := "c" + strconv.Itoa(i)
		st, _ := r.CheckSession(id, 1, 0, tick, ttl)
		if i < store.MaxClientSessions+store.MaxGoneSessions {
			if st != store.SessionNew {
				t.Fatalf("client %d: %v, want new (%d gone)", i, st, len(r.Gone))
			}
			r.RememberSession(id, 0, store.SeqResult{Seq: 1, Result: []byte("x")}, tick, ttl)
			tick++
			continue
		}
		if st != store.SessionNoRoom {
			t.Fatalf("client %d with %d sessions let go of: %v, want no room", i, len(r.Gone), st)
		}
	}
	if len(r.Gone) != store.MaxGoneSessions {
		t.Fatalf("%d gone, want %d", len(r.Gone), store.MaxGoneSessions)
	}
	b, err := store.EncodeRecord(r)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d sessions holding one answer and %d let go of: %d bytes encoded", len(r.Clients), len(r.Gone), len(b))
	// Once the first ones would have expired, their places are free again.
	if st, _ := r.CheckSession("late", 1, 0, 1+ttl+1, ttl); st != store.SessionNew {
		t.Fatalf("after the TTL: %v, want new", st)
	}
}

// Review finding: ages are measured in the instance's ticks, so an owner whose wall clock is
// ahead does not forget what an earlier owner remembered.
func TestAgesAreTicksNotWallClocks(t *testing.T) {
	var r store.Record
	r.RememberSession("c1", 0, store.SeqResult{Seq: 7, Fingerprint: 1}, 500, ttl)
	r.RememberSession("c2", 0, store.SeqResult{Seq: 1}, 501, ttl) // the next tick, whatever the clock says
	if st, _ := r.CheckSession("c1", 7, 0, 501, ttl); st != store.SessionDuplicate {
		t.Fatalf("c1's unacknowledged seq 7: %v", st)
	}
	r.RememberRequest(store.Request{ID: "a1", At: 500}, ttl)
	r.RememberRequest(store.Request{ID: "b1", At: 501}, ttl)
	if _, ok := r.FindRequest("a1"); !ok {
		t.Fatal("a1, applied one tick earlier, was forgotten")
	}
	_ = time.Second
}

func TestOpaqueRequestsBoundedByAgeAndBytes(t *testing.T) {
	var r store.Record
	r.RememberRequest(store.Request{ID: "old", At: 1}, ttl)
	r.RememberRequest(store.Request{ID: "new", At: 2 + ttl}, ttl)
	if _, ok := r.FindRequest("old"); ok || len(r.Reqs) != 1 {
		t.Fatalf("a request older than the TTL was kept: %+v", r.Reqs)
	}
	big := make([]byte, 4<<10)
	for i := range 20 {
		r.RememberRequest(store.Request{ID: string(rune('a' + i)), Result: big, At: 3 + ttl}, ttl)
	}
	n := 0
	for _, q := range r.Reqs {
		n += len(q.Result)
	}
	if n > store.RequestWindowBytes || len(r.Reqs) < 2 {
		t.Fatalf("%d requests with %d bytes of answers kept, want at most %d bytes", len(r.Reqs), n, store.RequestWindowBytes)
	}
	if _, ok := r.FindRequest("t"); !ok {
		t.Fatal("the newest request was dropped")
	}
}

// Review finding: malformed sessions are refused when a record is decoded.
func TestDecodeRefusesInconsistentSessions(t *testing.T) {
	for name, cs := range map[string][]store.ClientSession{
		"duplicate IDs":     {{ID: "c"}, {ID: "c"}},
		"unsorted answers":  {{ID: "c", Done: []store.SeqResult{{Seq: 9}, {Seq: 3}}}},
		"answer at the ack": {{ID: "c", Ack: 5, Done: []store.SeqResult{{Seq: 5}}}},
		"duplicate answers": {{ID: "c", Done: []store.SeqResult{{Seq: 9}, {Seq: 9}}}},
		"empty client ID":   {{ID: ""}},
	} {
		b, err := store.EncodeRecord(store.Record{Kind: "k", Clients: cs})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.DecodeRecord(b); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
}

// copyingRemember is RememberSession as it was before answers were appended in place: every
// session's answers copied on every command. The reference the in-place version must match.
func copyingRemember(r *store.Record, client string, ack uint64, q store.SeqResult, tick, ttl uint64) {
	live := func(s *store.ClientSession) bool { return tick < s.Seen || tick-s.Seen <= ttl }
	out := make([]store.ClientSession, 0, len(r.Clients)+1)
	var mine *store.ClientSession
	for _, s := range r.Clients {
		switch {
		case s.ID == client:
			out = append(out, s)
			mine = &out[len(out)-1]
		case live(&s):
			out = append(out, s)
		}
	}
	if mine == nil {
		if len(out) >= store.MaxClientSessions {
			oldest := -1
			for i := range out {
				if len(out[i].Done) == 0 && (oldest < 0 || out[i].Seen < out[oldest].Seen) {
					oldest = i
				}
			}
			// Else the least recently seen whose applied numbers above its ack, with those of an
			// earlier entry of its client, are few enough, while fewer than MaxGoneSessions
			// entries live: it is let go of (a new entry replaces its client's earlier one).
			liveGone := map[uint64]store.GoneSession{}
			for _, g := range r.Gone {
				if tick < g.Seen || tick-g.Seen <= ttl {
					liveGone[g.Client] = g
				}
			}
			entry := func(s store.ClientSession) (store.GoneSession, bool) {
				g := store.GoneSession{Client: store.ClientHash(s.ID), Ack: s.Ack, Seen: s.Seen}
				seqs := map[uint64]bool{}
				if old, ok := liveGone[g.Client]; ok {
					g.Ack, g.Seen = max(g.Ack, old.Ack), max(g.Seen, old.Seen)
					for _, d := range old.Done {
						seqs[d] = true
					}
				}
				for _, d := range s.Done {
					seqs[d.Seq] = true
				}
				for q := range seqs {
					if q > g.Ack {
						g.Done = append(g.Done, q)
					}
				}
				slices.Sort(g.Done)
				return g, len(g.Done) <= store.MaxGoneAnswers
			}
			if oldest < 0 && len(liveGone) < store.MaxGoneSessions {
				for i := range out {
					if _, ok := entry(out[i]); ok && (oldest < 0 || out[i].Seen < out[oldest].Seen) {
						oldest = i
					}
				}
				if oldest >= 0 {
					g, _ := entry(out[oldest])
					var gone []store.GoneSession
					for _, e := range r.Gone {
						if _, ok := liveGone[e.Client]; ok && e.Client != g.Client {
							gone = append(gone, e)
						}
					}
					r.Gone = append(gone, g)
				}
			}
			if oldest < 0 {
				oldest = 0
				for i := range out {
					if out[i].Seen < out[oldest].Seen {
						oldest = i
					}
				}
			}
			out = slices.Delete(out, oldest, oldest+1)
		}
		out = append(out, store.ClientSession{ID: client})
		mine = &out[len(out)-1]
	}
	mine.Seen = tick
	mine.Ack = max(mine.Ack, ack)
	done := make([]store.SeqResult, 0, len(mine.Done)+1)
	for _, d := range mine.Done {
		if d.Seq > mine.Ack {
			done = append(done, d)
		}
	}
	if q.Seq > mine.Ack {
		i, _ := slices.BinarySearchFunc(done, q.Seq, func(d store.SeqResult, seq uint64) int { return cmp.Compare(d.Seq, seq) })
		done = slices.Insert(done, i, q)
	}
	mine.Done = done
	r.Clients = out
}

func deepSessions(cs []store.ClientSession) []store.ClientSession {
	out := make([]store.ClientSession, len(cs))
	for i, c := range cs {
		c.Done = slices.Clone(c.Done)
		out[i] = c
	}
	return out
}

func normDone(cs []store.ClientSession) []store.ClientSession {
	cs = deepSessions(cs)
	for i := range cs {
		if len(cs[i].Done) == 0 {
			cs[i].Done = nil
		}
	}
	return cs
}

// A middle insert (a seq below one already answered) while a capped copy is held: the copy keeps
// what it held (a review found no test making a middle insert while a copy was held).
func TestSessionMiddleInsertKeepsCappedCopy(t *testing.T) {
	var r store.Record
	for _, seq := range []uint64{1, 2, 4} { // Done's cap grows to 4 while its length is 3
		r.RememberSession("a", 0, store.SeqResult{Seq: seq, Result: []byte{byte(seq)}}, 1, ttl)
	}
	snap := r.Capped()
	want := deepSessions(snap.Clients)
	r.RememberSession("a", 0, store.SeqResult{Seq: 3, Result: []byte{3}}, 1, ttl) // middle insert
	if !reflect.DeepEqual(deepSessions(snap.Clients), want) {
		t.Fatalf("capped copy changed by a middle insert: %+v, want %+v", snap.Clients, want)
	}
}

// Random commands of up to 70 clients (session eviction past MaxClientSessions, expiry, acks that
// drop every answer, seqs that fill gaps below answered ones), capped snapshots and reverts to
// them: the live record equals the copying implementation's, and no snapshot ever changes.
func TestSessionsMatchCopyingImplementation(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const ttlT = 400
	type held struct {
		rec, ref store.Record
		want     []store.ClientSession
	}
	stats := map[store.SessionCheck]int{}
	evicted := 0
	maxLen := 0
	for round := range 4 {
		var live, ref store.Record
		var snaps []held
		applied := map[string]map[uint64]bool{}
		acks := map[string]uint64{}
		tick := uint64(0)
		for step := range 1000 {
			if rng.IntN(4) == 0 {
				tick++
			}
			client := "c" + strconv.Itoa(rng.IntN(70))
			if applied[client] == nil {
				applied[client] = map[uint64]bool{}
			}
			base := acks[client]
			seq := base + 1 + uint64(rng.IntN(10)) // may fill a gap below an answered seq
			var ack uint64
			switch rng.IntN(4) {
			case 0: // acknowledge everything applied so far
				for s := range applied[client] {
					ack = max(ack, s)
				}
				ack = max(ack, base)
			case 1:
				ack = base + uint64(rng.IntN(3))
			default:
				ack = base
			}
			if seq <= ack {
				seq = ack + 1 + uint64(rng.IntN(3))
			}
			st, _ := live.CheckSession(client, seq, ack, tick, ttlT)
			rst, _ := ref.CheckSession(client, seq, ack, tick, ttlT)
			if st != rst {
				t.Fatalf("round %d step %d: CheckSession %v, reference %v", round, step, st, rst)
			}
			stats[st]++
			maxLen = max(maxLen, len(live.Clients))
			if st == store.SessionNew {
				before := len(live.Clients)
				q := store.SeqResult{Seq: seq, Fingerprint: seq ^ 0xabc, Result: []byte(client + "/" + strconv.FormatUint(seq, 10))}
				live.RememberSession(client, ack, q, tick, ttlT)
				copyingRemember(&ref, client, ack, q, tick, ttlT)
				if len(live.Clients) <= before && before >= store.MaxClientSessions {
					evicted++
				}
				applied[client][seq] = true
				acks[client] = max(acks[client], ack)
			}
			if !reflect.DeepEqual(normDone(live.Clients), normDone(ref.Clients)) {
				t.Fatalf("round %d step %d: sessions differ from the copying implementation:\n%+v\nwant\n%+v", round, step, live.Clients, ref.Clients)
			}
			switch rng.IntN(12) {
			case 0:
				c := live.Capped()
				snaps = append(snaps, held{c, ref, deepSessions(c.Clients)})
			case 1:
				if len(snaps) > 0 {
					h := snaps[rng.IntN(len(snaps))]
					live, ref = h.rec.Capped(), h.ref
					// the test's own acks and applied seqs stay as lower bounds: CheckSession refuses what no longer fits
				}
			}
			for i, h := range snaps {
				if !reflect.DeepEqual(deepSessions(h.rec.Clients), h.want) {
					t.Fatalf("round %d step %d: snapshot %d changed", round, step, i)
				}
			}
			if len(snaps) > 8 {
				snaps = snaps[1:]
			}
		}
	}
	t.Logf("checks %v (0 new, 1 dup, 2 stale, 3 full, 4 no room); evictions or expiries at the bound %d, most sessions %d", stats, evicted, maxLen)
}

// The answers above the ack are kept in ascending order, each once, whatever order they came in.
func TestSessionAnswersStayOrdered(t *testing.T) {
	var r store.Record
	for _, seq := range []uint64{1, 2, 5, 3, 4, 9, 6} {
		r.RememberSession("a", 0, store.SeqResult{Seq: seq}, 1, ttl)
	}
	r.RememberSession("a", 3, store.SeqResult{Seq: 10}, 2, ttl)
	var got []uint64
	for _, d := range r.Clients[0].Done {
		got = append(got, d.Seq)
	}
	if want := []uint64{4, 5, 6, 9, 10}; !slices.Equal(got, want) {
		t.Fatalf("answers %v, want %v", got, want)
	}
}

func BenchmarkRememberSessionFullWindow(b *testing.B) {
	var r store.Record
	seq := uint64(0)
	res := []byte("answer of about forty bytes, as a demo attack's")
	for range store.MaxClientInFlight - 1 {
		seq++
		r.RememberSession("gen", 0, store.SeqResult{Seq: seq, Result: res}, 1, ttl)
	}
	b.ReportAllocs()
	for b.Loop() {
		seq++
		r.RememberSession("gen", seq-store.MaxClientInFlight+1, store.SeqResult{Seq: seq, Result: res}, 2, ttl)
	}
}

// An acknowledgement alone drops the answers it covers, and the session it frees gives its place
// to a new client when every place is taken (issue 34.4); a copy taken before keeps its answers.
func TestAckSessionFreesThePlace(t *testing.T) {
	var r store.Record
	for i := range store.MaxClientSessions {
		c := fmt.Sprintf("c%d", i)
		for seq := range uint64(store.MaxGoneAnswers + 1) { // more than a session let go of may hold
			r.RememberSession(c, 0, store.SeqResult{Seq: seq + 1, Result: []byte("ok")}, 1, 100)
		}
	}
	if st, _ := r.CheckSession("new", 1, 0, 2, 100); st != store.SessionNoRoom {
		t.Fatalf("a new client with every session holding an answer: %v, want store.SessionNoRoom", st)
	}
	snap := r.Capped()
	if !r.AckSession("c7", store.MaxGoneAnswers+1) {
		t.Fatal("AckSession changed nothing")
	}
	if r.AckSession("c7", store.MaxGoneAnswers+1) || r.AckSession("nobody", 5) {
		t.Fatal("a repeated or unknown acknowledgement changed something")
	}
	if st, _ := r.CheckSession("new", 1, 0, 2, 100); st != store.SessionNew {
		t.Fatalf("a new client after c7 acknowledged: %v, want store.SessionNew", st)
	}
	if st, _ := r.CheckSession("c7", 1, 0, 2, 100); st != store.SessionStale {
		t.Fatalf("c7's acknowledged command: %v, want store.SessionStale", st)
	}
	for _, c := range snap.Clients {
		if c.ID == "c7" && len(c.Done) != store.MaxGoneAnswers+1 {
			t.Fatal("the acknowledgement changed a copy taken before it")
		}
	}
}

// Random clients (more than MaxClientSessions, with gaps in their numbers, pipelined commands
// up to MaxGoneAnswers+2 in flight, acknowledgements alone, and clients that vanish), all within
// one TTL: no command ever applied twice, whatever was let go of; a new client is refused only
// while every session holds more answers than may be let go of.
func TestSessionsNeverApplyTwice(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var r store.Record
	applied := map[string]map[uint64]bool{}
	next := map[string]uint64{}
	acked := map[string]uint64{}
	stats := map[store.SessionCheck]int{}
	tick := uint64(1)
	for step := range 20000 {
		if rng.IntN(8) == 0 {
			tick++
		}
		client := "c" + strconv.Itoa(rng.IntN(150))
		if applied[client] == nil {
			applied[client] = map[uint64]bool{}
		}
		var seq uint64
		var unacked []uint64 // applied, not acknowledged: the client may still send them again
		for q := range applied[client] {
			if q > acked[client] {
				unacked = append(unacked, q)
			}
		}
		if len(unacked) > 0 && rng.IntN(3) == 0 { // a retransmission of an applied one
			seq = unacked[rng.IntN(len(unacked))]
		} else {
			next[client] += 1 + uint64(rng.IntN(3)) // gaps: other instances' numbers
			seq = next[client]
		}
		if rng.IntN(4) == 0 { // everything applied so far is answered: acknowledge it
			for q := range applied[client] {
				acked[client] = max(acked[client], q)
			}
			if rng.IntN(2) == 0 {
				r.AckSession(client, acked[client])
			}
		}
		ack := acked[client]
		st, _ := r.CheckSession(client, seq, ack, tick, ttl)
		stats[st]++
		if st == store.SessionNew && applied[client][seq] {
			t.Fatalf("step %d: %s's command %d, applied before, is new again (%d gone)", step, client, seq, len(r.Gone))
		}
		if st == store.SessionNoRoom {
			for _, c := range r.Clients {
				merged := slices.ContainsFunc(r.Gone, func(g store.GoneSession) bool { return g.Client == store.ClientHash(c.ID) })
				if len(c.Done) <= store.MaxGoneAnswers && len(r.Gone) < store.MaxGoneSessions && tick-c.Seen >= ttl/store.GoneSilence && !merged {
					t.Fatalf("step %d: a new client refused while %s holds %d answers", step, c.ID, len(c.Done))
				}
			}
		}
		if st == store.SessionNew {
			r.RememberSession(client, ack, store.SeqResult{Seq: seq}, tick, ttl)
			applied[client][seq] = true
		}
	}
	if stats[store.SessionForgotten] == 0 || len(r.Gone) == 0 {
		t.Fatalf("nothing was let go of: %v", stats)
	}
	t.Logf("checks %v (0 new, 1 dup, 2 stale, 3 full, 4 no room, 5 sender full, 6 forgotten); %d sessions, %d let go of", stats, len(r.Clients), len(r.Gone))
}

// A retransmission refreshes its session's age: the client is not silent, and the session let go
// of for a new client is another's (the least recently seen).
func TestRetransmittingClientIsNotLetGoOf(t *testing.T) {
	var r store.Record
	for i := range store.MaxClientSessions {
		r.RememberSession("c"+strconv.Itoa(i), 0, store.SeqResult{Seq: 1}, uint64(1+i), ttl)
	}
	snap := r.Capped()
	if !r.TouchSession("c0", 100) || r.TouchSession("c0", 100) || r.TouchSession("nobody", 101) {
		t.Fatal("TouchSession: want a change for c0 at 100 only")
	}
	if snap.Clients[0].Seen != 1 {
		t.Fatal("TouchSession changed a copy taken before")
	}
	r.RememberSession("new", 0, store.SeqResult{Seq: 1}, 101, ttl)
	if st, _ := r.CheckSession("c0", 1, 0, 102, ttl); st != store.SessionDuplicate {
		t.Fatalf("c0, which retransmitted at 100: %v, want its session kept (duplicate)", st)
	}
	if st, _ := r.CheckSession("c1", 1, 0, 102, ttl); st != store.SessionForgotten {
		t.Fatalf("c1, silent since 2: %v, want forgotten", st)
	}
}
