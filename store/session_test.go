package store_test

import (
	"testing"
	"time"

	"github.com/tickfence/tickfence/store"
)

func TestSessionsAreCopiedOnWriteAndExpire(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	var r store.Record
	r.RememberSession("a", 0, store.SeqResult{Seq: 1, Fingerprint: 11, Result: []byte("one")}, now)
	held := r // a record in flight shares the sessions
	r.RememberSession("a", 1, store.SeqResult{Seq: 3, Fingerprint: 33}, now)
	if len(held.Clients) != 1 || held.Clients[0].Ack != 0 || len(held.Clients[0].Done) != 1 || held.Clients[0].Done[0].Seq != 1 {
		t.Fatalf("a record holding the sessions changed: %+v", held.Clients)
	}
	if st, q := held.CheckSession("a", 1, 0); st != store.SessionDuplicate || string(q.Result) != "one" {
		t.Fatalf("held: seq 1 = %v %+v", st, q)
	}
	if st, _ := r.CheckSession("a", 1, 0); st != store.SessionStale {
		t.Fatalf("seq 1 below the ack: %v, want stale", st)
	}
	if st, q := r.CheckSession("a", 3, 1); st != store.SessionDuplicate || q.Fingerprint != 33 {
		t.Fatalf("seq 3: %v %+v", st, q)
	}
	if st, _ := r.CheckSession("a", 2, 1); st != store.SessionNew {
		t.Fatalf("seq 2 (a gap): %v, want new", st)
	}
	if st, _ := r.CheckSession("b", 1, 0); st != store.SessionNew {
		t.Fatalf("another client: %v, want new", st)
	}
	// An idle session is forgotten after ClientSessionTTL, when the record next changes.
	later := now.Add(store.ClientSessionTTL + time.Second)
	r.RememberSession("b", 0, store.SeqResult{Seq: 1}, later)
	if len(r.Clients) != 1 || r.Clients[0].ID != "b" {
		t.Fatalf("sessions after the TTL: %+v, want only b", r.Clients)
	}
	// At most MaxClientSessions: the least recently seen goes.
	for i := range store.MaxClientSessions + 5 {
		r.RememberSession(string(rune('A'+i%26))+string(rune('a'+i/26)), 0, store.SeqResult{Seq: 1}, later.Add(time.Duration(i)*time.Millisecond))
	}
	if len(r.Clients) != store.MaxClientSessions {
		t.Fatalf("%d sessions kept, want %d", len(r.Clients), store.MaxClientSessions)
	}
	for _, c := range r.Clients {
		if c.ID == "b" {
			t.Fatal("the least recently seen session was kept")
		}
	}
}

func TestOpaqueRequestsBoundedByAgeAndBytes(t *testing.T) {
	var r store.Record
	at := int64(1_700_000_000_000)
	r.RememberRequest(store.Request{ID: "old", At: at})
	r.RememberRequest(store.Request{ID: "new", At: at + store.RequestTTL.Milliseconds() + 1})
	if _, ok := r.FindRequest("old"); ok || len(r.Reqs) != 1 {
		t.Fatalf("a request older than RequestTTL was kept: %+v", r.Reqs)
	}
	big := make([]byte, 4<<10)
	for i := range 20 {
		r.RememberRequest(store.Request{ID: string(rune('a' + i)), Result: big, At: at + store.RequestTTL.Milliseconds() + 2})
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
