package nemesis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
)

// Oversized commands beside others (issue 34 item 1). The grower is a trusted client (gx, opaque
// request IDs) that sends grow commands: each emits effects whose payloads add up past
// store.MaxRecordBytes, so no write that holds them in its outbox can be stored — the store
// refuses it as too large and the instance goes back to its last stored state (the effects of
// an undone command never leave: checkEffects). What else shares that write must not pay for it: only the
// grow may be answered too_large (undone, do not retry), a retransmission of a command already
// stored gets its first answer, and an innocent command is applied or answered retryable. The
// grower sends at random to instances with commands in flight, and, timed by the clients, with
// a retransmission of an add whose last attempt may have landed (no answer in time, or a write
// of unknown outcome), in the same instant so that both reach the same tick.
//
// The clients check every too_large they get (tooLarge): an add never grows the record, so a
// too_large answer to it is a violation — "answered too_large while the stored state holds it"
// when its op is in the stored record (a client re-issuing it, as too_large allows, applies it
// twice: the client then does, and the ledger check reports the op twice), else "an innocent
// command refused too_large".
type grower struct {
	c    *cluster
	next atomic.Int64
	// timed: grows left that the clients may time with a retransmission.
	timed atomic.Int64
}

// growBytes is the effects a grow emits: past what a record may hold, so never storable.
const growBytes = store.MaxRecordBytes + 8<<10

// growShare is the share of runs (by the seed alone) with a grower: a grow costs hundreds of KiB
// of effects and two encodings of a record that size, dear under the race detector.
const growShare = 0.35

// growPlanned decides, from the seed alone, whether a run has a grower.
func growPlanned(seed uint64) bool {
	return rand.New(rand.NewPCG(seed, 0x67726f77)).Float64() < growShare
}

func newGrower(c *cluster) *grower {
	g := &grower{c: c}
	g.timed.Store(2)
	return g
}

// active: the grower sends only while faults are injected.
func (g *grower) active() bool { return g != nil && !g.c.healed.Load() }

// run sends a grow every 1.5–5 s to an instance that has commands in flight (else any live one)
// until the cluster heals or stop closes.
func (g *grower) run(stop <-chan struct{}) {
	c := g.c
	for g.active() {
		select {
		case <-stop:
			return
		case <-time.After(c.dur(1500*time.Millisecond, 5*time.Second)):
		}
		c.mu.Lock()
		var live, busy []*inst
		for _, in := range c.insts {
			if in.created && !in.gone && !in.ending {
				live = append(live, in)
				if in.inflight > 0 {
					busy = append(busy, in)
				}
			}
		}
		c.mu.Unlock()
		if len(busy) > 0 {
			live = busy
		}
		if len(live) > 0 && g.active() {
			in := live[c.intn(len(live))]
			c.clients.Add(1) // from a goroutine of c.clients: it is not zero
			go func() { defer c.clients.Done(); g.send(in, "beside commands in flight", nil) }()
		}
	}
}

// beforeRetransmission is called by a client about to retransmit an add to in whose last attempt
// may have landed: often a grow goes with it, submitted first in the same instant.
func (g *grower) beforeRetransmission(in *inst) {
	if !g.active() || g.timed.Load() <= 0 || g.c.float() >= 0.5 || g.timed.Add(-1) < 0 {
		return
	}
	submitted := make(chan struct{})
	var once sync.Once
	g.c.edges.growsTimed.Add(1)
	g.c.clients.Add(1) // called by a client, a goroutine of c.clients: it is not zero
	go func() {
		defer g.c.clients.Done()
		g.send(in, "with a retransmission", func() { once.Do(func() { close(submitted) }) })
	}()
	select { // it waits for a host with the shard like the retransmission does; not for long
	case <-submitted:
	case <-time.After(50 * time.Millisecond):
	}
}

// send sends one grow to in and counts its answer (too_large is what it should get; an instance
// ended in the same write, or gone, answers otherwise).
func (g *grower) send(in *inst, why string, submitted func()) {
	c := g.c
	n := g.next.Add(1)
	id := fmt.Sprintf("gx-g%d", n)
	c.edges.grows.Add(1)
	c.net.Logf("grower: grow %s of %s by %d bytes %s", id, in.id, growBytes, why)
	r, ok := c.sendWith("gx", in, id, map[string]any{"type": "grow", "op": id, "n": growBytes}, sendOpts{submitted: submitted})
	if submitted != nil {
		submitted() // also when it ends without a host ever having the shard
	}
	switch {
	case !ok:
	case !r.OK && r.Error.Code == wire.CodeTooLarge:
		c.edges.growsTooLarge.Add(1)
	default:
		c.net.Logf("grower: grow %s of %s answered %v %v", id, in.id, r.OK, r.Error)
	}
}

// tooLargeShown: how many adds answered too_large a run reports (one grow refuses every command
// of its write; the rest go to the event log and a count).
const tooLargeShown = 5

// tooLarge checks an add answered too_large: it grows nothing, so the answer is wrong; which
// way it is wrong shows in the stored record of the live epoch.
func (c *cluster) tooLarge(client string, in *inst, op *opRec, r wire.Reply) {
	violate := c.violate
	if c.edges.tooLarge.Add(1) > tooLargeShown {
		violate = func(format string, args ...any) { c.net.Logf("VIOLATION (not reported again): "+format, args...) }
	}
	epoch := c.epochNow()
	rec, rev, err := c.mem.Load(context.Background(), epoch, in.shard, in.id)
	if err == nil && !rec.Ended {
		if l, err := decodeLedger(rec.State); err == nil {
			if i := slices.Index(l.Ops, op.id); i >= 0 {
				violate("client %s: add %s to %s answered %s, but the stored record (revision %d, epoch %d) holds it at position %d: too_large says undone, do not retry, so a client that re-issues it applies it twice",
					client, op.id, in.id, r.Error, rev, epoch, i)
				return
			}
		}
	}
	violate("client %s: add %s to %s answered %s: an innocent command refused too_large (an add grows nothing; only a grow in its write did)",
		client, op.id, in.id, r.Error)
}
