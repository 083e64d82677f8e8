package main

// The cluster scenario's load: attacks at a fixed rate, retried until answered, and their round
// trips.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/auth"
	"github.com/tickfence/tickfence/internal/hdr"
	"github.com/tickfence/tickfence/internal/proc"
	"github.com/tickfence/tickfence/shard/natscmd"
)

// loadGen sends attacks at a fixed rate to random instances through natscmd.Client, each with a
// unique request ID, retried with the same ID until answered or --give-up passes. It has its own
// NATS connection so that the requests it published (retries included) are its own count.
type loadGen struct {
	nc      *nats.Conn
	client  *natscmd.Client
	ids     []string
	rate    float64
	giveUp  time.Duration
	runID   string
	rng     *mrand.Rand // the scheduler's only
	keep    bool        // keep every round trip for the series
	window0 atomic.Int64
	// attempts0 is the connection's published count when the attacks started (setup excluded).
	attempts0 atomic.Int64

	seq      atomic.Uint64
	sent     atomic.Int64
	ok       atomic.Int64
	unknown  atomic.Int64
	dropped  atomic.Int64
	inflight atomic.Int64
	rtt      *hdr.Histogram
	wg       sync.WaitGroup

	mu      sync.Mutex
	errs    map[string]int64
	samples []rttSample
	// Per instance: damage of acknowledged attacks, attacks with no answer.
	acked   []atomic.Int64
	unknowN []atomic.Int64

	// The first killable instances get a boss of killableHP instead of 1e9 (chaos only), so
	// they die and respawn under the attacks.
	killable   int
	killableHP int64
}

type rttSample struct {
	sent float64 // s since the window opened
	rtt  time.Duration
	inst int32 // the instance's index
	ok   bool  // acknowledged (applied), not refused
}

const maxInflight = 20000

func (b *benchCluster) newLoad(seed uint64, rate float64, giveUp time.Duration, keep bool) (*loadGen, error) {
	nc, err := b.ConnectAs(auth.Gateway, "tickbench-load", nats.Name("tickbench load")) // a gateway where the server enforces roles
	if err != nil {
		return nil, err
	}
	rb := make([]byte, 4)
	_, _ = rand.Read(rb)
	client := natscmd.NewClient(nc, b.shards)
	client.NoIdleAck = true // a generator keeps sending to the same instances: its next command acknowledges
	return &loadGen{nc: nc, client: client, rate: rate, giveUp: giveUp,
		runID: hex.EncodeToString(rb), rng: mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		keep: keep, rtt: hdr.New(7), errs: map[string]int64{}}, nil
}

// setup creates the instances (boss HP 1e9, or killableHP for the first killable ones) and joins
// player p in each.
func (g *loadGen) setup(ctx context.Context, p *progress, n int) error {
	g.ids = make([]string, n)
	for i := range g.ids {
		g.ids[i] = fmt.Sprintf("bench-%d", i)
	}
	g.acked = make([]atomic.Int64, n)
	g.unknowN = make([]atomic.Int64, n)
	start := time.Now()
	sem := make(chan struct{}, 32)
	errc := make(chan error, n)
	var wg sync.WaitGroup
	var done atomic.Int64
	for i, id := range g.ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			cctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			hp := int64(1_000_000_000)
			if i < g.killable {
				hp = g.killableHP
			}
			r, err := g.client.SendMap(cctx, id, g.runID+"-create-"+id, map[string]any{"type": "create", "kind": "dungeon", "boss_hp": hp})
			if err == nil && !r.OK {
				err = r.Error
			}
			if err == nil {
				r, err = g.client.SendMap(cctx, id, g.runID+"-join-"+id, map[string]any{"type": "join", "player": "p"})
				if err == nil && !r.OK {
					err = r.Error
				}
			}
			if err != nil {
				errc <- fmt.Errorf("set up instance %d (%s): %w", i, id, err)
				return
			}
			if d := done.Add(1); d%50 == 0 {
				p.line("instances created and joined: %d/%d", d, n)
			}
		}()
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return err
	}
	p.line("%d instances created and joined in %v", n, time.Since(start).Round(time.Millisecond))
	return nil
}

func (g *loadGen) markWindow(t time.Time) { g.window0.Store(t.UnixNano()) }

func (g *loadGen) attempts() int64 { return int64(g.nc.Stats().OutMsgs) }

// start runs the load until the stop it returns is called or ctx ends. stop returns once run has:
// no attack starts after it, so wait may follow (an Add racing wait's Wait, and the generator
// outliving its caller's frame, were both possible when run was left to end on its own).
func (g *loadGen) start(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); g.run(ctx) }()
	return func() { cancel(); <-done }
}

// run schedules attacks at the rate until ctx ends (open loop: a slow answer never slows the
// schedule; past maxInflight commands in flight, scheduled ones are counted as not sent).
func (g *loadGen) run(ctx context.Context) {
	g.attempts0.CompareAndSwap(0, g.attempts())
	start := time.Now()
	issued := 0
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			due := int(now.Sub(start).Seconds() * g.rate)
			for ; issued < due; issued++ {
				if g.inflight.Load() >= maxInflight {
					g.dropped.Add(1)
					continue
				}
				i := g.rng.IntN(len(g.ids))
				g.inflight.Add(1)
				g.wg.Add(1)
				go func() {
					defer g.wg.Done()
					defer g.inflight.Add(-1)
					g.attack(i)
				}()
			}
		}
	}
}

// attack sends one attack and accounts for its outcome. It ignores the run's context: a command
// under way is retried until answered or given up, even after the schedule stopped.
func (g *loadGen) attack(i int) (ok bool) { return g.attackOutcome(i) == "ok" }

// attackOutcome is attack, telling how it ended: "ok", the error code of the answer, or
// "unknown" (no answer within the give-up time).
func (g *loadGen) attackOutcome(i int) string {
	rid := fmt.Sprintf("%s-a%d", g.runID, g.seq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), g.giveUp)
	defer cancel()
	g.sent.Add(1)
	start := time.Now()
	r, err := g.client.SendMap(ctx, g.ids[i], rid, map[string]any{"type": "attack", "player": "p"})
	rtt := time.Since(start)
	if err != nil {
		g.unknown.Add(1)
		g.unknowN[i].Add(1)
		return "unknown"
	}
	g.rtt.Record(rtt)
	if g.keep {
		g.mu.Lock()
		g.samples = append(g.samples, rttSample{sent: float64(start.UnixNano()-g.window0.Load()) / 1e9, rtt: rtt, inst: int32(i), ok: r.OK})
		g.mu.Unlock()
	}
	if !r.OK {
		g.mu.Lock()
		g.errs[r.Error.Code]++
		g.mu.Unlock()
		return r.Error.Code
	}
	g.ok.Add(1)
	res, _ := r.Result.(map[string]any)
	dmg, okd := proc.Int64(res["damage"])
	if !okd {
		g.mu.Lock()
		g.errs["no_damage_in_result"]++
		g.mu.Unlock()
	}
	g.acked[i].Add(dmg)
	return "ok"
}

func (g *loadGen) wait() { g.wg.Wait() }

func (g *loadGen) status() string {
	return fmt.Sprintf("sent %d ok %d unknown %d in flight %d  rtt p99 %s ms max %s ms",
		g.sent.Load(), g.ok.Load(), g.unknown.Load(), g.inflight.Load(), ms(g.rtt.Quantile(0.99)), ms(g.rtt.Max()))
}

// result summarizes the attacks sent so far.
func (g *loadGen) result() commandResult {
	r := commandResult{Sent: g.sent.Load(), OK: g.ok.Load(), Unknown: g.unknown.Load(), Dropped: g.dropped.Load(),
		Attempts: g.attempts() - g.attempts0.Load(), P50: g.rtt.Quantile(0.5), P99: g.rtt.Quantile(0.99), P999: g.rtt.Quantile(0.999), Max: g.rtt.Max()}
	g.mu.Lock()
	if len(g.errs) > 0 {
		r.Errors = map[string]int64{}
	}
	var failed int64
	for k, v := range g.errs {
		r.Errors[k] = v
		failed += v
	}
	g.mu.Unlock()
	r.Answered = r.OK + failed
	r.Retried = max(0, r.Attempts-r.Sent)
	return r
}

// maxDuring is the largest round trip of the commands under way at some moment in [from, to]
// (seconds since the window opened), and how many there were.
func (g *loadGen) maxDuring(from, to float64) (time.Duration, int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var m time.Duration
	n := 0
	for _, s := range g.samples {
		if s.sent <= to && s.sent+s.rtt.Seconds() >= from {
			m = max(m, s.rtt)
			n++
		}
	}
	return m, n
}

// series bins round trips by the second they were sent in.
func (g *loadGen) series(window time.Duration) []rttPoint {
	g.mu.Lock()
	defer g.mu.Unlock()
	bins := int(math.Ceil(window.Seconds()))
	hs := make([]*hdr.Histogram, bins)
	for _, s := range g.samples {
		b := int(math.Floor(s.sent))
		if b < 0 || b >= bins {
			continue
		}
		if hs[b] == nil {
			hs[b] = hdr.New(5)
		}
		hs[b].Record(s.rtt)
	}
	var out []rttPoint
	for i, h := range hs {
		if h == nil {
			continue
		}
		out = append(out, rttPoint{At: float64(i) + 0.5, N: int(h.Count()), P99: h.Quantile(0.99), Max: h.Max()})
	}
	return out
}

// indexSet maps instance IDs to their indexes in g.ids.
func (g *loadGen) indexSet(ids []string) map[int]bool {
	idx := make(map[string]int, len(g.ids))
	for i, id := range g.ids {
		idx[id] = i
	}
	out := make(map[int]bool, len(ids))
	for _, id := range ids {
		if i, ok := idx[id]; ok {
			out[i] = true
		}
	}
	return out
}

// ackPause is ackPauseOf over the round trips kept so far.
func (g *loadGen) ackPause(from, end float64, in func(int) bool) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return ackPauseOf(g.samples, from, end, in)
}

// ackPauseOf is the longest stretch, from from (s since the window opened) on, without an
// acknowledgement of a command to an instance in: the gaps between from, the answers (sent +
// round trip) of the acknowledged commands after it, and end (the window's end) if the last one
// came before it.
func ackPauseOf(samples []rttSample, from, end float64, in func(int) bool) time.Duration {
	var acks []float64
	for _, s := range samples {
		// sent > end: a warm-up command, kept before the window's start was marked
		if a := s.sent + s.rtt.Seconds(); s.ok && a > from && s.sent <= end && in(int(s.inst)) {
			acks = append(acks, a)
		}
	}
	slices.Sort(acks)
	last, gap := from, 0.0
	for _, a := range acks {
		gap = math.Max(gap, a-last)
		last = a
	}
	if end > last {
		gap = math.Max(gap, end-last)
	}
	return time.Duration(gap * 1e9)
}
