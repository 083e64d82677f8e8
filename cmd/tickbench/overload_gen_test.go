package main

import (
	"testing"

	"github.com/tickfence/tickfence/store"
)

// Review finding: the generator's session bookkeeping, replayed against the owner's session
// check. Command 1 is applied but its answer is lost (it stays open until the sweeper gives it
// up); every later one is applied and answered at once. The owner keeps the answers above the
// ack (held at 0 by command 1), so past MaxClientInFlight of them it would refuse a command as
// bad_request; the generator must hold the command back instead of sending it. Counting only the
// open commands (2 here), it sent command 65 into that refusal.
func TestAttackerHoldsBackWhatTheOwnerWouldRefuse(t *testing.T) {
	var rec store.Record
	var tgt attackTarget
	const ttl = 1 << 30
	send := func(seq uint64) (sent bool) {
		ack, ok := tgt.number(seq)
		if !ok {
			return false
		}
		switch st, _ := rec.CheckSession("tb", seq, ack, 1, ttl); st {
		case store.SessionNew:
			rec.RememberSession("tb", ack, store.SeqResult{Seq: seq, Result: []byte{0xc0}}, 1, ttl)
		default:
			t.Fatalf("command %d with ack %d: the owner refuses it (check %d); the generator should not have sent it", seq, ack, st)
		}
		return true
	}
	if !send(1) {
		t.Fatal("command 1 held back")
	}
	held := 0
	for seq := uint64(2); seq <= 200; seq++ {
		if !send(seq) {
			held++
			continue
		}
		tgt.open = tgt.open[:1] // answered at once; 1 stays open
	}
	if held == 0 {
		t.Fatal("nothing held back while command 1's answer is missing")
	}
	// The sweeper gives command 1 up: the ack moves past everything and commands flow again.
	tgt.open = tgt.open[:0]
	for seq := uint64(201); seq <= 300; seq++ {
		if !send(seq) {
			t.Fatalf("command %d held back with nothing open", seq)
		}
		tgt.open = tgt.open[:0]
	}
}
