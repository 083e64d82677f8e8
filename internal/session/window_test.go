package session_test

import (
	"testing"

	"github.com/tickfence/tickfence/internal/session"
	"github.com/tickfence/tickfence/store"
)

// A window replayed against the owner's session check. Command 1 is applied but its answer is
// lost (it stays open until the client gives it up); every later one is applied and answered at
// once. The owner keeps the answers above the ack (held at 0 by command 1), so past
// MaxClientInFlight of them it would refuse a command as bad_request; the window must hold the
// command back instead (counting only the open commands — 2 here — tickbench's generator once
// sent command 65 into that refusal).
func TestWindowHoldsBackWhatTheOwnerWouldRefuse(t *testing.T) {
	var rec store.Record
	var w session.Window
	const ttl = 1 << 30
	send := func(seq uint64) (sent bool) {
		ack, ok := w.Open(seq)
		if !ok {
			return false
		}
		switch st, _ := rec.CheckSession("c", seq, ack, 1, ttl); st {
		case store.SessionNew:
			rec.RememberSession("c", ack, store.SeqResult{Seq: seq, Result: []byte{0xc0}}, 1, ttl)
		default:
			t.Fatalf("command %d with ack %d: the owner refuses it (check %d); the window should have held it back", seq, ack, st)
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
		if w.Settle(seq) {
			t.Fatalf("idle after settling %d while command 1 is open", seq)
		}
	}
	if held == 0 {
		t.Fatal("nothing held back while command 1's answer is missing")
	}
	if got := w.Ack(200); got != 0 {
		t.Fatalf("ack %d while command 1 is open, want 0", got)
	}
	// Command 1 is given up: the ack moves past everything and commands flow again.
	if !w.Settle(1) {
		t.Fatal("not idle with nothing open")
	}
	for seq := uint64(201); seq <= 300; seq++ {
		if !send(seq) {
			t.Fatalf("command %d held back with nothing open", seq)
		}
		w.Settle(seq)
	}
	if got := w.Ack(300); got != 300 {
		t.Fatalf("ack %d with nothing open, want the last number 300", got)
	}
}

// Numbers opened out of order would make the ack wrong: Open refuses them loudly.
func TestWindowRefusesNumbersOutOfOrder(t *testing.T) {
	var w session.Window
	if _, ok := w.Open(5); !ok {
		t.Fatal("5 not opened")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("number 3 opened after 5 without a panic")
		}
	}()
	w.Open(3)
}

// TestResetIsANewWindow: a window reset — even one still holding open numbers — holds nothing
// back and acks like a new one.
func TestResetIsANewWindow(t *testing.T) {
	var w session.Window
	for seq := uint64(1); seq <= uint64(store.MaxClientInFlight); seq++ {
		if _, ok := w.Open(seq); !ok {
			t.Fatalf("open %d refused", seq)
		}
	}
	w.Settle(3) // some settled, the rest open: the window is full
	w.Reset()
	var fresh session.Window
	for seq := uint64(100); seq < 100+2*uint64(store.MaxClientInFlight); seq++ {
		a1, ok1 := w.Open(seq)
		a2, ok2 := fresh.Open(seq)
		if a1 != a2 || ok1 != ok2 {
			t.Fatalf("open %d: reset window (%d, %v), new window (%d, %v)", seq, a1, ok1, a2, ok2)
		}
	}
}
