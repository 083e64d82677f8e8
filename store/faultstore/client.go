package faultstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/tickfence/tickfence/store"
)

// Client is one process's connection to the Net: a store.Store whose calls the Net may fault.
type Client struct {
	n    *Net
	name string

	// guarded by n.mu
	thaw     chan struct{} // non-nil while frozen; closed by Thaw or Kill
	killed   bool
	inflight map[*asyncWrite]*time.Timer
	watches  map[*int]context.CancelFunc
	deferred []*deferredAnswer // lost answers delivered inside the next WriteAsync call
	// a flaky link: until flakyUntil, each write loses its answer with at least flakyP
	flakyUntil time.Time
	flakyP     float64
}

// Flaky makes the client's link flaky for d: each of its writes loses its answer with
// probability at least p (a connection flapping, a server stepping down mid-proposal). Bursts
// like this are what make a rebuild's own rotation fail and read back.
func (c *Client) Flaky(d time.Duration, p float64) {
	c.n.mu.Lock()
	defer c.n.mu.Unlock()
	c.flakyUntil, c.flakyP = time.Now().Add(d), p
	c.n.logLocked("%s: link flaky for %v (answers lost with p=%.2f)", c.name, d, p)
}

// deferredAnswer is a lost answer waiting for the client's next WriteAsync call (or its timer).
type deferredAnswer struct {
	answer func()
	timer  *time.Timer
	done   bool // guarded by n.mu
}

var (
	_ store.Store         = (*Client)(nil)
	_ store.FaultInjector = (*Client)(nil)
)

// Name is the client's name.
func (c *Client) Name() string { return c.name }

// Freeze blocks every call of the client, and the delivery of its watch events and answers, until
// Thaw (a GC pause, SIGSTOP). Calls already inside the store finish.
func (c *Client) Freeze() {
	c.n.mu.Lock()
	defer c.n.mu.Unlock()
	if c.thaw == nil && !c.killed {
		c.thaw = make(chan struct{})
		c.n.logLocked("%s: frozen", c.name)
	}
}

// Thaw lets a frozen client's calls proceed.
func (c *Client) Thaw() {
	c.n.mu.Lock()
	defer c.n.mu.Unlock()
	if c.thaw != nil {
		close(c.thaw)
		c.thaw = nil
		c.n.logLocked("%s: thawed", c.name)
	}
}

// Frozen reports whether the client is frozen.
func (c *Client) Frozen() bool {
	c.n.mu.Lock()
	defer c.n.mu.Unlock()
	return c.thaw != nil
}

// Kill ends the client for good (see the package comment). A process restarted after a kill takes
// a new Client under another name.
func (c *Client) Kill() {
	c.n.mu.Lock()
	if c.killed {
		c.n.mu.Unlock()
		return
	}
	c.killed = true
	if c.thaw != nil {
		close(c.thaw)
		c.thaw = nil
	}
	watches := c.watches
	c.watches = map[*int]context.CancelFunc{}
	c.n.logLocked("%s: killed", c.name)
	c.n.mu.Unlock()
	c.Reconnect()
	for _, cancel := range watches {
		cancel()
	}
}

// Reconnect loses the answers of every WriteAsync of the client still in flight at once; each of
// those writes lands later or never.
func (c *Client) Reconnect() {
	c.n.mu.Lock()
	defer c.n.mu.Unlock()
	c.reconnectLocked()
}

func (c *Client) reconnectLocked() {
	n := c.n
	if len(c.inflight) > 0 {
		n.logLocked("%s: reconnect: %d answers in flight lost", c.name, len(c.inflight))
	}
	for w, t := range c.inflight {
		t.Stop()
		delete(c.inflight, w)
		n.counts["reconnect_lost_answer"]++
		if n.faults && n.rng.IntN(3) == 0 {
			n.counts["reconnect_never"]++
			n.logLocked("%s: %s in flight at the reconnect never lands", c.name, w.desc)
		} else {
			n.queueLocked(c, w.key, w.desc, w.do, w.rec)
		}
		done := w.done
		err := fmt.Errorf("%s: connection lost with the write in flight: %w", w.desc, store.ErrUnknownOutcome)
		if c.killed {
			go done(0, err)
		} else {
			c.answerLaterLocked(w.desc, err, func() { done(0, err) })
		}
	}
}

func (c *Client) killedErr(what string) error {
	return fmt.Errorf("%s by %s: %w (%w)", what, c.name, ErrKilled, store.ErrUnknownOutcome)
}

// enter blocks while the client is frozen and decides the faults every call may meet first: a
// reconnect, a transient failure.
func (c *Client) enter(what string) error {
	n := c.n
	n.mu.Lock()
	defer n.mu.Unlock()
	for c.thaw != nil {
		ch := c.thaw
		n.counts["frozen_call"]++
		n.mu.Unlock()
		<-ch
		n.mu.Lock()
	}
	if c.killed {
		n.counts["killed_call"]++
		return c.killedErr(what)
	}
	if n.roll(n.opts.Reconnect, "reconnect") {
		c.reconnectLocked()
	}
	if n.roll(n.opts.Transient, "transient") {
		n.logLocked("%s: %s failed transiently", c.name, what)
		return fmt.Errorf("%s: %w", what, errTransient)
	}
	if n.roll(n.opts.Slow, "slow") {
		d := n.delayLocked(n.opts.MaxSlow)
		n.logLocked("%s: %s slow: %v", c.name, what, d)
		n.mu.Unlock()
		time.Sleep(d)
		n.mu.Lock()
	}
	return nil
}

// waitThaw blocks while the client is frozen; false if it was killed.
func (c *Client) waitThaw() bool {
	n := c.n
	n.mu.Lock()
	defer n.mu.Unlock()
	for c.thaw != nil {
		ch := c.thaw
		n.mu.Unlock()
		<-ch
		n.mu.Lock()
	}
	return !c.killed
}

// acked notes an acknowledged write of key by the client: late writes waiting for it land now.
func (c *Client) acked(key string) {
	n := c.n
	n.mu.Lock()
	var due []*lateWrite
	for w := range n.pending {
		if w.c == c && !w.done {
			if w.sameKey && w.key == key || !w.sameKey && w.after-1 <= 0 {
				due = append(due, w)
			} else if !w.sameKey {
				w.after--
			}
		}
	}
	n.mu.Unlock()
	for _, w := range due {
		n.land(w)
	}
}

// mutate runs one write through the faults: lost answer (landing now, later or never) or normal.
func (c *Client) mutate(ctx context.Context, key, desc string, do func(context.Context) (uint64, error), rec func(uint64)) (uint64, error) {
	return c.mutateLosing(ctx, c.n.loseAnswer, key, desc, do, rec)
}

// mutateLosing is mutate with the probability of a lost answer chosen by lose (from the options).
func (c *Client) mutateLosing(ctx context.Context, lose func() float64, key, desc string, do func(context.Context) (uint64, error), rec func(uint64)) (uint64, error) {
	c.n.observe(c, key)
	if err := c.enter(desc); err != nil {
		return 0, err
	}
	n := c.n
	n.mu.Lock()
	p := lose()
	if time.Now().Before(c.flakyUntil) {
		p = max(p, c.flakyP)
	}
	if n.roll(p, "lost_answer") {
		r := n.rng.Float64()
		switch {
		case r < n.opts.LandLater:
			n.counts["lost_answer_later"]++
			n.queueLocked(c, key, desc, do, rec)
			n.mu.Unlock()
		case r < n.opts.LandLater+n.opts.LandNever:
			n.counts["lost_answer_never"]++
			n.logLocked("%s: %s lost, never lands", c.name, desc)
			n.mu.Unlock()
		default:
			n.counts["lost_answer_now"]++
			n.mu.Unlock()
			rev, err := do(ctx)
			if err == nil {
				rec(rev)
			}
			n.Logf("%s: %s landed (revision %d, err %v) but its answer was lost", c.name, desc, rev, err)
		}
		return 0, fmt.Errorf("%s: answer lost: %w", desc, store.ErrUnknownOutcome)
	}
	n.mu.Unlock()
	rev, err := do(ctx)
	if err == nil {
		rec(rev)
		c.acked(key)
	}
	return rev, err
}

// read runs one read through the call faults (freeze, kill, reconnect, transient).
func (c *Client) read(what string) error { return c.enter(what) }

func encodeRec(g store.Grant, rec store.Record, create bool) []byte {
	rec.Token = g.Token
	if create {
		rec.State = nil
	}
	b, err := store.EncodeRecord(rec)
	if err != nil {
		return nil
	}
	return b
}

// Bootstrap implements store.Store (never faulted: it is idempotent setup).
func (c *Client) Bootstrap(ctx context.Context, want store.Cluster) (store.Cluster, error) {
	if err := c.enter("bootstrap"); err != nil {
		return store.Cluster{}, err
	}
	return c.n.under.Bootstrap(ctx, want)
}

// Cluster implements store.Store.
func (c *Client) Cluster(ctx context.Context) (store.Cluster, error) {
	if err := c.read("cluster"); err != nil {
		return store.Cluster{}, err
	}
	return c.n.under.Cluster(ctx)
}

// Assignment implements store.Store; it may answer from a lagging view.
func (c *Client) Assignment(ctx context.Context, epoch uint64, shard uint32) (store.Assignment, uint64, error) {
	if err := c.read("assignment"); err != nil {
		return store.Assignment{}, 0, err
	}
	a, rev, err := c.n.under.Assignment(ctx, epoch, shard)
	absent := errors.Is(err, store.ErrNotFound)
	if err != nil && !absent {
		return a, rev, err
	}
	v, ok := c.n.lagged(c, shardVKey(epoch, shard), rev, absent)
	if !ok {
		return a, rev, err
	}
	if v == nil || v.deleted {
		return store.Assignment{}, 0, fmt.Errorf("shard %d (lagging view): %w", shard, store.ErrNotFound)
	}
	var old store.Assignment
	_ = json.Unmarshal(v.val, &old)
	return old, v.rev, nil
}

// LatestAssignment implements store.Store; never lagged.
func (c *Client) LatestAssignment(ctx context.Context, epoch uint64, shard uint32) (store.Assignment, uint64, error) {
	if err := c.read("latest assignment"); err != nil {
		return store.Assignment{}, 0, err
	}
	return c.n.under.LatestAssignment(ctx, epoch, shard)
}

// ListAssignments implements store.Store; each entry may come from a lagging view.
func (c *Client) ListAssignments(ctx context.Context, epoch uint64) ([]store.AssignmentEvent, error) {
	if err := c.read("list assignments"); err != nil {
		return nil, err
	}
	cur, err := c.n.under.ListAssignments(ctx, epoch)
	if err != nil {
		return nil, err
	}
	out := cur[:0:0]
	for _, ev := range cur {
		v, ok := c.n.lagged(c, shardVKey(epoch, ev.Shard), ev.Revision, ev.Deleted)
		switch {
		case !ok:
			out = append(out, ev)
		case v == nil:
			// not yet written in that view
		case v.deleted:
			out = append(out, store.AssignmentEvent{Shard: ev.Shard, Revision: v.rev, Deleted: true})
		default:
			old := store.AssignmentEvent{Shard: ev.Shard, Revision: v.rev}
			_ = json.Unmarshal(v.val, &old.Assignment)
			out = append(out, old)
		}
	}
	return out, nil
}

func (c *Client) shardRec(epoch uint64, shard uint32, a store.Assignment) func(uint64) {
	val, _ := json.Marshal(a)
	return func(rev uint64) { c.n.record(shardVKey(epoch, shard), version{rev: rev, val: val}) }
}

// Assign implements store.Store.
func (c *Client) Assign(ctx context.Context, epoch uint64, shard uint32, a store.Assignment, expect uint64) (uint64, error) {
	return c.mutate(ctx, store.ShardKey(shard), fmt.Sprintf("assign shard %d to %s/%s expecting %d", shard, a.Owner, a.Session, expect),
		func(ctx context.Context) (uint64, error) { return c.n.under.Assign(ctx, epoch, shard, a, expect) },
		c.shardRec(epoch, shard, a))
}

// WatchAssignments implements store.Store; the watch may be refused or end early.
func (c *Client) WatchAssignments(ctx context.Context, epoch uint64) (<-chan store.AssignmentEvent, error) {
	wctx, life, err := c.watchStart(ctx, "watch assignments")
	if err != nil {
		return nil, err
	}
	in, err := c.n.under.WatchAssignments(wctx, epoch)
	if err != nil {
		life()
		return nil, err
	}
	return forward(c, wctx, life, in), nil
}

// Rotate implements store.Store.
func (c *Client) Rotate(ctx context.Context, g store.Grant) (store.Grant, error) {
	var out store.Grant
	rec := c.shardRec(g.Epoch, g.Shard, g.Assignment)
	_, err := c.mutate(ctx, store.ShardKey(g.Shard), fmt.Sprintf("rotate %s", g), func(ctx context.Context) (uint64, error) {
		ng, err := c.n.under.Rotate(ctx, g)
		if err == nil {
			out = ng
		}
		return ng.Token, err
	}, rec)
	if err != nil {
		return store.Grant{}, err
	}
	return out, nil
}

// ReleaseShard implements store.Store.
func (c *Client) ReleaseShard(ctx context.Context, g store.Grant) error {
	_, err := c.mutate(ctx, store.ShardKey(g.Shard), fmt.Sprintf("release %s", g),
		func(ctx context.Context) (uint64, error) { return 0, c.n.under.ReleaseShard(ctx, g) },
		func(uint64) { c.n.record(shardVKey(g.Epoch, g.Shard), version{deleted: true}) })
	return err
}

// Instances implements store.Store; never lagged (the listing covers every key written before it).
func (c *Client) Instances(ctx context.Context, epoch uint64, shard uint32) ([]string, error) {
	if err := c.read("instances"); err != nil {
		return nil, err
	}
	return c.n.under.Instances(ctx, epoch, shard)
}

// Load implements store.Store; it may answer from a lagging view.
func (c *Client) Load(ctx context.Context, epoch uint64, shard uint32, id string) (store.Record, uint64, error) {
	if err := c.read("load " + id); err != nil {
		return store.Record{}, 0, err
	}
	r, rev, err := c.n.under.Load(ctx, epoch, shard, id)
	absent := errors.Is(err, store.ErrNotFound)
	if err != nil && !absent {
		return r, rev, err
	}
	v, ok := c.n.lagged(c, instVKey(epoch, shard, id), rev, absent)
	if !ok {
		return r, rev, err
	}
	if v == nil || v.deleted {
		return store.Record{}, 0, fmt.Errorf("instance %s (lagging view): %w", id, store.ErrNotFound)
	}
	old, derr := store.DecodeRecord(v.val)
	if derr != nil {
		return r, rev, err
	}
	return old, v.rev, nil
}

func (c *Client) instRec(g store.Grant, id string, val []byte, deleted bool) func(uint64) {
	return func(rev uint64) {
		if !deleted && val == nil {
			return // not encodable: the store refused it anyway
		}
		c.n.record(instVKey(g.Epoch, g.Shard, id), version{rev: rev, val: val, deleted: deleted})
	}
}

// Register implements store.Store.
func (c *Client) Register(ctx context.Context, g store.Grant, id string, rec store.Record, loadedRev uint64) (uint64, error) {
	return c.mutate(ctx, store.InstanceKey(g.Shard, id), fmt.Sprintf("register %s under %s", id, g),
		func(ctx context.Context) (uint64, error) { return c.n.under.Register(ctx, g, id, rec, loadedRev) },
		c.instRec(g, id, encodeRec(g, rec, false), false))
}

// Create implements store.Store.
func (c *Client) Create(ctx context.Context, g store.Grant, id string, rec store.Record) (uint64, error) {
	return c.mutate(ctx, store.InstanceKey(g.Shard, id), fmt.Sprintf("create %s under %s", id, g),
		func(ctx context.Context) (uint64, error) { return c.n.under.Create(ctx, g, id, rec) },
		c.instRec(g, id, encodeRec(g, rec, true), false))
}

// Write implements store.Store.
func (c *Client) Write(ctx context.Context, g store.Grant, id string, rec store.Record) (uint64, error) {
	return c.mutate(ctx, store.InstanceKey(g.Shard, id), fmt.Sprintf("write %s tick %d under %s", id, rec.Tick, g),
		func(ctx context.Context) (uint64, error) { return c.n.under.Write(ctx, g, id, rec) },
		c.instRec(g, id, encodeRec(g, rec, false), false))
}

// WriteAsync implements store.Store. A write may stay in flight for a while (then a reconnect
// loses its answer); answers of faulted writes come from another goroutine.
func (c *Client) WriteAsync(g store.Grant, id string, rec store.Record, done func(uint64, error)) {
	c.settleDeferred()
	desc := fmt.Sprintf("write %s tick %d under %s", id, rec.Tick, g)
	do := func(ctx context.Context) (uint64, error) { return c.n.under.Write(ctx, g, id, rec) }
	c.writeAsync(store.InstanceKey(g.Shard, id), desc, do, c.instRec(g, id, encodeRec(g, rec, false), false), done)
}

// writeAsync runs one pipelined write (a record, or a whole batch) through the faults.
func (c *Client) writeAsync(key, desc string, do func(context.Context) (uint64, error), recf func(uint64), done func(uint64, error)) {
	n := c.n
	n.mu.Lock()
	inflight := n.roll(n.opts.InFlight, "in_flight")
	n.mu.Unlock()
	if !inflight {
		rev, err := c.mutateLosing(context.Background(), n.loseAsyncAnswer, key, desc, do, recf)
		if err != nil && (errors.Is(err, store.ErrUnknownOutcome) || errors.Is(err, errTransient)) {
			c.answerLater(desc, err, func() { done(rev, err) })
			return
		}
		done(rev, err)
		return
	}
	n.observe(c, key)
	if err := c.enter(desc); err != nil {
		go done(0, err)
		return
	}
	w := &asyncWrite{key: key, desc: desc, do: do, rec: recf, done: done}
	n.mu.Lock()
	d := n.delayLocked(n.opts.MaxInFlight)
	c.inflight[w] = time.AfterFunc(d, func() {
		n.mu.Lock()
		if _, ok := c.inflight[w]; !ok {
			n.mu.Unlock()
			return // a reconnect took it
		}
		delete(c.inflight, w)
		n.mu.Unlock()
		rev, err := do(context.Background())
		if err == nil {
			recf(rev)
			c.acked(w.key)
		}
		if !c.waitThaw() {
			done(0, c.killedErr(desc))
			return
		}
		done(rev, err)
	})
	n.mu.Unlock()
}

// answerLater delivers a failed WriteAsync's answer from another goroutine: at once, or (a lost
// answer, Options.LateAnswer) only after a while, held while the client is frozen.
func (c *Client) answerLater(desc string, err error, answer func()) {
	c.n.mu.Lock()
	defer c.n.mu.Unlock()
	c.answerLaterLocked(desc, err, answer)
}

func (c *Client) answerLaterLocked(desc string, err error, answer func()) {
	n := c.n
	if !errors.Is(err, store.ErrUnknownOutcome) || !n.roll(n.opts.LateAnswer, "late_answer") {
		go answer()
		return
	}
	d := n.delayLocked(n.opts.MaxLateAnswer)
	if n.roll(n.opts.AnswerInNextCall, "answer_in_next_call") {
		da := &deferredAnswer{answer: answer}
		c.deferred = append(c.deferred, da)
		n.logLocked("%s: the loss of %s's answer is noticed in the next write call, or after %v", c.name, desc, d)
		da.timer = time.AfterFunc(d, func() {
			n.mu.Lock()
			run := !da.done
			da.done = true
			n.mu.Unlock()
			if run {
				c.waitThaw()
				answer()
			}
		})
		return
	}
	n.logLocked("%s: the loss of %s's answer is noticed after %v", c.name, desc, d)
	time.AfterFunc(d, func() {
		c.waitThaw()
		answer()
	})
}

// settleDeferred delivers, on the caller's goroutine, the lost answers waiting for this call.
func (c *Client) settleDeferred() {
	n := c.n
	n.mu.Lock()
	var run []*deferredAnswer
	for _, da := range c.deferred {
		if !da.done {
			da.done = true
			da.timer.Stop()
			run = append(run, da)
		}
	}
	c.deferred = nil
	n.mu.Unlock()
	for _, da := range run {
		da.answer()
	}
}

// End implements store.Store.
func (c *Client) End(ctx context.Context, g store.Grant, id string) (uint64, error) {
	return c.mutate(ctx, store.InstanceKey(g.Shard, id), fmt.Sprintf("end %s under %s", id, g),
		func(ctx context.Context) (uint64, error) { return c.n.under.End(ctx, g, id) },
		c.instRec(g, id, nil, true))
}

// ControlGet implements store.Control; it may answer from a lagging view.
func (c *Client) ControlGet(ctx context.Context, key string) (store.Entry, error) {
	if err := c.read("get " + key); err != nil {
		return store.Entry{}, err
	}
	e, err := c.n.under.ControlGet(ctx, key)
	absent := errors.Is(err, store.ErrNotFound)
	if err != nil && !absent {
		return e, err
	}
	v, ok := c.n.lagged(c, ctlVKey(key), e.Revision, absent)
	if !ok {
		return e, err
	}
	if v == nil || v.deleted {
		return store.Entry{}, fmt.Errorf("%s (lagging view): %w", key, store.ErrNotFound)
	}
	return store.Entry{Key: key, Value: v.val, Revision: v.rev, Created: v.at}, nil
}

// LatestControl implements store.Control; never lagged.
func (c *Client) LatestControl(ctx context.Context, key string) (store.Entry, error) {
	if err := c.read("latest " + key); err != nil {
		return store.Entry{}, err
	}
	return c.n.under.LatestControl(ctx, key)
}

func (c *Client) ctlRec(key string, value []byte, deleted bool) func(uint64) {
	return func(rev uint64) { c.n.record(ctlVKey(key), version{rev: rev, val: value, deleted: deleted}) }
}

// ControlCreate implements store.Control.
func (c *Client) ControlCreate(ctx context.Context, key string, value []byte, ttl time.Duration) (uint64, error) {
	return c.mutate(ctx, key, fmt.Sprintf("create %s ttl %v", key, ttl),
		func(ctx context.Context) (uint64, error) { return c.n.under.ControlCreate(ctx, key, value, ttl) },
		c.ctlRec(key, value, false))
}

// ControlUpdate implements store.Control.
func (c *Client) ControlUpdate(ctx context.Context, key string, value []byte, expect uint64, ttl time.Duration) (uint64, error) {
	return c.mutate(ctx, key, fmt.Sprintf("update %s expecting %d ttl %v", key, expect, ttl),
		func(ctx context.Context) (uint64, error) {
			return c.n.under.ControlUpdate(ctx, key, value, expect, ttl)
		}, c.ctlRec(key, value, false))
}

// ControlDelete implements store.Control.
func (c *Client) ControlDelete(ctx context.Context, key string, expect uint64) error {
	_, err := c.mutate(ctx, key, fmt.Sprintf("delete %s expecting %d", key, expect),
		func(ctx context.Context) (uint64, error) { return 0, c.n.under.ControlDelete(ctx, key, expect) },
		c.ctlRec(key, nil, true))
	return err
}

// ControlList implements store.Control; each entry may come from a lagging view (entries whose
// key is absent now are never brought back).
func (c *Client) ControlList(ctx context.Context, filter string) ([]store.Entry, error) {
	if err := c.read("list " + filter); err != nil {
		return nil, err
	}
	cur, err := c.n.under.ControlList(ctx, filter)
	if err != nil {
		return nil, err
	}
	out := cur[:0:0]
	for _, e := range cur {
		v, ok := c.n.lagged(c, ctlVKey(e.Key), e.Revision, false)
		switch {
		case !ok:
			out = append(out, e)
		case v == nil || v.deleted:
		default:
			out = append(out, store.Entry{Key: e.Key, Value: v.val, Revision: v.rev, Created: v.at})
		}
	}
	return out, nil
}

// ControlWatch implements store.Control; the watch may be refused or end early.
func (c *Client) ControlWatch(ctx context.Context, filter string) (<-chan store.Entry, error) {
	wctx, life, err := c.watchStart(ctx, "watch "+filter)
	if err != nil {
		return nil, err
	}
	in, err := c.n.under.ControlWatch(wctx, filter)
	if err != nil {
		life()
		return nil, err
	}
	return forward(c, wctx, life, in), nil
}

// watchStart decides whether a watch is refused, and how long it lives. The returned cancel ends
// it (the channel closes once the underlying watch has).
func (c *Client) watchStart(ctx context.Context, what string) (context.Context, context.CancelFunc, error) {
	if err := c.enter(what); err != nil {
		return nil, nil, err
	}
	n := c.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.roll(n.opts.WatchRefuse, "watch_refused") {
		n.logLocked("%s: %s refused", c.name, what)
		return nil, nil, fmt.Errorf("%s: refused by fault injection", what)
	}
	wctx, cancel := context.WithCancel(ctx)
	key := new(int)
	c.watches[key] = cancel
	stop := func() {
		cancel()
		n.mu.Lock()
		delete(c.watches, key)
		n.mu.Unlock()
	}
	if n.roll(n.opts.WatchEnd, "watch_ended") {
		d := n.durLocked(n.opts.WatchLife)
		name := c.name
		t := time.AfterFunc(d, func() {
			if wctx.Err() == nil {
				n.Logf("%s: %s ended after %v", name, what, d)
			}
			stop()
		})
		return wctx, func() { t.Stop(); stop() }, nil
	}
	return wctx, stop, nil
}

// forward copies a watch's events to the caller, holding them while the client is frozen, and
// closes the caller's channel once the underlying one closes.
func forward[T any](c *Client, ctx context.Context, stop context.CancelFunc, in <-chan T) <-chan T {
	out := make(chan T, 1024)
	go func() {
		defer close(out)
		defer stop()
		for v := range in {
			if ctx.Err() != nil || !c.waitThaw() {
				stop()
				continue // drain until the underlying watch closes
			}
			select {
			case out <- v:
			case <-ctx.Done():
			}
		}
	}()
	return out
}

// HoldWrites implements store.FaultInjector by passing through to the wrapped store.
func (c *Client) HoldWrites(hold func(string) bool) {
	if fi, ok := c.n.under.(store.FaultInjector); ok {
		fi.HoldWrites(hold)
	}
}

// TakeHeld implements store.FaultInjector by passing through to the wrapped store.
func (c *Client) TakeHeld() []store.HeldWrite {
	if fi, ok := c.n.under.(store.FaultInjector); ok {
		return fi.TakeHeld()
	}
	return nil
}

// Close implements store.Store: a client closes nothing shared; Net.Close closes the store.
func (c *Client) Close() error { return nil }

// Close closes the wrapped store.
func (n *Net) Close() error { return n.under.Close() }

// Net is the Net the client belongs to.
func (c *Client) Net() *Net { return c.n }

// Killed reports whether the client was killed.
func (c *Client) Killed() bool {
	c.n.mu.Lock()
	defer c.n.mu.Unlock()
	return c.killed
}

// CollectBlobs passes a blob collection to the store underneath (no faults: an operator's tool).
func (c *Client) CollectBlobs(ctx context.Context, grace time.Duration, dryRun bool) (store.GCResult, error) {
	col, ok := c.n.under.(interface {
		CollectBlobs(context.Context, time.Duration, bool) (store.GCResult, error)
	})
	if !ok {
		return store.GCResult{}, fmt.Errorf("%T keeps no blobs", c.n.under)
	}
	return col.CollectBlobs(ctx, grace, dryRun)
}

// BlobStats is the blob uploads of the store underneath (shared by every client of the network).
func (c *Client) BlobStats() store.BlobStats {
	if bs, ok := c.n.under.(interface{ BlobStats() store.BlobStats }); ok {
		return bs.BlobStats()
	}
	return store.BlobStats{}
}
