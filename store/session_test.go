package store_test

import (
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

// Review finding: a session holding an unacknowledged answer must never be evicted for a new
// client (its retransmission would apply twice); the new client is refused instead.
func TestSessionWithUnacknowledgedAnswersIsNeverEvicted(t *testing.T) {
	var r store.Record
	r.RememberSession("victim", 0, store.SeqResult{Seq: 10, Fingerprint: 1}, 1, ttl)
	for i := range store.MaxClientSessions - 1 {
		r.RememberSession("other-"+strconv.Itoa(i), 0, store.SeqResult{Seq: 1}, uint64(2+i), ttl)
	}
	if st, _ := r.CheckSession("new", 1, 0, 100, ttl); st != store.SessionNoRoom {
		t.Fatalf("a new client with every session holding answers: %v, want no room", st)
	}
	// One session acknowledges its answers: it may make room, the victim's still may not.
	r.RememberSession("other-5", 1, store.SeqResult{Seq: 2}, 100, ttl)
	r.RememberSession("other-5", 2, store.SeqResult{Seq: 0}, 101, ttl) // ack only
	if st, _ := r.CheckSession("new", 1, 0, 102, ttl); st != store.SessionNew {
		t.Fatalf("a new client with a session free of answers: %v, want new", st)
	}
	r.RememberSession("new", 0, store.SeqResult{Seq: 1}, 102, ttl)
	if st, _ := r.CheckSession("victim", 10, 0, 103, ttl); st != store.SessionDuplicate {
		t.Fatalf("the victim's unacknowledged seq 10 is now %v, want a duplicate (its first answer)", st)
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

// A session's answers are appended in place past their length: a copy taken with Capped keeps
// exactly what it held while the record goes on being remembered into, and the copy can itself be
// remembered into (a revert to it) without touching the record's, whatever the order of seqs.
func TestSessionsCappedCopiesKeepWhatTheyHold(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	type held struct {
		rec  store.Record
		want []store.ClientSession // deep copy at the time
	}
	deep := func(cs []store.ClientSession) []store.ClientSession {
		out := make([]store.ClientSession, len(cs))
		for i, c := range cs {
			c.Done = slices.Clone(c.Done)
			out[i] = c
		}
		return out
	}
	for round := range 200 {
		var live store.Record
		var snaps []held
		next := map[string]uint64{}
		acks := map[string]uint64{}
		for step := range 300 {
			client := "c" + strconv.Itoa(rng.IntN(3))
			seq := next[client] + 1
			if rng.IntN(5) == 0 && seq > 2 { // out of order: an earlier seq not yet applied
				seq = next[client] + 1 + uint64(rng.IntN(3))
			}
			if rng.IntN(3) == 0 {
				acks[client] = max(acks[client], min(next[client], acks[client]+uint64(rng.IntN(8))))
			}
			if st, _ := live.CheckSession(client, seq, acks[client], uint64(step), ttl); st == store.SessionNew {
				live.RememberSession(client, acks[client], store.SeqResult{Seq: seq, Fingerprint: seq, Result: []byte(client)}, uint64(step), ttl)
				next[client] = max(next[client], seq)
			}
			switch rng.IntN(10) {
			case 0:
				c := live.Capped()
				snaps = append(snaps, held{c, deep(c.Clients)})
			case 1: // revert to a copy: the record goes on from it
				if len(snaps) > 0 {
					live = snaps[rng.IntN(len(snaps))].rec.Capped()
				}
			}
			for i, h := range snaps {
				if !reflect.DeepEqual(deep(h.rec.Clients), h.want) {
					t.Fatalf("round %d step %d: copy %d changed:\n%+v\nwant\n%+v", round, step, i, h.rec.Clients, h.want)
				}
			}
		}
	}
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
