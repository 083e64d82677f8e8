package store_test

import (
	"fmt"
	"testing"

	"github.com/tickfence/tickfence/store"
)

const ttlTicks = 6000

// TestOneSenderCannotFillSessions: one untrusted sender holds at most MaxSenderSessions sessions
// of a record. Past that, its new client takes the place of its own idle session, or of its own
// silent one holding few answers (TestSenderLetsGoOfItsOwnSilentSession), or is refused while
// all of its own hold more; another sender, and a trusted client, still get in.
func TestOneSenderCannotFillSessions(t *testing.T) {
	var r store.Record
	evil := "s:00000000000000aa "
	for i := range store.MaxSenderSessions {
		id := fmt.Sprintf("%sc%d", evil, i)
		if st, _ := r.CheckSession(id, 1, 0, 10, ttlTicks); st != store.SessionNew {
			t.Fatalf("session %d of one sender: %v", i, st)
		}
		for seq := range uint64(store.MaxGoneAnswers + 1) { // holding more answers than a session let go of may
			r.RememberSession(id, 0, store.SeqResult{Seq: seq + 1, Result: []byte("r")}, 10, ttlTicks)
		}
	}
	if st, _ := r.CheckSession(evil+"more", 1, 0, 10, ttlTicks); st != store.SessionSenderFull {
		t.Fatalf("a sender's session past %d, all holding %d answers: %v, want SessionSenderFull", store.MaxSenderSessions, store.MaxGoneAnswers+1, st)
	}
	for _, other := range []string{"s:00000000000000bb c0", "trusted-client"} {
		if st, _ := r.CheckSession(other, 1, 0, 10, ttlTicks); st != store.SessionNew {
			t.Fatalf("%q while one sender is at its cap: %v", other, st)
		}
	}
	// One of its sessions acknowledges its answers: the next new client replaces it, and the
	// sender still holds MaxSenderSessions.
	r.Clients = idle(r.Clients, evil+"c1")
	if st, _ := r.CheckSession(evil+"more", 1, 0, 13, ttlTicks); st != store.SessionNew {
		t.Fatalf("a sender with an idle session: %v, want SessionNew", st)
	}
	r.RememberSession(evil+"more", 0, store.SeqResult{Seq: 1}, 13, ttlTicks)
	n := 0
	for _, c := range r.Clients {
		if store.SenderOf(c.ID) == evil {
			n++
			if c.ID == evil+"c1" {
				t.Error("the idle session was kept past the sender's cap")
			}
		}
	}
	if n != store.MaxSenderSessions {
		t.Errorf("the sender holds %d sessions, want %d", n, store.MaxSenderSessions)
	}
	if len(r.Gone) != 0 {
		t.Errorf("an idle session was there to replace, yet %d sessions were let go of", len(r.Gone))
	}
}

// TestSenderLetsGoOfItsOwnSilentSession: a player whose client crashed after one command, five
// times, is not refused its sixth client (issue 34.4): its own least recently seen session is let
// go of, and that session's command, retransmitted, is answered forgotten, never applied again.
func TestSenderLetsGoOfItsOwnSilentSession(t *testing.T) {
	var r store.Record
	p := "s:00000000000000aa "
	gap := uint64(ttlTicks / store.GoneSilence) // each run silent long enough to be let go of
	var tick uint64
	for i := range store.MaxSenderSessions + 1 {
		id := fmt.Sprintf("%srun%d", p, i)
		tick = 10 + uint64(i)*gap
		if st, _ := r.CheckSession(id, 1, 0, tick, ttlTicks); st != store.SessionNew {
			t.Fatalf("run %d of the player's client: %v, want SessionNew", i, st)
		}
		r.RememberSession(id, 0, store.SeqResult{Seq: 1, Result: []byte("r")}, tick, ttlTicks)
	}
	if st, _ := r.CheckSession(p+"run0", 1, 0, tick, ttlTicks); st != store.SessionForgotten {
		t.Fatalf("run 0's command again, after its session was let go of: %v, want SessionForgotten", st)
	}
	if st, _ := r.CheckSession(p+"run0", 2, 1, tick, ttlTicks); st != store.SessionNew {
		t.Fatalf("run 0's next command: %v, want SessionNew", st)
	}
	if st, q := r.CheckSession(p+"run1", 1, 0, tick, ttlTicks); st != store.SessionDuplicate || string(q.Result) != "r" {
		t.Fatalf("run 1's command again: %v, want its first answer", st)
	}
}

func idle(cs []store.ClientSession, id string) []store.ClientSession {
	out := make([]store.ClientSession, len(cs))
	copy(out, cs)
	for i := range out {
		if out[i].ID == id {
			out[i].Done = nil
		}
	}
	return out
}

// TestOneSenderCannotEvictAnothersRequests: an untrusted sender past MaxSenderRequests forgets
// its own oldest request IDs, never a trusted client's or another sender's, however many it sends.
func TestOneSenderCannotEvictAnothersRequests(t *testing.T) {
	var r store.Record
	victims := []string{"trusted-req", "s:00000000000000bb v1"}
	for i, id := range victims {
		r.RememberRequest(store.Request{ID: id, Fingerprint: uint64(i + 1), Result: []byte("first"), At: 1}, ttlTicks)
	}
	evil := "s:00000000000000aa "
	for i := range 10 * store.RequestWindow {
		r.RememberRequest(store.Request{ID: fmt.Sprintf("%sjunk-%d", evil, i), Result: []byte("x"), At: 2}, ttlTicks)
	}
	for _, id := range victims {
		if q, ok := r.FindRequest(id); !ok || string(q.Result) != "first" {
			t.Errorf("%q was evicted by another sender's junk (found %v)", id, ok)
		}
	}
	n := 0
	for _, q := range r.Reqs {
		if store.SenderOf(q.ID) == evil {
			n++
		}
	}
	if n != store.MaxSenderRequests {
		t.Errorf("the junk sender holds %d request IDs, want %d", n, store.MaxSenderRequests)
	}
	if _, ok := r.FindRequest(fmt.Sprintf("%sjunk-%d", evil, 10*store.RequestWindow-1)); !ok {
		t.Error("the sender's newest request was forgotten")
	}
}

// TestSenderOf: only the transport's prefix, which no client-written ID can hold, names a sender.
func TestSenderOf(t *testing.T) {
	for id, want := range map[string]string{
		"s:0123456789abcdef c1": "s:0123456789abcdef ",
		"s:abc":                 "",
		"client-1":              "",
		"":                      "",
	} {
		if got := store.SenderOf(id); got != want {
			t.Errorf("SenderOf(%q) = %q, want %q", id, got, want)
		}
	}
}
