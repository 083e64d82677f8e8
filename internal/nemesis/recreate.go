package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/tickfence/tickfence/store"
)

// Re-created IDs (issue 34 item 3). An instance ID has lives: created, ended, and created again
// (a gateway re-opening a dungeon under its name). In some runs (by the seed: every run with a
// restore, a third of the others) the nodes keep tombstones only briefly (Config.TombstoneTTL),
// so a later life is often a fresh create after the tombstone's expiry rather than a revival of
// it. The clients create IDs they ended again (client, recreate); each life is an inst of its
// own, with its own tag, and the checks take an op's instance to be the life it was sent to.
//
// Restores with effects in flight, and the lives that follow. A restore's backup is often taken
// while the effects stream is out (restoreEpisode), so the outboxes it holds go to the restored
// epoch, whose owners publish them again under their keys. And a restore starts the data buckets'
// revisions again at 1: whatever identity is made from a revision can come back. After a restore
// goes live, the aftermath (a trusted client, g0) takes up to three restored instances that a
// trusted client created in an earlier epoch, adds to each (its first life now emits in the new
// epoch), ends it, waits for its tombstone to expire, and creates the ID again — timing the create
// to land, if it can, at the revision at which the first life was created in the earlier epoch
// (it watches the live bucket's revision between ticks): a revision echo. It then adds to the new
// life as many times as the first life made effects, and a little more. The effects check wants
// every key to name one effect: two lives of an ID whose keys come from the same revision in one
// epoch break it.

// tombstoneTTL is the nodes' tombstone TTL for a run, from the seed alone (negative: shard's
// default of 10 minutes, under which an ID created again revives its tombstone).
func tombstoneTTL(seed uint64, restore bool) time.Duration {
	r := rand.New(rand.NewPCG(seed, 0x746f6d6273746f6e))
	switch {
	case restore: // the aftermath must see tombstones go within a moment of a restore
		return 100*time.Millisecond + time.Duration(r.Int64N(int64(150*time.Millisecond)))
	case r.IntN(3) == 0:
		return time.Second + time.Duration(r.Int64N(int64(2*time.Second)))
	}
	return -1
}

// endedOf is one of client's ended lives whose ID has no later life yet (nil if none), to create
// again.
func (c *cluster) endedOf(client string) *inst {
	if c.cfg.NoRecreate {
		return nil
	}
	c.mu.Lock()
	var ended []*inst
	for _, in := range c.insts {
		if in.ended && !in.again && !in.gone && in.by == client {
			ended = append(ended, in)
		}
	}
	c.mu.Unlock()
	if len(ended) == 0 {
		return nil
	}
	return ended[c.intn(len(ended))]
}

// recreate creates the ID of the ended life prev again, as a new life; it returns it (nil if
// another life of the ID was made already).
func (c *cluster) recreate(client string, n int, prev *inst) *inst {
	gen := c.audit.generation()
	c.mu.Lock()
	if prev.again {
		c.mu.Unlock()
		return nil
	}
	prev.again = true
	in := &inst{id: prev.id, shard: prev.shard, gen: gen, life: prev.life + 1, by: client}
	in.tag = fmt.Sprintf("tag-%s-L%d", in.id, in.life)
	c.insts = append(c.insts, in)
	c.mu.Unlock()
	c.edges.recreated.Add(1)
	c.net.Logf("client: %s creates %s again (life %d)", client, in.id, in.life)
	c.createLife(client, fmt.Sprintf("%s-c%d", client, n), in, prev)
	return in
}

// aftermathClient is the trusted client of the restore aftermath (opaque request IDs).
const aftermathClient = "g0"

// restoreAftermath waits for a restore to go live during the fault phase and then runs up to
// three echoes at once.
func (c *cluster) restoreAftermath() {
	<-c.restoresOver
	if c.audit.generation() == 0 {
		return
	}
	time.Sleep(c.dur(50*time.Millisecond, 300*time.Millisecond)) // the new epoch's owners load
	epoch, gen := c.audit.current()
	ctx := context.Background()
	type cand struct {
		in  *inst
		rev uint64 // the revision its life was created at (its effect sequence's base)
	}
	var cands []cand
	c.mu.Lock()
	insts := slices.Clone(c.insts)
	c.mu.Unlock()
	for _, in := range insts {
		c.mu.Lock()
		ok := in.created && !in.ending && !in.gone && in.gen < gen
		c.mu.Unlock()
		if !ok {
			continue
		}
		rec, _, err := c.mem.Load(ctx, epoch, in.shard, in.id)
		if err != nil || rec.Ended || rec.FxSeq < store.FxSeqBase(1) {
			continue
		}
		cands = append(cands, cand{in, rec.FxSeq / store.FxSeqBase(1)})
	}
	// The latest-created first: the live bucket reaches their revisions last.
	slices.SortFunc(cands, func(a, b cand) int { return int(b.rev) - int(a.rev) })
	cur := c.lastRevision(epoch)
	revs := make([]uint64, len(cands))
	for i, x := range cands {
		revs[i] = x.rev
	}
	c.net.Logf("nemesis: restore aftermath: epoch %d is at revision %d; the restored lives began at revisions %v", epoch, cur, revs)
	var n atomic.Int64
	started := 0
	for _, x := range cands {
		if started == 5 || x.rev <= cur+8 {
			break
		}
		started++
		c.net.Logf("nemesis: restore aftermath: %s (its life created at revision %d of an earlier epoch; epoch %d is at %d) is ended and created again",
			x.in.id, x.rev, epoch, cur)
		c.clients.Add(1) // from a goroutine of c.clients: it is not zero
		go func() { defer c.clients.Done(); c.echo(x.in, epoch, x.rev, &n) }()
	}
}

// echo adds to old, ends it, waits for its tombstone to go, creates its ID again at revision rev
// of the live epoch's bucket if it can, and adds to the new life.
func (c *cluster) echo(old *inst, epoch, rev uint64, n *atomic.Int64) {
	ctx := context.Background()
	next := func() int { return int(n.Add(1)) }
	began := time.Now()
	// Its life makes an effect in this epoch, unless a client's add did already.
	if !c.madeIn(old, epoch) {
		c.add(aftermathClient, next(), old)
	}
	deadline := time.Now().Add(8 * time.Second)
	for !c.isEnded(old) {
		if time.Now().After(deadline) {
			return
		}
		c.end(aftermathClient, next(), old) // does nothing while a client's add to it is in flight
		if !c.isEnded(old) {
			time.Sleep(c.dur(10*time.Millisecond, 50*time.Millisecond))
		}
	}
	// The first life's effects, for the later life to make as many and more.
	var made uint64
	if rec, _, err := c.mem.Load(ctx, epoch, old.shard, old.id); err == nil && rec.FxSeq > store.FxSeqBase(rev) {
		made = rec.FxSeq - store.FxSeqBase(rev)
	}
	// Its tombstone goes (a delete marker, once its effects are delivered).
	for {
		if _, _, err := c.mem.Load(ctx, epoch, old.shard, old.id); errors.Is(err, store.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) || c.epochNow() != epoch {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The echo: between ticks (mid-slot, when the nodes' writes of the last tick have landed),
	// the live bucket one revision short of rev. Past it, or out of time, create it anyway.
	c.edges.echoTries.Add(1)
	for {
		at := c.grid.Add((time.Since(c.grid)/tickPeriod+1)*tickPeriod + tickPeriod/2)
		time.Sleep(time.Until(at))
		cur := c.lastRevision(epoch)
		if cur+1 >= rev || time.Now().After(deadline) || c.epochNow() != epoch {
			c.net.Logf("nemesis: restore aftermath: %s created again with epoch %d at revision %d (its first life began at %d; %v after the aftermath began)",
				old.id, epoch, cur, rev, time.Since(began).Round(time.Millisecond))
			break
		}
	}
	in := c.recreate(aftermathClient, next(), old)
	if in == nil || !c.isCreated(in) {
		return
	}
	if rec, _, err := c.mem.Load(ctx, epoch, in.shard, in.id); err == nil && rec.FxSeq/store.FxSeqBase(1) == rev {
		c.edges.echoes.Add(1)
		c.net.Logf("nemesis: restore aftermath: %s's life %d began at revision %d of epoch %d, as its first life did in an earlier epoch", in.id, in.life, rev, epoch)
	}
	adds := min(int(made)+2, 48)
	for range adds {
		k := next()
		c.clients.Add(1) // from a goroutine of c.clients: it is not zero
		go func() { defer c.clients.Done(); c.add(aftermathClient, k, in) }()
	}
}

// madeIn reports whether a record of in's ID in epoch's history holds an effect made in epoch.
func (c *cluster) madeIn(in *inst, epoch uint64) bool {
	key := store.InstanceKey(in.shard, in.id)
	for _, m := range c.mem.History(store.DataBucket(epoch, 0)) {
		if m.Key != key || m.Deleted {
			continue
		}
		if rec, err := store.DecodeRecord(m.Value); err == nil {
			for _, e := range rec.Fx {
				if _, e2, _, ok := store.ParseEffectKey(e.Key); ok && e2 == epoch {
					return true
				}
			}
		}
	}
	return false
}

func (c *cluster) isEnded(in *inst) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return in.ended || in.gone
}

func (c *cluster) isCreated(in *inst) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return in.created
}

// lastRevision is the revision of the last message of epoch's data bucket (the nemesis reads its
// own store: no fault, no lag).
func (c *cluster) lastRevision(epoch uint64) uint64 {
	h := c.mem.History(store.DataBucket(epoch, 0))
	if len(h) == 0 {
		return 0
	}
	return h[len(h)-1].Seq
}
