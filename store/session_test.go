package store_test

import (
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
