// Package faultstore wraps any store.Store with the faults of the store boundary, decided by a
// seeded random generator, so that a test can drive a cluster through the faults a real JetStream
// client meets and print the seed that reproduces a failure:
//
//   - a write whose answer is lost: the caller gets an error wrapping store.ErrUnknownOutcome, and
//     the write lands now, later (after more writes of the same client, as a copy still in an old
//     connection's buffers would: possibly after later writes of the same instance) or never;
//   - a may-lag read (Assignment, ListAssignments, Load, ControlGet, ControlList) answered from a
//     view up to Options.MaxLag old;
//   - a watch refused when it starts, or ended (its channel closed) after a while;
//   - a transient failure: an error, nothing stored;
//   - a slow call: it reaches the store only after a while, overtaken by later calls and ticks;
//   - a reconnect: every WriteAsync of the client still in flight loses its answer at once, and
//     each of those writes lands later or never;
//   - a late answer: a WriteAsync whose answer is lost hears of it only after a while (an ack
//     timeout, a disconnect noticed later), not at once — or from inside the client's next
//     WriteAsync call, on the caller's goroutine (the contract allows done "from any goroutine";
//     a client library settles old acks when it next publishes), so that a tick learns of an
//     earlier write's loss in the middle of its own writes.
//
// With SetGrid (the tick schedule of the processes under test), a share of the delays the Net
// chooses — a write in flight, a late landing, a slow call, a late answer — end exactly at a tick
// instant. Under a fake clock that is what makes a store event and a tick truly concurrent (two
// goroutines woken at the same instant): an answer and the next tick's write race as they do on
// a real machine, instead of every answer settling long before the next tick.
//
// One Net is shared by every process of a test; each process (node, coordinator, operator) takes
// its own Client, so faults, freezes and kills are per process.
//
// The faults never contradict the store contract: LatestAssignment, LatestControl, Instances and
// Cluster are never lagged; a write that lands late is the original call made on the underlying
// store later, which applies its own fence and compare-on-revision then. A lagged read answers from
// the versions the Net saw pass through its clients, and only for a key whose current revision is
// the last the Net saw written (a revision the Net did not see — a TTL expiry marker, a write
// delivered by the backend's own FaultInjector — makes that key answer from the store itself). So
// wrap a store that is written only through the Net.
//
// Freeze blocks every call of a client (and the delivery of its watch events and async answers)
// until Thaw: that is how a GC-paused or SIGSTOPped process is simulated in one process. Kill ends
// a client for good: calls blocked in a freeze and every later call fail at once with an error
// wrapping ErrKilled and store.ErrUnknownOutcome and never land; its watches close; its writes in
// flight land later or never, like a reconnect's; late writes already queued still land (they are
// in the network, not in the process). Heal stops injecting new faults and settles every queued
// late write (delivered or dropped, by the seed). Counts reports every fault decision by kind.
//
// A Client over a store that implements store.Epochs (memstore does) is a store.EpochStore, so
// store.TakeBackup, store.Restore and store.AbandonRestore run on it: the claim and the cluster
// record go through the control calls, and sealing, resetting and filling a data bucket are writes
// like any other (answers lost, landing late or never, frozen, killed), so two racing restores, a
// restorer frozen between a check and its step, and a crashed one taken over all happen here.
//
// Everything uses the time package, so a Net runs under testing/synctest with a fake clock. The
// interleaving of goroutines is not deterministic, so a seed reproduces the fault decisions'
// stream, not always the exact run.
package faultstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tickfence/tickfence/store"
)

// ErrKilled is returned by every call of a killed client.
var ErrKilled = errors.New("faultstore: client killed")

// errTransient marks a transient failure: nothing was stored, and the store said so (a definite
// refusal, store.ErrRefused: the writer keeps its token).
var errTransient = fmt.Errorf("faultstore: transient failure, nothing stored: %w", store.ErrRefused)

// Options are the probabilities of each fault (0 turns it off; the zero Options inject nothing)
// and their bounds.
type Options struct {
	// LoseAnswer: per write, the answer is lost. Of those, LandLater land later, LandNever never,
	// the rest now (before the caller hears of the loss).
	LoseAnswer float64
	// LoseAsyncAnswer, if set, replaces LoseAnswer for WriteAsync (the ticks' writes).
	LoseAsyncAnswer float64
	LandLater       float64
	LandNever       float64
	// MaxLate bounds how long a late write waits if its client writes nothing more (default 1s).
	// Otherwise it lands right after one to three more acknowledged writes of its client.
	MaxLate time.Duration
	// Transient: per call, an error with nothing stored.
	Transient float64
	// Lag: per may-lag read, it is answered from a view up to MaxLag old (default 200ms).
	Lag    float64
	MaxLag time.Duration
	// InFlight: per WriteAsync, the write is kept in flight for up to MaxInFlight (default 5ms)
	// before it lands and is answered; a reconnect loses the answers of those still in flight.
	InFlight    float64
	MaxInFlight time.Duration
	// Slow: per call, it takes up to MaxSlow (default 300ms) before reaching the store (a server
	// hiccup, a slow link): other calls and ticks overtake it.
	Slow    float64
	MaxSlow time.Duration
	// Reconnect: per call, the client reconnects first.
	Reconnect float64
	// WatchRefuse: a watch fails to start. WatchEnd: a watch ends after a random time up to
	// WatchLife (default 5s).
	WatchRefuse float64
	WatchEnd    float64
	WatchLife   time.Duration
	// LateAnswer: per WriteAsync whose answer is lost, the caller hears of it only after up to
	// MaxLateAnswer (default 300ms).
	LateAnswer    float64
	MaxLateAnswer time.Duration
	// AnswerInNextCall: of the late answers, those delivered inside the client's next WriteAsync
	// call (or after MaxLateAnswer, if none comes).
	AnswerInNextCall float64
	// OnGrid: per delay the Net chooses, it is stretched to end exactly at a tick instant of the
	// grid set by SetGrid (no effect without one).
	OnGrid float64
	// LogSize is how many events the log keeps (default 4000).
	LogSize int
}

// Chaos is a mix of every fault at rates that keep a small cluster busy but alive.
func Chaos() Options {
	return Options{LoseAnswer: 0.02, LoseAsyncAnswer: 0.08, LandLater: 0.5, LandNever: 0.15, Transient: 0.01, Lag: 0.2,
		InFlight: 0.3, Slow: 0.1, Reconnect: 0.004, WatchRefuse: 0.05, WatchEnd: 0.3, LateAnswer: 0.8, AnswerInNextCall: 0.6, OnGrid: 0.5}
}

func (o *Options) defaults() {
	if o.MaxLate == 0 {
		o.MaxLate = time.Second
	}
	if o.MaxLag == 0 {
		o.MaxLag = 200 * time.Millisecond
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = 5 * time.Millisecond
	}
	if o.MaxSlow == 0 {
		o.MaxSlow = 300 * time.Millisecond
	}
	if o.WatchLife == 0 {
		o.WatchLife = 5 * time.Second
	}
	if o.MaxLateAnswer == 0 {
		o.MaxLateAnswer = 300 * time.Millisecond
	}
	if o.LogSize == 0 {
		o.LogSize = 4000
	}
}

// version is one value of a key as written through the Net.
type version struct {
	at      time.Time
	rev     uint64 // 0: unknown (a delete that returns no revision)
	val     []byte
	deleted bool
}

// lateWrite is a write whose answer was lost and that has not landed yet.
type lateWrite struct {
	c     *Client
	desc  string
	do    func(ctx context.Context) (uint64, error)
	rec   func(rev uint64)
	after int // acknowledged writes of its client still to come before it lands
	key   string
	// sameKey: it lands right after the client's next acknowledged write of the same key (a
	// copy in an old connection's buffers overtaken by the next write on a new one).
	sameKey bool
	timer   *time.Timer
	done    bool
}

// asyncWrite is a WriteAsync in flight.
type asyncWrite struct {
	key  string
	desc string
	do   func(ctx context.Context) (uint64, error)
	rec  func(rev uint64)
	done func(uint64, error)
}

// Net is the shared fault state of one test: the random generator, the event log, the versions
// that lagging reads answer from, and the writes that will land late.
type Net struct {
	under store.Store
	opts  Options

	mu       sync.Mutex
	rng      *rand.Rand
	seed     uint64
	faults   bool
	counts   map[string]uint64
	log      []string
	logNext  int
	logFull  bool
	versions map[string][]version
	pending  map[*lateWrite]struct{}
	clients  map[string]*Client
	onWrite  func(client, key string)
	// the tick grid: origin + k*period (period 0: none)
	gridOrigin time.Time
	gridPeriod time.Duration
}

// loseAnswer and loseAsyncAnswer are the lost-answer probabilities (n.mu held).
func (n *Net) loseAnswer() float64 { return n.opts.LoseAnswer }

func (n *Net) loseAsyncAnswer() float64 {
	if n.opts.LoseAsyncAnswer > 0 {
		return n.opts.LoseAsyncAnswer
	}
	return n.opts.LoseAnswer
}

// SetGrid tells the Net the tick schedule of the processes under test (instants origin + k*period):
// Options.OnGrid stretches delays to end on it.
func (n *Net) SetGrid(origin time.Time, period time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.gridOrigin, n.gridPeriod = origin, period
}

// delayLocked is a random delay up to max, stretched (Options.OnGrid) to end at a tick instant
// of the grid, 0 to 2 periods after the one it would have passed.
func (n *Net) delayLocked(max time.Duration) time.Duration {
	d := n.durLocked(max)
	if n.gridPeriod <= 0 || !n.roll(n.opts.OnGrid, "on_grid") {
		return d
	}
	now := time.Now()
	k := (now.Add(d).Sub(n.gridOrigin) + n.gridPeriod - 1) / n.gridPeriod
	k += time.Duration(n.rng.IntN(3))
	at := n.gridOrigin.Add(k * n.gridPeriod)
	for !at.After(now) {
		at = at.Add(n.gridPeriod)
	}
	return at.Sub(now)
}

// OnWrite sets a function called as each write call of any client is issued, before any fault
// (a freeze included) delays it: checks of "who may write when" use it. It runs outside the Net's
// lock and may Freeze or Kill the client that issues the write (to stop a process exactly as it
// sends it, e.g. a restorer between its claim check and the step it guards); it must not make
// calls through a Client.
func (n *Net) OnWrite(f func(client, key string)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.onWrite = f
}

func (n *Net) observe(c *Client, key string) {
	n.mu.Lock()
	f := n.onWrite
	n.mu.Unlock()
	if f != nil {
		f(c.name, key)
	}
}

// New wraps under. With zero Options it injects nothing (and passes the conformance suite).
func New(under store.Store, seed uint64, opts Options) *Net {
	opts.defaults()
	return &Net{under: under, opts: opts, seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		faults: true, counts: map[string]uint64{}, log: make([]string, opts.LogSize),
		versions: map[string][]version{}, pending: map[*lateWrite]struct{}{}, clients: map[string]*Client{}}
}

// Seed is the seed the Net was made with.
func (n *Net) Seed() uint64 { return n.seed }

// Under is the wrapped store (for checks that must not see faults).
func (n *Net) Under() store.Store { return n.under }

// Client returns the client of one process, making it on first use.
func (n *Net) Client(name string) *Client {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := n.clients[name]
	if c == nil {
		c = &Client{n: n, name: name, inflight: map[*asyncWrite]*time.Timer{}, watches: map[*int]context.CancelFunc{}}
		n.clients[name] = c
	}
	return c
}

// Logf appends an event to the log (the test's own actions go there too).
func (n *Net) Logf(format string, args ...any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.logLocked(format, args...)
}

func (n *Net) logLocked(format string, args ...any) {
	n.log[n.logNext] = time.Now().Format("15:04:05.000000") + " " + fmt.Sprintf(format, args...)
	n.logNext++
	if n.logNext == len(n.log) {
		n.logNext, n.logFull = 0, true
	}
}

// Events returns the last max events, oldest first (all kept if max <= 0).
func (n *Net) Events(max int) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	if n.logFull {
		out = append(out, n.log[n.logNext:]...)
	}
	out = append(out, n.log[:n.logNext]...)
	if max > 0 && len(out) > max {
		out = out[len(out)-max:]
	}
	return out
}

// Counts returns how many times each kind of fault was decided.
func (n *Net) Counts() map[string]uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[string]uint64, len(n.counts))
	for k, v := range n.counts {
		out[k] = v
	}
	return out
}

// FormatCounts prints counts sorted by kind, with their total.
func FormatCounts(c map[string]uint64) string {
	keys := make([]string, 0, len(c))
	var total uint64
	for k, v := range c {
		keys = append(keys, k)
		total += v
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "%d fault decisions:", total)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%d", k, c[k])
	}
	return b.String()
}

// roll decides a fault of probability p, counting it under kind. Never while healed.
func (n *Net) roll(p float64, kind string) bool {
	if !n.faults || p <= 0 || n.rng.Float64() >= p {
		return false
	}
	n.counts[kind]++
	return true
}

func (n *Net) durLocked(max time.Duration) time.Duration {
	return time.Duration(n.rng.Int64N(int64(max))) + 1
}

// Heal stops injecting new faults and settles every queued late write: each is delivered or
// dropped, as the seed decides. Writes in flight complete normally. Freezes are not thawed.
func (n *Net) Heal() {
	n.mu.Lock()
	n.faults = false
	var deliver []*lateWrite
	for w := range n.pending {
		w.timer.Stop()
		if n.rng.IntN(2) == 0 {
			deliver = append(deliver, w)
			continue
		}
		w.done = true
		delete(n.pending, w)
		n.counts["late_dropped_at_heal"]++
		n.logLocked("heal: dropped late %s of %s", w.desc, w.c.name)
	}
	n.logLocked("heal: faults off; %d late writes to deliver", len(deliver))
	n.mu.Unlock()
	for _, w := range deliver {
		n.land(w)
	}
}

// SetOptions changes the fault probabilities from now on (bounds keep their defaults).
func (n *Net) SetOptions(o Options) {
	o.defaults()
	o.LogSize = n.opts.LogSize
	n.mu.Lock()
	defer n.mu.Unlock()
	n.opts = o
}

// Faulty reports whether faults are being injected.
func (n *Net) Faulty() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.faults
}

// Pending is the number of late writes not yet landed or dropped.
func (n *Net) Pending() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.pending)
}

// queueLocked makes a write land later: after the next acknowledged write of the same key by its
// client, or after one to three more of any key, and at the latest after a random wait up to
// MaxLate.
func (n *Net) queueLocked(c *Client, key, desc string, do func(context.Context) (uint64, error), rec func(uint64)) {
	w := &lateWrite{c: c, key: key, desc: desc, do: do, rec: rec, after: 1 + n.rng.IntN(3), sameKey: n.rng.IntN(2) == 0}
	n.pending[w] = struct{}{}
	d := n.delayLocked(n.opts.MaxLate)
	w.timer = time.AfterFunc(d, func() { n.land(w) })
	if w.sameKey {
		n.logLocked("%s: %s lost its answer; lands after the next write of %s or %v", c.name, desc, key, d)
	} else {
		n.logLocked("%s: %s lost its answer; lands after %d more writes or %v", c.name, desc, w.after, d)
	}
}

// land delivers a late write to the underlying store (which fences it as of now).
func (n *Net) land(w *lateWrite) {
	n.mu.Lock()
	if w.done {
		n.mu.Unlock()
		return
	}
	w.done = true
	w.timer.Stop()
	delete(n.pending, w)
	n.mu.Unlock()
	rev, err := w.do(context.Background())
	if err == nil {
		w.rec(rev)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err == nil {
		n.counts["late_landed"]++
		n.logLocked("%s: late %s landed at revision %d", w.c.name, w.desc, rev)
	} else {
		n.counts["late_refused"]++
		n.logLocked("%s: late %s refused by the store: %v", w.c.name, w.desc, err)
	}
}

// Version keys: d/<epoch>/shard.<S>, d/<epoch>/inst.<S>.<id>, c/<key>.
func shardVKey(epoch uint64, shard uint32) string {
	return fmt.Sprintf("d/%d/%s", epoch, store.ShardKey(shard))
}
func instVKey(epoch uint64, shard uint32, id string) string {
	return fmt.Sprintf("d/%d/%s", epoch, store.InstanceKey(shard, id))
}
func ctlVKey(key string) string { return "c/" + key }

// record notes a value written through the Net. Versions are kept in revision order; those older
// than MaxLag are pruned except the newest of them (the value a lagging view may still show).
func (n *Net) recordLocked(key string, v version) {
	v.at = time.Now()
	vs := n.versions[key]
	i := len(vs)
	if v.rev != 0 {
		for i > 0 && vs[i-1].rev > v.rev && vs[i-1].rev != 0 {
			i--
		}
	}
	vs = append(vs, version{})
	copy(vs[i+1:], vs[i:])
	vs[i] = v
	horizon := v.at.Add(-n.opts.MaxLag)
	drop := 0
	for drop+1 < len(vs) && vs[drop+1].at.Before(horizon) {
		drop++
	}
	n.versions[key] = append(vs[:0:0], vs[drop:]...)
}

func (n *Net) record(key string, v version) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.recordLocked(key, v)
}

// lagged decides whether a read of key is answered from an old view, given the current revision
// (0 with deleted: absent). It returns the version seen at that view (nil: the key did not exist).
func (n *Net) lagged(c *Client, key string, curRev uint64, curAbsent bool) (v *version, ok bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	vs := n.versions[key]
	if len(vs) == 0 {
		return nil, false
	}
	last := vs[len(vs)-1]
	// Only a key whose current value is the last the Net saw written has a known history.
	if curAbsent != last.deleted || !curAbsent && last.rev != curRev {
		return nil, false
	}
	if !n.roll(n.opts.Lag, "lag") {
		return nil, false
	}
	view := time.Now().Add(-n.durLocked(n.opts.MaxLag))
	var at *version
	for i := range vs {
		if !vs[i].at.After(view) {
			at = &vs[i]
		}
	}
	if at == nil {
		n.logLocked("%s: lagging read of %s: not yet written", c.name, key)
		return nil, true
	}
	n.logLocked("%s: lagging read of %s: revision %d (current %d)", c.name, key, at.rev, curRev)
	cp := *at
	return &cp, true
}
