package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/internal/hdr"
	"github.com/tickfence/tickfence/internal/session"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
)

// attacker is the overload scenario's open-loop generator: every attack is published once, with
// its own reply subject under one of replySubs wildcard inbox subscriptions, and its answer (or its
// absence after the timeout) is matched by that subject. Answers are read by replySubs goroutines:
// one could not keep up past ~40 k/s on the shared machine (25 000 answers queued in it, 0.6 s
// added to every round trip and answers the node gave in time counted as timed out). No
// goroutine, context or timer per attack: the generator shares the 2-core machine with the node
// and its server, and what it spends per attack is taken from them (a goroutine and two contexts
// per attack took a whole core at 38 k attacks/s).
//
// It speaks the compact form (client sessions) as natscmd.Client does: one client ID, one
// counter numbering the commands to every instance, and with each command the ack, the highest
// number up to which every command to that instance is settled (answered or given up). A
// command is never sent again, so a given-up one is settled at its timeout.
type attacker struct {
	g       *loadGen
	nc      *nats.Conn
	id      string // session client ID
	prefix  string // reply subjects: prefix + (seq % replySubs) + "." + seq
	timeout time.Duration
	subs    []*nats.Subscription
	body    []byte
	last    atomic.Uint64 // highest number assigned
	opaque  bool          // opaque request IDs (Tickfence-Request-Id) instead of the session
	open    atomic.Int64  // attacks sent and not settled

	insts   []attackTarget
	pending [64]pendingShard
	// sent: every attack in the order sent, for sweep to give up the oldest without scanning
	// the pending ones (a scan of ~60 000 pending every 10 ms took 14 % of the generator's CPU
	// at 128 k attacks/s). Answered ones stay until sweep reaches them and finds them settled.
	sentMu sync.Mutex
	sent   []sentAttack
	head   int // sent[:head]: swept already

	ok, busy, other, timedOut atomic.Int64
	// stepStart (Unix ns) and lateBySec: the attacks given up, by the second of the step they
	// were sent in (a burst at a step's start is admission reacting to the jump in load; one
	// spread over the step is a steady tail).
	stepStart atomic.Int64
	lateMu    sync.Mutex
	lateBySec []int64
	// gone: the attacks of this step given up, by number, with when they were sent: an answer
	// that comes later still is matched to its attack (and timed).
	gone map[uint64]time.Time
	// answeredLate: of the given up, those whose answer reached the handler after the give-up, and
	// the most answers queued in the generator's own reply queue behind one of them: a deep queue
	// there means the round trip was lost in the generator, not in the node or the server.
	// lateRTT: their round trips (a near miss, or an answer seconds late).
	answeredLate, lateQueue atomic.Int64
	rtt, busyRTT, lateRTT   *hdr.Window
	errMu                   sync.Mutex
	errs                    map[string]int64
	stop                    chan struct{}
	swept                   chan struct{}
}

type attackTarget struct {
	mu      sync.Mutex
	subject string
	w       session.Window
}

type pendingShard struct {
	mu sync.Mutex
	m  map[uint64]pendingAttack
}

type sentAttack struct {
	seq   uint64
	start time.Time
}

type pendingAttack struct {
	inst  int32
	start time.Time
}

func newAttacker(g *loadGen, shards uint32, timeout time.Duration, opaque bool) (*attacker, error) {
	body, err := wire.Canonical(map[string]any{"type": "attack", "player": "p"})
	if err != nil {
		return nil, err
	}
	a := &attacker{g: g, nc: g.nc, id: "tb-" + g.runID, timeout: timeout, body: body, opaque: opaque, rtt: hdr.NewWindow(7), busyRTT: hdr.NewWindow(7), lateRTT: hdr.NewWindow(7), gone: map[uint64]time.Time{},
		insts: make([]attackTarget, len(g.ids)), errs: map[string]int64{}, stop: make(chan struct{}), swept: make(chan struct{})}
	a.prefix = natscmd.CommandInbox(g.nc) + "."
	for i := range a.pending {
		a.pending[i].m = map[uint64]pendingAttack{}
	}
	for i, id := range g.ids {
		a.insts[i].subject = wire.Subject(store.ShardOf(id, shards), id)
	}
	for k := range replySubs {
		sub, err := g.nc.Subscribe(a.prefix+strconv.Itoa(k)+".*", a.answer)
		if err != nil {
			return nil, err
		}
		if err := sub.SetPendingLimits(1<<20, 256<<20); err != nil {
			return nil, err
		}
		a.subs = append(a.subs, sub)
	}
	go a.sweep()
	return a, nil
}

// send publishes one attack on instance i.
func (a *attacker) send(i int) error {
	t := &a.insts[i]
	t.mu.Lock()
	defer t.mu.Unlock() // publishing under it keeps one instance's numbers in order on the wire
	seq := a.last.Add(1)
	ack, ok := t.w.Open(seq)
	if !ok {
		return errTooManyOpen
	}
	m := nats.NewMsg(t.subject)
	m.Reply = a.prefix + strconv.Itoa(int(seq%replySubs)) + "." + strconv.FormatUint(seq, 10)
	m.Data = a.body
	if a.opaque {
		m.Header.Set(wire.HeaderRequestID, a.g.runID+"-o"+strconv.FormatUint(seq, 10))
	} else {
		m.Header.Set(wire.HeaderClient, a.id)
		m.Header.Set(wire.HeaderSeq, strconv.FormatUint(seq, 10))
		if ack > 0 {
			m.Header.Set(wire.HeaderAck, strconv.FormatUint(ack, 10))
		}
	}
	p := &a.pending[seq%uint64(len(a.pending))]
	now := time.Now()
	p.mu.Lock()
	p.m[seq] = pendingAttack{inst: int32(i), start: now}
	p.mu.Unlock()
	a.sentMu.Lock()
	a.sent = append(a.sent, sentAttack{seq, now})
	a.sentMu.Unlock()
	a.open.Add(1)
	if err := a.nc.PublishMsg(m); err != nil {
		a.open.Add(-1)
		t.w.Settle(seq) // given up: never sent
		p.mu.Lock()
		delete(p.m, seq)
		p.mu.Unlock()
		return err
	}
	return nil
}

var errTooManyOpen = fmt.Errorf("%d attacks to one dungeon not acknowledged", store.MaxClientInFlight)

// take removes seq from the pending attacks; false if it was settled already (a late answer).
func (a *attacker) take(seq uint64) (pendingAttack, bool) {
	p := &a.pending[seq%uint64(len(a.pending))]
	p.mu.Lock()
	pa, ok := p.m[seq]
	delete(p.m, seq)
	p.mu.Unlock()
	if ok {
		a.open.Add(-1)
		t := &a.insts[pa.inst]
		t.mu.Lock()
		t.w.Settle(seq)
		t.mu.Unlock()
	}
	return pa, ok
}

func (a *attacker) answer(m *nats.Msg) {
	seq, err := strconv.ParseUint(m.Subject[strings.LastIndexByte(m.Subject, '.')+1:], 10, 64)
	if err != nil {
		return
	}
	pa, ok := a.take(seq)
	if !ok { // given up already (the sweep puts it in gone as it takes it): answered late, or a second answer
		a.lateMu.Lock()
		start, gone := a.gone[seq]
		delete(a.gone, seq)
		a.lateMu.Unlock()
		if gone {
			a.answeredAfterGiveUp(m, time.Since(start))
		}
		return
	}
	took := time.Since(pa.start)
	if took > a.timeout { // answered, but after the give-up (sweep had not reached it yet)
		a.gaveUp(pa)
		a.answeredAfterGiveUp(m, took)
		return
	}
	a.rtt.Record(took)
	r, err := wire.DecodeStatus(m.Data, false)
	switch {
	case err != nil:
		a.countOther("malformed reply")
		a.g.unknowN[pa.inst].Add(1)
	case r.OK:
		dmg, ok := attackDamage(m.Data)
		if !ok {
			a.countOther("reply without damage")
			a.g.unknowN[pa.inst].Add(1)
			return
		}
		a.ok.Add(1)
		a.g.acked[pa.inst].Add(dmg)
	case r.Error.Code == wire.CodeBusy:
		a.busy.Add(1) // refused without effect
		a.busyRTT.Record(took)
	default:
		a.countOther(r.Error.Code)
		a.g.unknowN[pa.inst].Add(1) // conservatively: it may have had an effect
	}
}

// answeredAfterGiveUp counts an answer to an attack given up already, which took rtt.
func (a *attacker) answeredAfterGiveUp(m *nats.Msg, rtt time.Duration) {
	a.answeredLate.Add(1)
	a.lateRTT.Record(rtt)
	if n, _, err := m.Sub.Pending(); err == nil {
		for q := a.lateQueue.Load(); int64(n) > q && !a.lateQueue.CompareAndSwap(q, int64(n)); q = a.lateQueue.Load() {
		}
	}
}

// gaveUp counts an attack not answered within the timeout: it may have had an effect.
func (a *attacker) gaveUp(pa pendingAttack) {
	a.timedOut.Add(1)
	a.g.unknowN[pa.inst].Add(1)
	sec := max(int(pa.start.Sub(time.Unix(0, a.stepStart.Load()))/time.Second), 0)
	a.lateMu.Lock()
	if sec < 1<<16 {
		for len(a.lateBySec) <= sec {
			a.lateBySec = append(a.lateBySec, 0)
		}
		a.lateBySec[sec]++
	}
	a.lateMu.Unlock()
}

// begin starts a step at t0: timeouts are counted by the second since.
func (a *attacker) begin(t0 time.Time) {
	a.stepStart.Store(t0.UnixNano())
	a.answeredLate.Store(0)
	a.lateQueue.Store(0)
	a.lateRTT.Take()
	a.lateMu.Lock()
	a.lateBySec = nil
	clear(a.gone)
	a.lateMu.Unlock()
}

// timedOutBySecond returns the attacks given up since begin, by the second of the step they were
// sent in.
func (a *attacker) timedOutBySecond() []int64 {
	a.lateMu.Lock()
	defer a.lateMu.Unlock()
	return slices.Clone(a.lateBySec)
}

func (a *attacker) countOther(code string) {
	a.other.Add(1)
	a.errMu.Lock()
	a.errs[code]++
	a.errMu.Unlock()
}

// sweep gives up the attacks unanswered for longer than the timeout, every 10 ms, oldest first.
func (a *attacker) sweep() {
	defer close(a.swept)
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	var expired []sentAttack
	for {
		select {
		case <-a.stop:
			return
		case <-t.C:
		}
		cut := time.Now().Add(-a.timeout)
		a.sentMu.Lock()
		n := a.head
		for n < len(a.sent) && a.sent[n].start.Before(cut) {
			n++
		}
		expired = append(expired[:0], a.sent[a.head:n]...)
		a.head = n
		if a.head > len(a.sent)/2 { // compact: each entry is copied at most once on average
			a.sent = a.sent[:copy(a.sent, a.sent[a.head:])]
			a.head = 0
		}
		a.sentMu.Unlock()
		for _, e := range expired {
			// Taken from pending and put in gone at once (under lateMu): an answer that finds
			// it in neither would be counted nowhere.
			a.lateMu.Lock()
			pa, ok := a.take(e.seq)
			if ok {
				a.gone[e.seq] = pa.start
			}
			a.lateMu.Unlock()
			if ok {
				a.gaveUp(pa)
			}
		}
	}
}

// inflight is the number of attacks sent and not settled.
func (a *attacker) inflight() int64 { return a.open.Load() }

// drain waits until every attack is answered or given up.
func (a *attacker) drain() {
	for a.inflight() > 0 {
		time.Sleep(5 * time.Millisecond)
	}
}

// counts returns the counters and round trips since the previous call, and resets them.
func (a *attacker) counts() (ok, busy, other, timedOut int64, rtt, busyRTT *hdr.Histogram, errs map[string]int64) {
	ok, busy, other, timedOut = a.ok.Swap(0), a.busy.Swap(0), a.other.Swap(0), a.timedOut.Swap(0)
	rtt, busyRTT = a.rtt.Take(), a.busyRTT.Take()
	a.errMu.Lock()
	errs, a.errs = a.errs, map[string]int64{}
	a.errMu.Unlock()
	return
}

func (a *attacker) close() {
	close(a.stop)
	<-a.swept
	for _, sub := range a.subs {
		_ = sub.Unsubscribe()
	}
}

const replySubs = 4

// clearReplyQueue starts a step's count of the answers waiting in the generator's reply queues.
func (a *attacker) clearReplyQueue() {
	for _, sub := range a.subs {
		_ = sub.ClearMaxPending()
	}
}

// replyQueue is the most answers that waited in the generator's reply queues since
// clearReplyQueue (the sum of each queue's most).
func (a *attacker) replyQueue() int {
	n := 0
	for _, sub := range a.subs {
		if m, _, err := sub.MaxPending(); err == nil {
			n += m
		}
	}
	return n
}
