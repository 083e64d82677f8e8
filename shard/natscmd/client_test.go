package natscmd_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/natskv"
)

const clientShards = 8

// clientConns starts an embedded server and returns two connections to it: the client's and a
// fake owner's.
func clientConns(t *testing.T) (client, owner *nats.Conn) {
	t.Helper()
	srv, err := natsserver.Start(natsserver.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatalf("embedded NATS server: %v", err)
	}
	t.Cleanup(srv.Stop)
	for _, c := range []**nats.Conn{&client, &owner} {
		nc, err := natskv.Connect("", srv.ConnectOption())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		*c = nc
	}
	return client, owner
}

// fakeOwner answers the commands to id: answer(k, msg) for the k-th attempt (from 1) returns the
// reply and how long to wait before sending it; nil: no answer.
func fakeOwner(t *testing.T, nc *nats.Conn, id string, answer func(k int, m *nats.Msg) ([]byte, time.Duration)) (attempts func() []*nats.Msg) {
	t.Helper()
	var mu sync.Mutex
	var seen []*nats.Msg
	sub, err := nc.Subscribe(wire.Subject(store.ShardOf(id, clientShards), id), func(m *nats.Msg) {
		if m.Reply == "" {
			return // an acknowledgement alone (Client.settle), not an attempt
		}
		mu.Lock()
		seen = append(seen, m)
		k := len(seen)
		mu.Unlock()
		reply, after := answer(k, m)
		if reply == nil {
			return
		}
		time.AfterFunc(after, func() { _ = m.Respond(reply) })
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return func() []*nats.Msg {
		mu.Lock()
		defer mu.Unlock()
		return append([]*nats.Msg(nil), seen...)
	}
}

func okWith(result string) []byte {
	return wire.EncodeReply(wire.Reply{OK: true, Result: result})
}

var attack = func() []byte { b, _ := wire.Canonical(map[string]any{"type": "attack"}); return b }()

// TestExecRetriesTheSameCommandAfterATimeout: an attempt nobody answers is sent again with the
// same session number, and the answer to the second attempt is the one returned.
func TestExecRetriesTheSameCommandAfterATimeout(t *testing.T) {
	cnc, onc := clientConns(t)
	id := "retry-1"
	attempts := fakeOwner(t, onc, id, func(k int, _ *nats.Msg) ([]byte, time.Duration) {
		if k == 1 {
			return nil, 0
		}
		return okWith("second"), 0
	})
	c := natscmd.NewClient(cnc, clientShards)
	c.Attempt = 100 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, r, err := c.Send(ctx, id, "", attack, false)
	if err != nil || !r.OK || r.Result != "second" {
		t.Fatalf("Send: %+v, %v; want ok, result second", r, err)
	}
	seen := attempts()
	if len(seen) != 2 {
		t.Fatalf("%d attempts; want 2", len(seen))
	}
	if a, b := seen[0].Header.Get(wire.HeaderSeq), seen[1].Header.Get(wire.HeaderSeq); a == "" || a != b {
		t.Fatalf("sequence numbers %q and %q; want the same one twice", a, b)
	}
	if seen[0].Reply == seen[1].Reply {
		t.Fatalf("both attempts asked for their answer on %s; want a reply subject per attempt", seen[0].Reply)
	}
}

// TestExecIgnoresALateAnswerToAnEarlierAttempt: the first attempt's answer arrives after that
// attempt timed out, while a later one waits: the command's result is a later attempt's answer.
func TestExecIgnoresALateAnswerToAnEarlierAttempt(t *testing.T) {
	cnc, onc := clientConns(t)
	id := "late-1"
	const attempt = 200 * time.Millisecond
	attempts := fakeOwner(t, onc, id, func(k int, _ *nats.Msg) ([]byte, time.Duration) {
		if k == 1 {
			return okWith("1"), attempt * 3 / 2 // attempt 2 is sent at 201-221 ms and waits
		}
		return okWith(strconv.Itoa(k)), attempt * 3 / 4 // inside its own attempt, unless the machine stalls
	})
	c := natscmd.NewClient(cnc, clientShards)
	c.Attempt = attempt
	_, r, err := c.Send(context.Background(), id, "", attack, false)
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	if n := len(attempts()); n < 2 {
		t.Fatalf("%d attempts; want at least 2", n)
	}
	if r.Result == "1" {
		t.Fatalf("result %v: the late answer to attempt 1 was taken for a later attempt's", r.Result)
	}
}

// TestExecGiveUpBoundsTheCommand: GiveUp ends a command nobody answers, inside an attempt.
func TestExecGiveUpBoundsTheCommand(t *testing.T) {
	cnc, onc := clientConns(t)
	id := "silent-1"
	fakeOwner(t, onc, id, func(int, *nats.Msg) ([]byte, time.Duration) { return nil, 0 })
	c := natscmd.NewClient(cnc, clientShards)
	c.GiveUp = 300 * time.Millisecond // Attempt stays 2 s: the give-up cuts the first attempt short
	start := time.Now()
	_, _, err := c.Exec(context.Background(), id, "", attack, false)
	took := time.Since(start)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "gave up") {
		t.Fatalf("Exec: %v; want gave up, wrapping context.DeadlineExceeded", err)
	}
	if took < 300*time.Millisecond || took > 1900*time.Millisecond {
		t.Fatalf("gave up after %v; want about 300ms (GiveUp), well before the 2 s attempt", took)
	}
}

func TestExecReturnsWhenItsContextEnds(t *testing.T) {
	cnc, onc := clientConns(t)
	id := "silent-2"
	fakeOwner(t, onc, id, func(int, *nats.Msg) ([]byte, time.Duration) { return nil, 0 })
	c := natscmd.NewClient(cnc, clientShards)
	c.Attempt = 10 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, _, err := c.Exec(ctx, id, "", attack, false)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Exec: %v; want context.Canceled", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("returned %v after its context was cancelled at 100ms; want at once, not after the 10 s attempt", took)
	}
}

// TestExecNoResponders: with no owner subscribed the server answers "no responders" at once; the
// client retries it like a timeout and says so when it gives up.
func TestExecNoResponders(t *testing.T) {
	cnc, _ := clientConns(t)
	c := natscmd.NewClient(cnc, clientShards)
	c.GiveUp = 300 * time.Millisecond
	_, _, err := c.Exec(context.Background(), "nobody-1", "", attack, false)
	if err == nil || !strings.Contains(err.Error(), nats.ErrNoResponders.Error()) {
		t.Fatalf("Exec: %v; want gave up, last: no responders", err)
	}
}

// TestExecSaysWhyAnAttemptCouldNotBeSent: a publish the connection refuses (over the server's
// payload limit) is retried like a lost attempt, and the give-up names the refusal.
func TestExecSaysWhyAnAttemptCouldNotBeSent(t *testing.T) {
	cnc, onc := clientConns(t)
	id := "huge-1"
	attempts := fakeOwner(t, onc, id, func(int, *nats.Msg) ([]byte, time.Duration) { return okWith("x"), 0 })
	c := natscmd.NewClient(cnc, clientShards)
	c.GiveUp = 300 * time.Millisecond
	huge := make([]byte, cnc.MaxPayload()+1)
	_, _, err := c.Exec(context.Background(), id, "", huge, false)
	if err == nil || !strings.Contains(err.Error(), nats.ErrMaxPayload.Error()) {
		t.Fatalf("Exec: %v; want gave up, last: %v", err, nats.ErrMaxPayload)
	}
	if n := len(attempts()); n != 0 {
		t.Fatalf("the owner saw %d attempts of a command too large to send", n)
	}
}

// TestExecManyGoroutinesGetTheirOwnAnswers: thousands of goroutines share a client (a gateway);
// each gets the answer to its own command, whoever published it.
func TestExecManyGoroutinesGetTheirOwnAnswers(t *testing.T) {
	cnc, onc := clientConns(t)
	const instances, each = 200, 10
	c := natscmd.NewClient(cnc, clientShards)
	c.GiveUp = 30 * time.Second
	for i := range instances {
		id := "many-" + strconv.Itoa(i)
		fakeOwner(t, onc, id, func(_ int, m *nats.Msg) ([]byte, time.Duration) {
			return okWith(m.Subject + "/" + m.Header.Get(wire.HeaderSeq)), 0
		})
	}
	var wg sync.WaitGroup
	errs := make(chan error, instances*each)
	for i := range instances {
		id := "many-" + strconv.Itoa(i)
		for range each {
			wg.Go(func() {
				raw, st, err := c.Exec(context.Background(), id, "", attack, false)
				if err != nil || !st.OK {
					errs <- fmt.Errorf("%s: %v %v", id, st, err)
					return
				}
				r, err := wire.DecodeReply(raw, false)
				if got, _ := r.Result.(string); err != nil || !strings.HasPrefix(got, wire.Subject(store.ShardOf(id, clientShards), id)+"/") {
					errs <- fmt.Errorf("%s got the answer %v (%v)", id, r.Result, err)
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestGiveUpSaysWhetherTheOutcomeIsKnown (issue 34.5): a command given up after an attempt that
// may have been applied (no answer in time, or unknown_outcome) is an unknown outcome, not a
// failure — its error wraps ErrOutcomeUnknown, from Exec and from Go alike; one whose every attempt
// was refused without effect (busy) does not.
func TestGiveUpSaysWhetherTheOutcomeIsKnown(t *testing.T) {
	unknown := wire.EncodeReply(wire.Reply{Error: wire.Errorf(wire.CodeUnknownOutcome, "write may or may not have been stored")})
	busy := wire.EncodeReply(wire.Reply{Error: wire.Errorf(wire.CodeBusy, "past capacity")})
	for _, tc := range []struct {
		name   string
		answer func(k int) []byte
		want   bool
	}{
		{"silence", func(int) []byte { return nil }, true},
		{"unknown_outcome", func(int) []byte { return unknown }, true},
		{"a timeout, then busy", func(k int) []byte {
			if k == 1 {
				return nil
			}
			return busy
		}, true},
		{"busy", func(int) []byte { return busy }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cnc, onc := clientConns(t)
			id := "outcome-" + strings.ReplaceAll(tc.name, " ", "-")
			id = strings.ReplaceAll(id, ",", "")
			for _, suffix := range []string{"-exec", "-go"} { // an owner each: k counts one command's attempts
				fakeOwner(t, onc, id+suffix, func(k int, _ *nats.Msg) ([]byte, time.Duration) { return tc.answer(k), 0 })
			}
			c := natscmd.NewClient(cnc, clientShards)
			c.Attempt, c.GiveUp = 100*time.Millisecond, 700*time.Millisecond
			_, _, err := c.Exec(context.Background(), id+"-exec", "", attack, false)
			if err == nil || errors.Is(err, natscmd.ErrOutcomeUnknown) != tc.want {
				t.Errorf("Exec: %v; want an error, ErrOutcomeUnknown %v", err, tc.want)
			}
			id += "-go"
			done := make(chan error, 1)
			c.Go(context.Background(), id, "", attack, false, func(_ []byte, _ wire.Status, err error) { done <- err })
			if err := <-done; err == nil || errors.Is(err, natscmd.ErrOutcomeUnknown) != tc.want {
				t.Errorf("Go: %v; want an error, ErrOutcomeUnknown %v", err, tc.want)
			}
		})
	}
}
