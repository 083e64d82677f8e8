package lease_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/tickfence/tickfence/internal/lease"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/memstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// lossy applies renewals but loses the acknowledgement of the ones it is told to.
type lossy struct {
	store.Store
	loseNext atomic.Int32
	lost     atomic.Int32
	cut      atomic.Bool // a partition: renewals never reach the store
}

func (l *lossy) ControlUpdate(ctx context.Context, key string, v []byte, expect uint64, ttl time.Duration) (uint64, error) {
	if l.cut.Load() {
		return 0, errors.New("timeout: no route to the store")
	}
	rev, err := l.Store.ControlUpdate(ctx, key, v, expect, ttl)
	if err == nil && l.loseNext.Add(-1) >= 0 {
		l.lost.Add(1)
		return 0, errors.New("timeout: no acknowledgement")
	}
	return rev, err
}

func config(st store.Store, session string, fenced, valid *atomic.Int32) lease.Config {
	v, _ := json.Marshal(store.NodeRecord{Session: session})
	return lease.Config{Store: st, Key: "node.n1", TTL: time.Second, Margin: 200 * time.Millisecond,
		Value: func() []byte { return v },
		Mine: func(b []byte) bool {
			var r store.NodeRecord
			return json.Unmarshal(b, &r) == nil && r.Session == session
		},
		OnFenced: func() { fenced.Add(1) }, OnValid: func() { valid.Add(1) }}
}

// TestLostRenewalAckIsAdopted: a renewal is applied but its acknowledgement never arrives. The next
// renewal finds the revision moved, reads it back, sees its own session and adopts it: nobody takes
// over, the lease stays valid.
func TestLostRenewalAckIsAdopted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		st := &lossy{Store: memstore.New()}
		var fenced, valid atomic.Int32
		l, err := lease.TryAcquire(ctx, config(st, "s1", &fenced, &valid))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- l.Run(ctx) }()
		st.loseNext.Store(1)
		time.Sleep(2500 * time.Millisecond) // several renewals, one of them unacknowledged
		if st.lost.Load() != 1 {
			t.Fatalf("lost %d acknowledgements, want 1", st.lost.Load())
		}
		if !l.Valid() || fenced.Load() != 0 {
			t.Fatalf("valid %v, self-fenced %d times after one lost ack", l.Valid(), fenced.Load())
		}
		e, err := st.ControlGet(ctx, "node.n1")
		if err != nil || e.Revision != l.Revision() {
			t.Fatalf("stored lease %+v, %v; holder at revision %d", e, err, l.Revision())
		}
		// Another session cannot take it.
		var f2, v2 atomic.Int32
		if _, err := lease.TryAcquire(ctx, config(st, "s2", &f2, &v2)); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("second holder: err = %v, want ErrConflict", err)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
	})
}

// TestSelfFenceThenLoss: the holder is cut off from the store. It self-fences before the TTL can
// run out on the server (on its own monotonic clock), the key expires, and when it can reach the
// store again it learns the lease is lost: it never becomes valid again.
func TestSelfFenceThenLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		st := &lossy{Store: memstore.New()}
		var fenced, valid atomic.Int32
		l, err := lease.TryAcquire(ctx, config(st, "s1", &fenced, &valid))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- l.Run(ctx) }()
		time.Sleep(500 * time.Millisecond)
		st.cut.Store(true)
		cutAt := time.Now()
		for fenced.Load() == 0 && time.Since(cutAt) < 2*time.Second {
			time.Sleep(5 * time.Millisecond)
		}
		if fenced.Load() != 1 || l.Valid() {
			t.Fatalf("self-fenced %d times, valid %v after being cut off", fenced.Load(), l.Valid())
		}
		// The store's own TTL (1 s from the last renewal that landed) must not have run out before
		// the holder stopped trusting the lease.
		if _, err := st.ControlGet(ctx, "node.n1"); err != nil {
			t.Fatalf("the lease expired on the store before its holder self-fenced: %v", err)
		}
		time.Sleep(1500 * time.Millisecond) // now it expires on the store
		st.cut.Store(false)
		select {
		case err := <-done:
			if !errors.Is(err, lease.ErrLost) {
				t.Fatalf("Run = %v, want ErrLost", err)
			}
		case <-time.After(3 * time.Second):
			t.Fatal("the holder never learned its lease was lost")
		}
		if valid.Load() != 0 {
			t.Fatalf("OnValid ran %d times for a lost lease", valid.Load())
		}
	})
}

func TestRejectsFractionalTTL(t *testing.T) {
	var a, b atomic.Int32
	cfg := config(memstore.New(), "s", &a, &b)
	cfg.TTL = 1500 * time.Millisecond
	if _, err := lease.TryAcquire(context.Background(), cfg); err == nil {
		t.Fatal("a 1.5 s TTL was accepted")
	}
}

// jumpyClock is a clock whose wall time jumps on demand while its monotonic time runs true; it
// counts the reads of its wall time, so the test can tell the jumps reached the lease.
type jumpyClock struct {
	lease.SystemClock
	offset atomic.Int64
	reads  atomic.Int64
}

func (c *jumpyClock) Now() time.Time {
	c.reads.Add(1)
	return time.Now().Add(time.Duration(c.offset.Load()))
}

// TestWallClockJumpsChangeNothing: the holder's wall clock jumps an hour forward, then an hour
// back. The lease neither self-fences nor outlives its renewals: only monotonic time counts.
func TestWallClockJumpsChangeNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		st := &lossy{Store: memstore.New()}
		var fenced, valid atomic.Int32
		clock := &jumpyClock{SystemClock: lease.NewSystemClock()}
		cfg := config(st, "s1", &fenced, &valid)
		cfg.Clock = clock
		l, err := lease.TryAcquire(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- l.Run(ctx) }()
		for _, jump := range []time.Duration{time.Hour, -time.Hour, -time.Hour, 2 * time.Hour} {
			clock.offset.Add(int64(jump))
			time.Sleep(700 * time.Millisecond)
			if !l.Valid() || fenced.Load() != 0 {
				t.Fatalf("after a wall-clock jump of %v: valid %v, self-fenced %d times", jump, l.Valid(), fenced.Load())
			}
		}
		// And a partition still fences it on time, jumps or not.
		st.cut.Store(true)
		clock.offset.Add(int64(-3 * time.Hour))
		cut := time.Now()
		for fenced.Load() == 0 && time.Since(cut) < 3*time.Second {
			time.Sleep(5 * time.Millisecond)
		}
		if fenced.Load() != 1 {
			t.Fatalf("cut off: self-fenced %d times; want once", fenced.Load())
		}
		// The lease reads the wall clock (for its logs) on every acknowledgement: the jumps reached
		// it, and changed nothing it decided.
		if clock.reads.Load() < 4 {
			t.Fatalf("the lease read the jumping wall clock %d times: the test proves nothing", clock.reads.Load())
		}
		if _, err := st.ControlGet(ctx, "node.n1"); err != nil {
			t.Fatalf("the lease expired on the store before its holder self-fenced: %v", err)
		}
		cancel()
		<-done
	})
}

// lagging serves ControlGet (and, if lagLatest, LatestControl too) from a copy of the key taken
// when freeze was called: a replica that has not seen the writes since.
type lagging struct {
	store.Store
	lagLatest bool
	frozen    atomic.Pointer[store.Entry]
}

func (s *lagging) freeze(ctx context.Context, key string) store.Entry {
	e, err := s.Store.ControlGet(ctx, key)
	if err != nil {
		panic(err)
	}
	s.frozen.Store(&e)
	return e
}

func (s *lagging) ControlGet(ctx context.Context, key string) (store.Entry, error) {
	if e := s.frozen.Load(); e != nil && e.Key == key {
		return *e, nil
	}
	return s.Store.ControlGet(ctx, key)
}

func (s *lagging) LatestControl(ctx context.Context, key string) (store.Entry, error) {
	if s.lagLatest {
		return s.ControlGet(ctx, key)
	}
	return s.Store.LatestControl(ctx, key)
}

// TestLaggingReadBackIsNotAdopted: the key moves on (it was lost and another session took it)
// while a replica still shows the holder's value at the holder's revision. The renewal conflicts;
// the read-back must not adopt that revision — the conflict proved the key moved past it — or two
// holders are valid at once. With a lagging ControlGet the leader read sees the new holder; with a
// lagging leader read too, a revision not above the one held is still refused.
func TestLaggingReadBackIsNotAdopted(t *testing.T) {
	for _, lagLatest := range []bool{false, true} {
		t.Run(map[bool]string{false: "ControlGet lags", true: "every read lags"}[lagLatest], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				mem := memstore.New()
				st := &lagging{Store: mem, lagLatest: lagLatest}
				var fenced, valid atomic.Int32
				cfg := config(st, "s1", &fenced, &valid)
				l, err := lease.TryAcquire(ctx, cfg)
				if err != nil {
					t.Fatal(err)
				}
				done := make(chan error, 1)
				go func() { done <- l.Run(ctx) }()
				time.Sleep(500 * time.Millisecond) // a renewal or so
				synctest.Wait()
				held := st.freeze(ctx, "node.n1")
				if held.Revision != l.Revision() {
					t.Fatalf("frozen copy at revision %d, holder at %d", held.Revision, l.Revision())
				}
				// The key is lost and another session takes it.
				if err := mem.ControlDelete(ctx, "node.n1", 0); err != nil {
					t.Fatal(err)
				}
				var f2, v2 atomic.Int32
				other, err := lease.TryAcquire(ctx, config(mem, "s2", &f2, &v2))
				if err != nil {
					t.Fatal(err)
				}
				defer other.Release(context.Background())
				time.Sleep(400 * time.Millisecond) // the next renewal conflicts
				synctest.Wait()
				select {
				case err := <-done:
					if !errors.Is(err, lease.ErrLost) {
						t.Fatalf("Run = %v, want ErrLost", err)
					}
				default:
					t.Fatalf("after a conflicting renewal read back at revision %d (held %d), the lease still runs; valid %v",
						held.Revision, l.Revision(), l.Valid())
				}
				if l.Valid() || fenced.Load() != 1 {
					t.Fatalf("valid %v, self-fenced %d times: two holders of node.n1 (the other valid: %v)", l.Valid(), fenced.Load(), other.Valid())
				}
			})
		})
	}
}

// TestExpiredLeaseIsRecreated (issue 36): a node's lease (Config.Recreate) expires while its
// renewals cannot reach the store (the control bucket electing a leader). When they can again it
// creates the key again with its own value, and is valid again: its session goes on. A key that
// someone else created meanwhile is lost, as before.
func TestExpiredLeaseIsRecreated(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		st := &lossy{Store: memstore.New()}
		var fenced, valid atomic.Int32
		cfg := config(st, "s1", &fenced, &valid)
		cfg.Recreate = true
		l, err := lease.TryAcquire(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		first := l.Revision()
		done := make(chan error, 1)
		go func() { done <- l.Run(ctx) }()
		time.Sleep(500 * time.Millisecond)
		st.cut.Store(true)
		time.Sleep(3 * time.Second) // self-fenced, then expired on the store
		if _, err := st.ControlGet(ctx, "node.n1"); !errors.Is(err, store.ErrNotFound) || fenced.Load() != 1 {
			t.Fatalf("after the cut: key %v, self-fenced %d times; want it expired and one self-fence", err, fenced.Load())
		}
		st.cut.Store(false)
		time.Sleep(time.Second)
		if !l.Valid() || valid.Load() != 1 || l.Revision() <= first {
			t.Fatalf("after the store came back: valid %v (told %d times), revision %d (first %d); want valid again at a new revision",
				l.Valid(), valid.Load(), l.Revision(), first)
		}
		e, err := st.ControlGet(ctx, "node.n1")
		if err != nil || !cfg.Mine(e.Value) || e.Revision != l.Revision() {
			t.Fatalf("stored lease %+v, %v; want the holder's own at its revision", e, err)
		}
		// Someone else's key is not taken over.
		st.cut.Store(true)
		time.Sleep(3 * time.Second)
		var f2, v2 atomic.Int32
		if _, err := lease.TryAcquire(ctx, config(st, "s2", &f2, &v2)); err != nil {
			t.Fatalf("another session after the expiry: %v", err)
		}
		st.cut.Store(false)
		select {
		case err := <-done:
			if !errors.Is(err, lease.ErrLost) {
				t.Fatalf("Run = %v, want ErrLost (the key is another session's)", err)
			}
		case <-time.After(3 * time.Second):
			t.Fatal("the holder never learned its lease was taken")
		}
	})
}
