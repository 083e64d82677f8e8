package nemesis

import (
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/shard"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
)

// The flooder is an untrusted player (issue 33 item 3) that sends junk to the instances the
// clients use, concurrently with them: bursts of more distinct opaque request IDs than a record's
// window holds (store.RequestWindow) of get, which changes nothing, and bursts of more throw-away
// client IDs in the compact form than a record keeps sessions (store.MaxClientSessions), none of
// them ever acknowledged. Without the per-sender quotas (store.MaxSenderRequests,
// MaxSenderSessions) the first evicts a client's request ID, so a retransmission of it applies
// twice, and the second fills the record's sessions, so a client's new session is refused busy
// until they expire (minutes). Bursts come at random (mostly of client IDs, which cost little),
// and, timed by the clients themselves, just before a retransmission of an opaque request ID
// whose last attempt may have landed (no answer in time, or a write of unknown outcome) and just
// before a session client's first command to an instance. The flooder's own answers are not
// checked: any final answer will do (rate_limited is what most should get).
type flooder struct {
	c      *cluster
	sender actor.Sender
	next   atomic.Int64 // junk IDs

	// Bursts left that the clients may time (the random ones are bounded by the chaos phase).
	retransmissions, newSessions atomic.Int64

	reqBursts, sessBursts, sent, ok, limited, busy, other atomic.Int64
}

// FloodCounts is what the flooder did in a run.
type FloodCounts struct {
	RequestBursts, SessionBursts int // bursts of opaque request IDs, of client IDs
	Sent                         int // junk commands (each counted once, retransmissions aside)
	Applied                      int // answered ok
	Limited                      int // answered rate_limited
	Busy                         int // final busy (a session burst against a full record)
	Other                        int // other final answers (unknown_instance of an ended one…)
}

func (f FloodCounts) String() string {
	return fmt.Sprintf("flooder: %d request bursts, %d session bursts, %d junk commands (%d ok, %d rate_limited, %d busy, %d other)",
		f.RequestBursts, f.SessionBursts, f.Sent, f.Applied, f.Limited, f.Busy, f.Other)
}

func (f *FloodCounts) add(g FloodCounts) {
	f.RequestBursts += g.RequestBursts
	f.SessionBursts += g.SessionBursts
	f.Sent += g.Sent
	f.Applied += g.Applied
	f.Limited += g.Limited
	f.Busy += g.Busy
	f.Other += g.Other
}

func newFlooder(c *cluster) *flooder {
	f := &flooder{c: c, sender: playerSender("f1")}
	f.retransmissions.Store(2)
	f.newSessions.Store(2)
	return f
}

func (f *flooder) counts() FloodCounts {
	if f == nil {
		return FloodCounts{}
	}
	return FloodCounts{RequestBursts: int(f.reqBursts.Load()), SessionBursts: int(f.sessBursts.Load()), Sent: int(f.sent.Load()),
		Applied: int(f.ok.Load()), Limited: int(f.limited.Load()), Busy: int(f.busy.Load()), Other: int(f.other.Load())}
}

// active: the flooder sends only while faults are injected, so that liveness after healing
// measures what it left behind.
func (f *flooder) active() bool { return f != nil && !f.c.healed.Load() }

// beforeRetransmission is called by a client about to retransmit an opaque request ID to in.
func (f *flooder) beforeRetransmission(in *inst) {
	if f.active() && f.retransmissions.Load() > 0 && f.c.float() < 0.6 && f.retransmissions.Add(-1) >= 0 {
		f.burst(in, false, "before a retransmission")
	}
}

// beforeNewSession is called by a session client about to send its first command to in.
func (f *flooder) beforeNewSession(in *inst) {
	if f.active() && f.newSessions.Load() > 0 && f.c.float() < 0.5 && f.newSessions.Add(-1) >= 0 {
		f.burst(in, true, "before a new session")
	}
}

// run sends bursts at random to instances in use until the cluster heals or stop closes.
func (f *flooder) run(stop <-chan struct{}) {
	c := f.c
	for f.active() {
		select {
		case <-stop:
			return
		case <-time.After(c.dur(4*time.Second, 8*time.Second)):
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
		if len(busy) > 0 && c.float() < 0.5 {
			live = busy
		}
		if len(live) > 0 && f.active() {
			f.burst(live[c.intn(len(live))], c.float() < 0.8, "at random")
		}
	}
}

// burst sends junk commands to in all at once: 2×store.RequestWindow+4 gets with distinct
// opaque request IDs, or (sessions) store.MaxClientSessions+8 gets each from a new client ID
// (sequence 1, nothing acknowledged). Each is retransmitted with its ID, as a client does, on
// retry, not_owner, busy (opaque only: a session burst takes busy as its answer) or no answer,
// at most 4 times within 4 s, while the faults last; it waits for a host running the shard.
func (f *flooder) burst(in *inst, sessions bool, why string) {
	c := f.c
	n := 2*store.RequestWindow + 4
	if sessions {
		n = store.MaxClientSessions + 8
		f.sessBursts.Add(1)
	} else {
		f.reqBursts.Add(1)
	}
	f.sent.Add(int64(n))
	body, err := wire.Canonical(map[string]any{"type": "get"})
	if err != nil {
		panic(err)
	}
	first := f.next.Add(int64(n)) - int64(n)
	reqs := make([]wire.Request, n)
	for i := range reqs {
		id := fmt.Sprintf("f1-j%d", first+int64(i))
		req, err := wire.DecodeRequest(wire.Subject(in.shard, in.id), id, "", body, c.cfg.Shards)
		if err != nil {
			panic(err)
		}
		if sessions {
			req.ID, req.Client, req.Seq, req.Ack = "", id, 1, 0
		}
		reqs[i] = req
	}
	form := "request IDs"
	if sessions {
		form = "client IDs"
	}
	c.net.Logf("flooder: %d junk %s f1-j%d… to %s (shard %d) %s", n, form, first, in.id, in.shard, why)
	pending := make([]int, n)
	for i := range pending {
		pending[i] = i
	}
	type answer struct {
		i int
		b []byte
	}
	end := time.Now().Add(4 * time.Second)
	// Only to the hosts running the shard: junk refused as a whole (a shard loading or handed
	// on) costs a lot and evicts nothing.
	running := func() []*shard.Host {
		return slices.DeleteFunc(c.hostsOf(in.shard), func(h *shard.Host) bool { return !h.Running(in.shard) })
	}
	for attempt := 0; attempt < 4 && len(pending) > 0 && f.active() && time.Now().Before(end); attempt++ {
		if attempt > 0 {
			time.Sleep(c.dur(100*time.Millisecond, 300*time.Millisecond))
		}
		hosts := running()
		for len(hosts) == 0 && f.active() && time.Now().Before(end) {
			time.Sleep(c.dur(50*time.Millisecond, 150*time.Millisecond))
			hosts = running()
		}
		if len(hosts) == 0 {
			break
		}
		replies := make(chan answer, len(pending)*len(hosts))
		for _, i := range pending {
			for _, h := range hosts {
				cmd := shard.Command{Request: reqs[i], Received: time.Now(), Reply: func(b []byte) { replies <- answer{i, b} }}
				cmd.SetSender(f.sender)
				h.Submit(cmd)
			}
		}
		final := make(map[int]bool, len(pending))
		timeout := time.NewTimer(2 * time.Second)
	wait:
		for range len(pending) * len(hosts) {
			select {
			case a := <-replies:
				if final[a.i] {
					continue
				}
				r, err := wire.DecodeReply(a.b, false)
				if err != nil {
					c.violate("flooder: undecodable reply: %v", err)
					final[a.i] = true
					continue
				}
				switch {
				case r.OK:
					f.ok.Add(1)
				case r.Error.Code == wire.CodeRateLimited:
					f.limited.Add(1)
				case r.Error.Code == wire.CodeBusy && sessions:
					f.busy.Add(1)
				case retryable(r.Error.Code):
					continue
				default:
					f.other.Add(1)
				}
				final[a.i] = true
				if len(final) == len(pending) {
					break wait
				}
			case <-timeout.C:
				break wait
			}
		}
		timeout.Stop()
		rest := pending[:0]
		for _, i := range pending {
			if !final[i] {
				rest = append(rest, i)
			}
		}
		pending = rest
	}
}
