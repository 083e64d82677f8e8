package natscmd_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
)

// goWait sends with Go and waits for done, failing the test if done comes more than once.
func goWait(t *testing.T, c *natscmd.Client, ctx context.Context, id string, body []byte) ([]byte, wire.Status, error) {
	t.Helper()
	type result struct {
		raw []byte
		st  wire.Status
		err error
	}
	ch := make(chan result, 2)
	c.Go(ctx, id, "", body, false, func(raw []byte, st wire.Status, err error) { ch <- result{raw, st, err} })
	r := <-ch
	select {
	case again := <-ch:
		t.Fatalf("done called twice: %+v, then %+v", r, again)
	case <-time.After(50 * time.Millisecond):
	}
	return r.raw, r.st, r.err
}

// Go tries a command as Exec does: after a timeout and after busy, the same command (the same
// session number) again, each attempt on its own reply subject; the answer returned is the
// final one.
func TestGoRetriesTheSameCommandAfterATimeoutAndBusy(t *testing.T) {
	cnc, onc := clientConns(t)
	id := "go-retry-1"
	busy := wire.EncodeReply(wire.Reply{Error: wire.Errorf(wire.CodeBusy, "b")})
	attempts := fakeOwner(t, onc, id, func(k int, _ *nats.Msg) ([]byte, time.Duration) {
		switch k {
		case 1:
			return nil, 0
		case 2:
			return busy, 0
		}
		return okWith("third"), 0
	})
	c := natscmd.NewClient(cnc, clientShards)
	c.Attempt = 100 * time.Millisecond
	raw, st, err := goWait(t, c, context.Background(), id, attack)
	if err != nil || !st.OK {
		t.Fatalf("Go: %+v, %v; want ok", st, err)
	}
	if r, _ := wire.DecodeReply(raw, false); r.Result != "third" {
		t.Fatalf("result %v; want third", r.Result)
	}
	seen := attempts()
	if len(seen) != 3 {
		t.Fatalf("%d attempts; want 3", len(seen))
	}
	for _, m := range seen[1:] {
		if a, b := seen[0].Header.Get(wire.HeaderSeq), m.Header.Get(wire.HeaderSeq); a == "" || a != b {
			t.Fatalf("sequence numbers %q and %q; want the same one", a, b)
		}
		if m.Reply == seen[0].Reply {
			t.Fatalf("two attempts asked for their answer on %s", m.Reply)
		}
	}
}

// A final refusal is returned as it is, not retried.
func TestGoReturnsAFinalRefusal(t *testing.T) {
	cnc, onc := clientConns(t)
	id := "go-refused-1"
	bad := wire.EncodeReply(wire.Reply{Error: wire.Errorf(wire.CodeBadRequest, "no")})
	attempts := fakeOwner(t, onc, id, func(int, *nats.Msg) ([]byte, time.Duration) { return bad, 0 })
	c := natscmd.NewClient(cnc, clientShards)
	_, st, err := goWait(t, c, context.Background(), id, attack)
	if err != nil || st.OK || st.Error == nil || st.Error.Code != wire.CodeBadRequest {
		t.Fatalf("Go: %+v, %v; want bad_request", st, err)
	}
	if n := len(attempts()); n != 1 {
		t.Fatalf("%d attempts; want 1", n)
	}
}

// The answer to an attempt that timed out is not taken for a later attempt's.
func TestGoIgnoresALateAnswerToAnEarlierAttempt(t *testing.T) {
	cnc, onc := clientConns(t)
	id := "go-late-1"
	const attempt = 200 * time.Millisecond
	fakeOwner(t, onc, id, func(k int, _ *nats.Msg) ([]byte, time.Duration) {
		if k == 1 {
			return okWith("1"), attempt * 3 / 2
		}
		return okWith(strconv.Itoa(k)), attempt * 3 / 4
	})
	c := natscmd.NewClient(cnc, clientShards)
	c.Attempt = attempt
	raw, _, err := goWait(t, c, context.Background(), id, attack)
	if err != nil {
		t.Fatalf("Go: %v", err)
	}
	if r, _ := wire.DecodeReply(raw, false); r.Result == "1" {
		t.Fatalf("result %v: the late answer to attempt 1 was taken for a later attempt's", r.Result)
	}
}

// GiveUp ends a command nobody answers; no responders and a publish the connection refuses are
// retried and named when it gives up.
func TestGoGivesUp(t *testing.T) {
	cnc, onc := clientConns(t)
	fakeOwner(t, onc, "go-silent-1", func(int, *nats.Msg) ([]byte, time.Duration) { return nil, 0 })
	attempts := fakeOwner(t, onc, "go-huge-1", func(int, *nats.Msg) ([]byte, time.Duration) { return okWith("x"), 0 })
	c := natscmd.NewClient(cnc, clientShards)
	c.GiveUp = 300 * time.Millisecond
	for _, tc := range []struct {
		id, want string
		body     []byte
	}{
		{"go-silent-1", context.DeadlineExceeded.Error(), attack},
		{"go-nobody-1", nats.ErrNoResponders.Error(), attack},
		{"go-huge-1", nats.ErrMaxPayload.Error(), make([]byte, cnc.MaxPayload()+1)},
	} {
		start := time.Now()
		_, _, err := goWait(t, c, context.Background(), tc.id, tc.body)
		if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want gave up (deadline exceeded), naming %q", tc.id, err, tc.want)
		}
		if took := time.Since(start); took > 1900*time.Millisecond {
			t.Errorf("%s: gave up after %v; want about 300ms", tc.id, took)
		}
	}
	if n := len(attempts()); n != 0 {
		t.Errorf("the owner saw %d attempts of a command too large to send", n)
	}
}

// Nothing is sent for a caller whose context has ended, nor to an invalid instance ID; done
// still comes, once.
func TestGoSendsNothingForAnEndedContextOrABadID(t *testing.T) {
	cnc, onc := clientConns(t)
	id := "go-ended-1"
	attempts := fakeOwner(t, onc, id, func(int, *nats.Msg) ([]byte, time.Duration) { return okWith("x"), 0 })
	c := natscmd.NewClient(cnc, clientShards)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := goWait(t, c, ctx, id, attack); !errors.Is(err, context.Canceled) {
		t.Errorf("Go with an ended context: %v; want context.Canceled", err)
	}
	if _, _, err := goWait(t, c, context.Background(), "bad id", attack); err == nil {
		t.Error("Go to an invalid instance ID: no error")
	}
	_ = onc.Flush()
	if n := len(attempts()); n != 0 {
		t.Errorf("the owner saw %d attempts", n)
	}
}

// Thousands of commands in flight from one goroutine: each done gets its own command's answer.
func TestGoManyCommandsGetTheirOwnAnswers(t *testing.T) {
	cnc, onc := clientConns(t)
	const instances, each = 200, 10
	c := natscmd.NewClient(cnc, clientShards)
	c.GiveUp = 30 * time.Second
	for i := range instances {
		fakeOwner(t, onc, "go-many-"+strconv.Itoa(i), func(_ int, m *nats.Msg) ([]byte, time.Duration) {
			return okWith(m.Subject + "/" + m.Header.Get(wire.HeaderSeq)), 0
		})
	}
	var wg sync.WaitGroup
	var calls atomic.Int64
	errs := make(chan string, instances*each)
	for i := range instances {
		id := "go-many-" + strconv.Itoa(i)
		for range each {
			wg.Add(1)
			c.Go(context.Background(), id, "", attack, false, func(raw []byte, st wire.Status, err error) {
				defer wg.Done()
				calls.Add(1)
				r, derr := wire.DecodeReply(raw, false)
				if got, _ := r.Result.(string); err != nil || derr != nil || !st.OK ||
					!strings.HasPrefix(got, wire.Subject(store.ShardOf(id, clientShards), id)+"/") {
					errs <- id + ": " + got
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if n := calls.Load(); n != instances*each {
		t.Errorf("done called %d times for %d commands", n, instances*each)
	}
}

// Once the caller's context ends, Go gives up at once, even with an attempt in flight (issue 34:
// it used to wait for that attempt's answer or its timeout, here 10 s): done says so, and since
// the attempt was sent, that its outcome is unknown.
func TestGoGivesUpWhenItsContextEndsMidAttempt(t *testing.T) {
	cnc, onc := clientConns(t)
	id := "go-ctx-1"
	fakeOwner(t, onc, id, func(int, *nats.Msg) ([]byte, time.Duration) { return nil, 0 }) // never answers
	c := natscmd.NewClient(cnc, clientShards)
	c.Attempt = 10 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, err := goWait(t, c, ctx, id, attack)
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("done came %v after the context ended, want at once (the attempt's timeout is %v)", took, c.Attempt)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, natscmd.ErrOutcomeUnknown) {
		t.Fatalf("Go: %v; want the context's error and ErrOutcomeUnknown (an attempt was out)", err)
	}
}
