package nemesis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/faultstore"
	"github.com/tickfence/tickfence/store/memstore"
)

// Operator restores (DESIGN 6, issue 9.4), and the store-side audit that checks them.

// restoreShare is the share of runs (chosen by the seed alone) with an operator restore episode.
const restoreShare = 0.25

// auditStore is the memstore under the Net. It orders every restore step that lands (a put, a
// reset, a drop) against the epoch changes of the cluster record, exactly (one lock around both),
// and reports a restore write that lands in the data of an epoch that has gone live: a restore may
// only ever fill an epoch that is not live yet. It also counts the acknowledged writes of the
// nodes per epoch (for the report) and the generation: how many epoch changes have landed.
type auditStore struct {
	*memstore.Store
	c *cluster

	mu        sync.Mutex
	epoch     uint64
	gen       int
	live      map[uint64]liveEpoch // every epoch that went live
	liveOrder []uint64
	written   map[uint64]int // acknowledged node writes per epoch
	issuers   map[string][]string
	clobbers  map[string]int // restore writes landed in a live epoch, per client and epoch
}

// liveEpoch is when an epoch went live.
type liveEpoch struct {
	at  time.Time
	gen int
}

func newAuditStore(mem *memstore.Store, first uint64) *auditStore {
	return &auditStore{Store: mem, epoch: first, live: map[uint64]liveEpoch{first: {at: time.Now()}}, liveOrder: []uint64{first},
		written: map[uint64]int{}, issuers: map[string][]string{}, clobbers: map[string]int{}}
}

// restorerKey is the context key naming the operator client a restore runs on.
type restorerKey struct{}

// generation is the number of epoch changes that have landed.
func (a *auditStore) generation() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.gen
}

// current is the live epoch and its generation.
func (a *auditStore) current() (uint64, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.epoch, a.gen
}

// liveEpochs are the epochs that went live, in order.
func (a *auditStore) liveEpochs() []uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.liveOrder)
}

// issued notes a restore client issuing a write of key (a record key, or a data bucket for the
// whole-bucket steps): a write that lands late carries no context, so its issuers name it.
func (a *auditStore) issued(client, key string) {
	if !strings.HasPrefix(client, "restore-") {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !slices.Contains(a.issuers[key], client) {
		a.issuers[key] = append(a.issuers[key], client)
	}
}

// ControlUpdate notes the cluster record's epoch changes, in order with the restore steps.
func (a *auditStore) ControlUpdate(ctx context.Context, key string, value []byte, expect uint64, ttl time.Duration) (uint64, error) {
	if key != store.ClusterKey {
		return a.Store.ControlUpdate(ctx, key, value, expect, ttl)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	rev, err := a.Store.ControlUpdate(ctx, key, value, expect, ttl)
	var cl store.Cluster
	if err == nil && json.Unmarshal(value, &cl) == nil && cl.Epoch != a.epoch {
		a.gen++
		a.epoch = cl.Epoch
		if _, seen := a.live[cl.Epoch]; !seen {
			a.liveOrder = append(a.liveOrder, cl.Epoch)
		}
		a.live[cl.Epoch] = liveEpoch{at: time.Now(), gen: a.gen}
		a.c.net.Logf("audit: epoch %d is live (cluster revision %d, by %s)", cl.Epoch, rev, a.who(ctx, key))
	}
	return rev, err
}

// who names the client a write came from: the restore's context, or (a write landing late) the
// restore clients that issued a write of key.
func (a *auditStore) who(ctx context.Context, key string) string {
	if name, ok := ctx.Value(restorerKey{}).(string); ok {
		return name
	}
	if is := a.issuers[key]; len(is) > 0 {
		return "a late write issued by " + strings.Join(is, " or ")
	}
	return "an unknown client"
}

// landedLocked reports a restore step that landed in epoch's data (a.mu held) if the epoch went live.
func (a *auditStore) landedLocked(ctx context.Context, epoch uint64, issuedAs, what string) {
	l, ok := a.live[epoch]
	if !ok {
		return
	}
	state := "it is the live epoch"
	if epoch != a.epoch {
		state = fmt.Sprintf("it was live until epoch %d", a.epoch)
	}
	who := a.who(ctx, issuedAs)
	msg := fmt.Sprintf("restore clobbered a live epoch: %s: %s landed in epoch %d, which went live %v earlier (%s; %d node writes acknowledged in it)",
		who, what, epoch, time.Since(l.at), state, a.written[epoch])
	k := fmt.Sprintf("%s in epoch %d", who, epoch)
	if a.clobbers[k]++; a.clobbers[k] > 1 {
		a.c.net.Logf("audit: %s", msg) // one violation per restorer and epoch; the rest in the log
		return
	}
	a.c.violate("%s", msg)
}

// checkClobbers reports how many restore writes landed in live epochs beyond the first of each
// restorer (each first is a violation already).
func (a *auditStore) checkClobbers() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, k := range slices.Sorted(maps.Keys(a.clobbers)) {
		if n := a.clobbers[k]; n > 1 {
			a.c.violate("restore clobbered a live epoch: %d writes of %s (the first reported above, all in the event log)", n, k)
		}
	}
}

// PutData implements store.Epochs: a restore's put, which must land only in an epoch not yet live.
func (a *auditStore) PutData(ctx context.Context, epoch uint64, partition uint32, key string, value []byte) (uint64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	rev, err := a.Store.PutData(ctx, epoch, partition, key, value)
	if err == nil {
		what := "the put of " + key
		if strings.HasPrefix(key, "shard.") {
			what = "the put of " + key + " (revoking its grant)"
		}
		a.landedLocked(ctx, epoch, key, fmt.Sprintf("%s into %s (revision %d)", what, store.DataBucket(epoch, partition), rev))
	}
	return rev, err
}

// ResetPartition implements store.Epochs (see PutData).
func (a *auditStore) ResetPartition(ctx context.Context, epoch uint64, partition uint32, like uint64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	err := a.Store.ResetPartition(ctx, epoch, partition, like)
	if err == nil {
		b := store.DataBucket(epoch, partition)
		a.landedLocked(ctx, epoch, b, "the reset of "+b)
	}
	return err
}

// DropPartition implements store.Epochs (see PutData).
func (a *auditStore) DropPartition(ctx context.Context, epoch uint64, partition uint32) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	err := a.Store.DropPartition(ctx, epoch, partition)
	if err == nil {
		b := store.DataBucket(epoch, partition)
		a.landedLocked(ctx, epoch, b, "the drop of "+b)
	}
	return err
}

// writtenIn is how many node writes were acknowledged in epoch.
func (a *auditStore) writtenIn(epoch uint64) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.written[epoch]
}

func (a *auditStore) wrote(epoch uint64) {
	a.mu.Lock()
	a.written[epoch]++
	a.mu.Unlock()
}

// Write implements store.Store (counted).
func (a *auditStore) Write(ctx context.Context, g store.Grant, id string, rec store.Record) (uint64, error) {
	rev, err := a.Store.Write(ctx, g, id, rec)
	if err == nil {
		a.wrote(g.Epoch)
	}
	return rev, err
}

// WriteAsync implements store.Store (counted).
func (a *auditStore) WriteAsync(g store.Grant, id string, rec store.Record, done func(uint64, error)) {
	a.Store.WriteAsync(g, id, rec, func(rev uint64, err error) {
		if err == nil {
			a.wrote(g.Epoch)
		}
		done(rev, err)
	})
}

// WriteBatch implements store.BatchWriter (each stored record counted).
func (a *auditStore) WriteBatch(g store.Grant, writes []store.BatchWrite, done func(int, uint64, error)) {
	a.Store.WriteBatch(g, writes, func(i int, rev uint64, err error) {
		if err == nil {
			a.wrote(g.Epoch)
		}
		done(i, rev, err)
	})
}

// --- the operator's restore episode ---

// restoreKinds of episode.
const (
	restoreSingle = "single" // one operator restores, retrying what fails
	restoreRace   = "race"   // two operators restore at once, each retrying
	restoreCrash  = "crash"  // a restorer crashes (or freezes) at a step; another takes over
)

// restorePlan decides, from the seed alone, whether a run has a restore episode and which.
func restorePlan(seed uint64) (string, *rand.Rand) {
	r := rand.New(rand.NewPCG(seed, 0x726573746f7265))
	if r.Float64() >= restoreShare {
		return "", nil
	}
	switch x := r.Float64(); {
	case x < 0.3:
		return restoreSingle, r
	case x < 0.65:
		return restoreRace, r
	default:
		return restoreCrash, r
	}
}

func rdur(r *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(r.Int64N(int64(hi-lo)+1))
}

var restoreSteps = []string{"seal", "buckets", "records", "shards", "epoch"}

// errCrashed is what a restorer's Step returns to stop it the way its process dying would.
var errCrashed = errors.New("nemesis: the restorer crashed here")

// restorer is one operator process running restores.
type restorer struct {
	c    *cluster
	name string
	cl   *faultstore.Client
	b    store.Backup
	// takeover: it was started to finish a restore that crashed (every attempt takes over).
	takeover bool
	// hold: the step at which its first attempt waits until another restore has moved the
	// epoch on and the cluster has acknowledged adds in the new one (or, if none does, until the
	// hold times out): a restore that read the epoch before another finished.
	hold string
	// crashAt: the step at which its first attempt crashes, and how (crashHow).
	crashAt, crashHow string
	// crashed: it looks crashed to its operator (who then starts a takeover). dead: it is, and
	// retries nothing; a frozen restorer is crashed but not dead, and goes on once thawed, like
	// an operator's process that was only stopped.
	crashed, dead atomic.Bool // set from the write hook's goroutine too
	// succeeded: one of its attempts committed (a takeover then has nothing to finish).
	succeeded atomic.Bool
}

// run restores until an attempt succeeds, the restore is known to be someone else's, or the
// process crashed. Between attempts it does what an operator does with the error: a claim
// that names itself (left by its own failed attempt) is taken over; another operator's claim is
// waited for a few times and then left to them.
func (r *restorer) run() {
	c := r.c
	takeover := r.takeover
	others := 0
	for attempt := 1; attempt <= 40; attempt++ {
		ctx, cancel := context.WithCancel(context.WithValue(context.Background(), restorerKey{}, r.name))
		// One ID across its attempts, unique to the restore: a retry after a commit that landed
		// unanswered is done.
		opt := store.RestoreOptions{Operator: r.name, ID: fmt.Sprintf("%s-%x", r.name, c.net.Seed()), Takeover: takeover, SkipClaim: c.cfg.RestoreSkipClaim}
		first := attempt == 1
		opt.Step = func(step string) error { return r.step(first, step, cancel) }
		from, _ := c.audit.current()
		cl, err := store.Restore(ctx, r.cl, r.b, opt)
		cancel()
		if err == nil {
			c.net.Logf("nemesis: %s restored the backup of epoch %d over epoch %d into epoch %d (attempt %d, takeover %v)",
				r.name, r.b.Cluster.Epoch, from, cl.Epoch, attempt, takeover)
			c.restores.Add(1)
			r.succeeded.Store(true)
			return
		}
		c.net.Logf("nemesis: %s's restore (attempt %d, takeover %v) failed: %v", r.name, attempt, takeover, err)
		if r.dead.Load() || r.cl.Killed() {
			return // a dead process retries nothing
		}
		var claimed *store.RestoreClaimedError
		switch {
		case errors.As(err, &claimed) && claimed.Claim.Operator == r.name:
			takeover = true // its own claim, left by an attempt that failed: finish it
		case errors.As(err, &claimed):
			if others++; others >= 3 && !r.takeover {
				c.net.Logf("nemesis: %s leaves the restore to %s", r.name, claimed.Claim.Operator)
				return
			}
		case errors.Is(err, store.ErrRestoreClaimed):
			// The claim changed as it was being taken: look again.
		case errors.Is(err, store.ErrRestoreClaimLost):
			return // taken over, or another restore committed: not ours to finish
		case errors.Is(err, store.ErrConflict):
			return // its epoch change met another: that restore committed, this one is moot
		case errors.Is(err, store.ErrEpochMoved):
			// Its restore committed (its answer lost) and another replaced that epoch since: done,
			// and nothing to restore again (once, a retry sealed the live epoch here).
			return
		}
		time.Sleep(c.dur(100*time.Millisecond, 700*time.Millisecond))
	}
	c.violate("%s: no restore attempt of 40 succeeded", r.name)
}

// step is the restore's Step hook: a hold or a crash, on the first attempt only.
func (r *restorer) step(first bool, step string, cancel context.CancelFunc) error {
	c := r.c
	if !first {
		return nil
	}
	if step == r.hold {
		r.hold = ""
		c.net.Logf("nemesis: %s holds before its %s step", r.name, step)
		// Until another restore went live and the cluster acknowledged adds sent there.
		deadline := time.Now().Add(6 * time.Second)
		for time.Now().Before(deadline) {
			if e, gen := c.audit.current(); e != r.b.Cluster.Epoch && c.audit.writtenIn(e) > 0 && c.ackedInGen(gen) > 0 {
				time.Sleep(300 * time.Millisecond)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		c.net.Logf("nemesis: %s goes on with its %s step", r.name, step)
	}
	if step == r.crashAt {
		r.crashAt = ""
		r.crashed.Store(true)
		r.dead.Store(true)
		c.net.Logf("nemesis: %s crashes before its %s step (%s)", r.name, step, r.crashHow)
		switch r.crashHow {
		case "cancel":
			cancel()
		case "kill":
			r.cl.Kill()
		default:
			return errCrashed
		}
	}
	return nil
}

// restoreEpisode takes a backup through an operator client, lets the cluster run on, and then
// restores it as the plan says. Store faults apply to the operators like to every process.
func (c *cluster) restoreEpisode(kind string, r *rand.Rand) {
	if !c.cfg.NoRecreate {
		defer close(c.restoresOver) // the restore aftermath starts (recreate.go)
		defer c.restoreAgain()
	}
	time.Sleep(rdur(r, time.Second, 3*time.Second))
	if !c.cfg.NoRecreate && c.intn(2) == 0 {
		// Effects in flight: the stream is out from a moment before the backup, so the outboxes
		// it holds go to the restored epoch, whose owners publish them again.
		before := c.dur(200*time.Millisecond, 800*time.Millisecond)
		c.fx.outage(time.Now(), before+c.dur(300*time.Millisecond, 1500*time.Millisecond))
		time.Sleep(before)
	}
	bc := c.net.Client("backup")
	var b store.Backup
	for attempt := 1; ; attempt++ {
		var err error
		if b, err = store.TakeBackup(context.Background(), bc, nil); err == nil {
			break
		}
		c.net.Logf("nemesis: backup failed: %v", err)
		if attempt == 10 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.net.Logf("nemesis: backup of epoch %d taken: %d keys", b.Cluster.Epoch, len(b.Entries))
	time.Sleep(rdur(r, 300*time.Millisecond, 2500*time.Millisecond))
	newRestorer := func(name string) *restorer {
		return &restorer{c: c, name: name, cl: c.net.Client(name), b: b}
	}
	var wg sync.WaitGroup
	goRun := func(rs *restorer, after time.Duration) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(after)
			rs.run()
		}()
	}
	switch kind {
	case restoreSingle:
		c.net.Logf("nemesis: restore episode: one restore")
		goRun(newRestorer("restore-a"), 0)
	case restoreRace:
		ra, rb := newRestorer("restore-a"), newRestorer("restore-b")
		held := ""
		if r.IntN(3) > 0 { // mostly: one of them read the epoch before the other finished
			held = restoreSteps[r.IntN(len(restoreSteps))]
			[]*restorer{ra, rb}[r.IntN(2)].hold = held
		}
		gap := rdur(r, 0, 400*time.Millisecond)
		c.net.Logf("nemesis: restore episode: two racing restores, %v apart, hold %q", gap, held)
		goRun(ra, 0)
		goRun(rb, gap)
	case restoreCrash:
		a := newRestorer("restore-a")
		how := []string{"cancel", "kill", "error", "freeze", "kill-as-sent"}[r.IntN(5)]
		after := rdur(r, 300*time.Millisecond, 2500*time.Millisecond)
		switch how {
		case "freeze", "kill-as-sent":
			// Stopped exactly as it sends its n-th write (often one a claim check just passed).
			n := 1 + r.IntN(len(b.Entries)+8)
			thawAfter := rdur(r, time.Second, 5*time.Second)
			c.onRestoreWrite(a.name, n, func(key string) {
				a.crashed.Store(true)
				a.dead.Store(how != "freeze")
				c.net.Logf("nemesis: %s stopped (%s) as it sends its write %d, of %s", a.name, how, n, key)
				if how == "freeze" {
					a.cl.Freeze()
					c.later(thawAfter, func() { c.net.Logf("nemesis: %s thawed", a.name); a.cl.Thaw() })
					return
				}
				a.cl.Kill()
			})
		default:
			a.crashAt, a.crashHow = restoreSteps[r.IntN(len(restoreSteps))], how
		}
		c.net.Logf("nemesis: restore episode: a restore that crashes (%s), taken over %v later", how, after)
		aDone := make(chan struct{})
		wg.Add(1)
		go func() { defer wg.Done(); defer close(aDone); a.run() }()
		// The takeover comes once the restorer has crashed (or frozen: to its operator it looks
		// the same) or ended, whenever that is: a restore left half way is always finished.
		t := newRestorer("restore-t")
		t.takeover = true
		wg.Add(1)
		go func() {
			defer wg.Done()
		wait:
			for !a.crashed.Load() {
				select {
				case <-aDone:
					break wait
				case <-time.After(20 * time.Millisecond):
				}
			}
			time.Sleep(after)
			if a.succeeded.Load() && !a.crashed.Load() {
				// It finished by itself: its operator saw it succeed, and takes nothing over. (A
				// frozen one that finished once thawed was taken for crashed: the takeover runs.)
				return
			}
			t.run()
		}()
	}
	wg.Wait()
}

// restoreAgain is a second restore after the episode, in the runs that re-create IDs: a backup
// of the live epoch, taken 3–5 s after it went live (its lives created since hold effect
// sequences made from its revisions), restored 0.3–0.8 s later by one operator who retries.
func (c *cluster) restoreAgain() {
	time.Sleep(c.dur(3*time.Second, 5*time.Second)) // faults or not: healing waits for the episode
	bc := c.net.Client("backup-2")
	var b store.Backup
	for attempt := 1; ; attempt++ {
		var err error
		if b, err = store.TakeBackup(context.Background(), bc, nil); err == nil {
			break
		}
		c.net.Logf("nemesis: second backup failed: %v", err)
		if attempt == 10 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.net.Logf("nemesis: second backup, of epoch %d, taken: %d keys", b.Cluster.Epoch, len(b.Entries))
	time.Sleep(c.dur(300*time.Millisecond, 800*time.Millisecond))
	(&restorer{c: c, name: "restore-r", cl: c.net.Client("restore-r"), b: b}).run()
}

// ackedInGen is how many adds first sent in generation gen were acknowledged.
func (c *cluster) ackedInGen(gen int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ackedGen[gen]
}

// onRestoreWrite runs f (once) as the client sends its n-th write.
func (c *cluster) onRestoreWrite(client string, n int, f func(key string)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writeHooks[client] = &writeHook{n: n, f: f}
}

type writeHook struct {
	n int
	f func(key string)
}

// observeWrite is the Net's OnWrite: the checks of who writes when, and the write hooks.
func (c *cluster) observeWrite(client, key string) {
	c.checkCoordinatorWrite(client, key)
	c.audit.issued(client, key)
	if !c.cfg.NoStall {
		c.stallAtGrant(client, key)
	}
	c.mu.Lock()
	h := c.writeHooks[client]
	var f func(string)
	if h != nil {
		if h.n--; h.n == 0 {
			f = h.f
			delete(c.writeHooks, client)
		}
	}
	c.mu.Unlock()
	if f != nil {
		f(key)
	}
}
