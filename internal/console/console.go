// Package console is the operator console: one HTTP handler that shows a tickfence cluster live
// — the coordinator leader; nodes with their state, load, lease age, instances and p99 tick
// lateness over the last minutes; a grid of every shard coloured by owner with the moves in
// flight; failovers and hand-offs as a timeline — and carries out the operator verbs (drain,
// undrain, move, pin, unpin, rebalance after showing its plan) with the same coordinator
// functions tickctl calls, recording each in the audit stream as tickctl does.
//
// It reads nothing by polling: a coordinator.Watcher follows the control bucket and every
// shard.<S>, and each change is pushed to the page as Server-Sent Events (at most every
// Config.Push, the whole compact state: a few bytes a shard). The page is plain HTML, CSS and
// JavaScript embedded in the binary (no build step, nothing fetched from elsewhere); the grid is
// one canvas (a pixel per shard, scaled up), so 4096 shards draw in 5–10 ms on two busy cores.
//
// Served by `tickctl console --listen 127.0.0.1:8080`. Whoever it serves acts with the console's
// NATS credentials, so its handler is guarded (package webguard, Config.Guard): it serves only
// its own Host names (a DNS-rebinding page is refused), needs a login token whenever it is not on
// loopback, and refuses a state-changing request from another origin; the buttons' requests must
// also carry the header X-Tickfence-Console (which a page of another origin cannot send without
// the console's consent), so another site open in the same browser cannot drain a node.
package console

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/auth"
	"github.com/tickfence/tickfence/coordinator"
	"github.com/tickfence/tickfence/internal/webguard"
	"github.com/tickfence/tickfence/store"
)

//go:embed static
var static embed.FS

// Header is the request header every state-changing request must carry (any value).
const Header = "X-Tickfence-Console"

// Config of a console.
type Config struct {
	// Store is the cluster's store (store/natskv); NC the connection the audit entries go on.
	Store store.Store
	NC    *nats.Conn
	// Creds is the credentials file the console connected with: its user and role are the
	// "who" of every audit entry. "" without credentials.
	Creds string
	// LeaseTTL and LeaseMargin of the nodes (tickd's defaults: 2s and 500ms): a node whose lease
	// was last renewed longer than LeaseTTL − LeaseMargin ago has fenced itself.
	LeaseTTL, LeaseMargin time.Duration
	// History of the lateness chart (default 5m).
	History time.Duration
	// Push is the least time between two pushes of the state to a page (default 250ms).
	Push time.Duration
	// MaxMoves and Tolerance of a rebalance, as tickctl rebalance's flags (default 8 and 0.05).
	MaxMoves  int
	Tolerance float64
	// Log receives structured logs (default: none).
	Log *slog.Logger
	// Guard guards the handler: the Host check, the login token, the origin of state-changing
	// requests (package webguard). Default: webguard.Loopback, the Host check only (an IP
	// address or localhost), so that a web page whose DNS name is made to point at 127.0.0.1
	// (DNS rebinding) is not the console's own origin.
	Guard *webguard.Guard
}

// Console is a running console.
type Console struct {
	cfg   Config
	w     *coordinator.Watcher
	log   *slog.Logger
	ctx   context.Context
	files fs.FS

	mu       sync.Mutex
	version  uint64
	changed  chan struct{} // closed and replaced on every change
	timeline []Event
	lateness map[string][]point
	joined   map[string]time.Time // session → when the console first saw it
	lapsed   map[string]bool      // node → its lease expired and has not been seen since
	moves    map[uint32]recentMove
	plans    map[string]planned
	planSeq  int
	applying bool
	leader   store.LeaderRecord // the last one on the timeline
	refused  chan struct{}      // closed and replaced when the NATS server refuses a request
	refusal  error
}

type point struct {
	T  int64   `json:"t"` // Unix ms
	Ms float64 `json:"ms"`
}

type recentMove struct {
	rec  store.MoveRecord
	seen time.Time
}

type planned struct {
	plan coordinator.Plan
	at   time.Time
}

// Event is one entry of the timeline.
type Event struct {
	At   time.Time `json:"at"`
	Kind string    `json:"kind"` // failover, handoff, placed, lease-expired, joined, left, leader, drain, undrain, pin, unpin, action, rebalance
	Node string    `json:"node,omitempty"`
	From string    `json:"from,omitempty"`
	To   string    `json:"to,omitempty"`
	// Shards of a failover, hand-off or placement, grouped: the same kind, from and to within
	// two seconds is one event.
	Shards []uint32 `json:"shards,omitempty"`
	Count  int      `json:"count,omitempty"`
	Text   string   `json:"text,omitempty"`
}

// New starts watching the cluster; the console runs until ctx ends.
func New(ctx context.Context, cfg Config) (*Console, error) {
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = 2 * time.Second
	}
	if cfg.LeaseMargin == 0 {
		cfg.LeaseMargin = 500 * time.Millisecond
	}
	if cfg.History == 0 {
		cfg.History = 5 * time.Minute
	}
	if cfg.Push == 0 {
		cfg.Push = 250 * time.Millisecond
	}
	if cfg.MaxMoves == 0 {
		cfg.MaxMoves = 8
	}
	if cfg.Tolerance == 0 {
		cfg.Tolerance = 0.05
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Guard == nil {
		cfg.Guard = webguard.Loopback("console")
	}
	files, err := fs.Sub(static, "static")
	if err != nil {
		return nil, err
	}
	c := &Console{cfg: cfg, log: cfg.Log, ctx: ctx, files: files, changed: make(chan struct{}), refused: make(chan struct{}),
		lateness: map[string][]point{}, joined: map[string]time.Time{}, lapsed: map[string]bool{}, moves: map[uint32]recentMove{}, plans: map[string]planned{}}
	w, err := coordinator.Watch(ctx, cfg.Store, cfg.Log, c.onChange)
	if err != nil {
		return nil, fmt.Errorf("watch the cluster: %w", err)
	}
	c.mu.Lock()
	c.w = w
	now := time.Now()
	s := w.State()
	if s.Leader != nil {
		c.leader = *s.Leader
	}
	for _, n := range s.Nodes {
		c.joined[n.Record.Session] = now.Add(-time.Hour) // there before the console: not joining
		c.addLateness(n.ID, now, n.Record.P99LatenessMs)
	}
	c.mu.Unlock()
	return c, nil
}

// onChange runs on the watcher's goroutine after each change.
func (c *Console) onChange(ch coordinator.Change) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	switch {
	case ch.Epoch != 0:
		c.add(Event{At: now, Kind: "epoch", Text: fmt.Sprintf("the cluster moved to epoch %d (a restore)", ch.Epoch)})
	case ch.Control != nil:
		c.control(*ch.Control, now)
	case ch.Shard != nil:
		c.shard(*ch.Shard, ch.Prev, now)
	}
	c.bump()
}

func (c *Console) bump() {
	c.version++
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *Console) control(e store.Entry, now time.Time) {
	kind, name := store.SplitKey(e.Key)
	switch {
	case e.Key == store.LeaderKey && !e.Deleted:
		var r store.LeaderRecord
		if json.Unmarshal(e.Value, &r) == nil && r != c.leader { // not its renewals
			c.leader = r
			c.add(Event{At: now, Kind: "leader", Node: r.Node, Text: "coordinator leader: " + r.Node})
		}
	case e.Key == store.LeaderKey && e.Expired:
		c.leader = store.LeaderRecord{}
		c.add(Event{At: now, Kind: "leader", Text: "the coordinator's leader lease expired"})
	case kind == "node" && e.Deleted:
		if e.Expired {
			c.add(Event{At: now, Kind: "lease-expired", Node: name, Text: name + "'s lease expired"})
			c.lapsed[name] = true
		} else {
			c.add(Event{At: now, Kind: "left", Node: name, Text: name + " left (released its lease)"})
		}
	case kind == "node":
		var r store.NodeRecord
		if json.Unmarshal(e.Value, &r) != nil {
			return
		}
		if _, seen := c.joined[r.Session]; !seen {
			c.joined[r.Session] = now
			c.add(Event{At: now, Kind: "joined", Node: name, Text: name + " joined (session " + r.Session + ")"})
		} else if c.lapsed[name] {
			// Its lease expired unrenewed and it created it again, the same session going on
			// (a frozen node that woke, or the control bucket back after an election).
			c.add(Event{At: now, Kind: "joined", Node: name, Text: name + " joined again (session " + r.Session + " goes on: its expired lease re-created)"})
		}
		delete(c.lapsed, name)
		c.addLateness(name, now, r.P99LatenessMs)
	case kind == "move":
		sh, err := store.ShardName(name)
		if err != nil {
			return
		}
		var r store.MoveRecord
		if !e.Deleted && json.Unmarshal(e.Value, &r) == nil {
			c.moves[sh] = recentMove{rec: r, seen: now}
		}
	case kind == "drain" && e.Deleted:
		c.add(Event{At: now, Kind: "undrain", Node: name, Text: name + " undrained"})
	case kind == "drain":
		c.add(Event{At: now, Kind: "drain", Node: name, Text: name + " drained: its shards move away"})
	case kind == "pin" && e.Deleted:
		c.add(Event{At: now, Kind: "unpin", Text: "shard " + name + " unpinned"})
	case kind == "pin":
		c.add(Event{At: now, Kind: "pin", Text: "shard " + name + " pinned"})
	}
}

func (c *Console) shard(ev store.AssignmentEvent, prev coordinator.ShardState, now time.Time) {
	if ev.Deleted {
		return // released in a hand-off (or by a leaving node): its next grant says where it went
	}
	if prev.Revision != 0 && prev.Owner.Owner == ev.Owner && prev.Owner.Session == ev.Session {
		return // a token rotation by its owner, or a new grant to the same session
	}
	from := prev.Owner.Owner
	kind := "placed"
	if m, ok := c.moves[ev.Shard]; ok && m.rec.To == ev.Owner && now.Sub(m.seen) < time.Minute {
		kind, from = "handoff", m.rec.From
	} else if prev.Revision != 0 {
		kind = "failover"
	}
	c.addShard(Event{At: now, Kind: kind, From: from, To: ev.Owner}, ev.Shard)
}

func (c *Console) addShard(e Event, sh uint32) {
	for i := len(c.timeline) - 1; i >= 0 && i >= len(c.timeline)-8; i-- {
		t := &c.timeline[i]
		if t.Kind == e.Kind && t.From == e.From && t.To == e.To && e.At.Sub(t.At) < 2*time.Second {
			t.Count++
			if len(t.Shards) < 16 {
				t.Shards = append(t.Shards, sh)
			}
			return
		}
	}
	e.Shards, e.Count = []uint32{sh}, 1
	c.add(e)
}

func (c *Console) add(e Event) {
	c.timeline = append(c.timeline, e)
	if len(c.timeline) > 300 {
		c.timeline = append([]Event(nil), c.timeline[len(c.timeline)-200:]...)
	}
}

func (c *Console) addLateness(node string, now time.Time, ms float64) {
	pts := c.lateness[node]
	if n := len(pts); n > 0 && now.UnixMilli()-pts[n-1].T < 1000 {
		pts[n-1] = point{T: pts[n-1].T, Ms: max(pts[n-1].Ms, ms)}
	} else {
		pts = append(pts, point{T: now.UnixMilli(), Ms: ms})
	}
	cut := now.Add(-c.cfg.History).UnixMilli()
	i := 0
	for i < len(pts) && pts[i].T < cut {
		i++
	}
	c.lateness[node] = pts[i:]
}

// NodeInfo is one live node on the page.
type NodeInfo struct {
	ID         string  `json:"id"`
	Session    string  `json:"session"`
	State      string  `json:"state"` // joining, serving, unrenewed, draining, drained, leaving
	Shards     int     `json:"shards"`
	Instances  int     `json:"instances"`
	Load       float64 `json:"load"` // tick CPU s/s
	LeaseAgeMs int64   `json:"lease_age_ms"`
	P99Ms      float64 `json:"p99_lateness_ms"`
	Weight     float64 `json:"weight"`
	Drained    bool    `json:"drained"`
	Leaving    bool    `json:"leaving"`
	Stuck      bool    `json:"stuck,omitempty"`
}

// MoveInfo is a hand-off under way.
type MoveInfo struct {
	Shard uint32 `json:"shard"`
	From  string `json:"from"`
	To    string `json:"to"`
	State string `json:"state"`
}

// View is what the page shows, as /api/state and each pushed event send it.
type View struct {
	Version   uint64  `json:"version"`
	At        int64   `json:"at"` // Unix ms
	Shards    uint32  `json:"shards"`
	Epoch     uint64  `json:"epoch"`
	Replicas  uint32  `json:"replicas"`
	Leader    string  `json:"leader"`
	Imbalance float64 `json:"imbalance"`
	// Owners are the names the shard grid's numbers index (live nodes first, sorted, then owners
	// without a lease); Grid[s] is shard s's owner, -1 unassigned.
	Owners      []string           `json:"owners"`
	Grid        []int              `json:"grid"`
	Pinned      []uint32           `json:"pinned"`
	Moves       []MoveInfo         `json:"moves"`
	Nodes       []NodeInfo         `json:"nodes"`
	Lateness    map[string][]point `json:"lateness"`
	Timeline    []Event            `json:"timeline"`
	Applying    bool               `json:"applying"` // a rebalance is being carried out
	LeaseTTL    int64              `json:"lease_ttl_ms"`
	LeaseMargin int64              `json:"lease_margin_ms"`
}

// View builds the current view.
func (c *Console) View() View {
	s := c.w.State()
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	v := View{Version: c.version, At: now.UnixMilli(), Shards: s.Cluster.Shards, Epoch: s.Cluster.Epoch,
		Replicas: s.Cluster.ReplicasOr1(), Imbalance: s.Imbalance, Grid: make([]int, len(s.Shards)),
		Lateness: map[string][]point{}, Applying: c.applying, LeaseTTL: c.cfg.LeaseTTL.Milliseconds(), LeaseMargin: c.cfg.LeaseMargin.Milliseconds(),
		Pinned: []uint32{}, Moves: []MoveInfo{}, Owners: []string{}, Nodes: []NodeInfo{}, Timeline: []Event{}} // [], not null
	if s.Leader != nil {
		v.Leader = s.Leader.Node
	}
	stuck := map[string]bool{}
	for _, st := range s.Stuck {
		stuck[st.Node] = true
	}
	index := map[string]int{}
	for _, n := range s.Nodes {
		index[n.ID] = len(v.Owners)
		v.Owners = append(v.Owners, n.ID)
		v.Nodes = append(v.Nodes, c.nodeInfo(n, stuck[n.ID], now))
		v.Lateness[n.ID] = append([]point(nil), c.lateness[n.ID]...)
	}
	var gone []string
	for i, sh := range s.Shards {
		if sh.Revision == 0 {
			v.Grid[i] = -1
			continue
		}
		k, ok := index[sh.Owner.Owner]
		if !ok {
			k = len(v.Owners)
			index[sh.Owner.Owner] = k
			v.Owners = append(v.Owners, sh.Owner.Owner)
			gone = append(gone, sh.Owner.Owner)
		}
		v.Grid[i] = k
		if sh.Pinned {
			v.Pinned = append(v.Pinned, uint32(i))
		}
	}
	for sh, m := range s.Moves {
		if m.State != store.MoveDone {
			v.Moves = append(v.Moves, MoveInfo{Shard: sh, From: m.From, To: m.To, State: m.State})
		}
	}
	sort.Slice(v.Moves, func(i, j int) bool { return v.Moves[i].Shard < v.Moves[j].Shard })
	v.Timeline = append(v.Timeline, c.timeline...)
	for k := range c.moves { // forget hand-offs long settled
		if now.Sub(c.moves[k].seen) > time.Minute {
			delete(c.moves, k)
		}
	}
	return v
}

func (c *Console) nodeInfo(n coordinator.NodeView, stuck bool, now time.Time) NodeInfo {
	ni := NodeInfo{ID: n.ID, Session: n.Record.Session, Shards: n.Owned, Instances: n.Instances, Load: n.Load,
		LeaseAgeMs: n.LeaseAge.Milliseconds(), P99Ms: n.Record.P99LatenessMs, Weight: n.Weight, Drained: n.Drained,
		Leaving: n.Record.Leaving, Stuck: stuck}
	switch {
	case n.LeaseAge > c.cfg.LeaseTTL-c.cfg.LeaseMargin:
		ni.State = "unrenewed" // no renewal acknowledged in time: it ticks on the fence for its ride-through, then pauses
	case n.Record.Leaving:
		ni.State = "leaving"
	case n.Drained && n.Owned > 0:
		ni.State = "draining"
	case n.Drained:
		ni.State = "drained"
	case n.Owned == 0:
		ni.State = "joining" // a lease and no shard yet
	default:
		ni.State = "serving"
	}
	return ni
}

// Handler serves the page, its files and the API:
//
//	GET  /                     the page
//	GET  /api/state            the View as JSON
//	GET  /api/events           the View as Server-Sent Events ("state"), on every change
//	POST /api/drain            {"node": "n2"}
//	POST /api/undrain          {"node": "n2"}
//	POST /api/move             {"shard": 7, "node": "n1"}
//	POST /api/pin, /api/unpin  {"shard": 7}
//	POST /api/rebalance/plan   {} → {"id": "p1", "plan": {...}}: the dry run, nothing changed
//	POST /api/rebalance/apply  {"id": "p1"}: carry out exactly that plan (in the background)
//
// Every request passes Config.Guard first (its Host, its login token off loopback, the Origin
// of a POST). POSTs need the header X-Tickfence-Console. Each answers {"ok": true, "text": ...} or
// {"ok": false, "error": ...} with a 4xx/5xx status.
func (c *Console) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /", http.FileServerFS(c.files))
	mux.HandleFunc("GET /api/state", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, c.View())
	})
	mux.HandleFunc("GET /api/events", c.events)
	mux.HandleFunc("POST /api/{verb}", c.action)
	mux.HandleFunc("POST /api/rebalance/{step}", c.rebalance)
	return c.cfg.Guard.Wrap(mux)
}

func (c *Console) events(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	// Lease ages and states move on without a change: push at least once a second.
	every := time.NewTicker(time.Second)
	defer every.Stop()
	for {
		c.mu.Lock()
		changed := c.changed
		c.mu.Unlock()
		b, _ := json.Marshal(c.View())
		if _, err := fmt.Fprintf(w, "event: state\ndata: %s\n\n", b); err != nil {
			return
		}
		fl.Flush()
		select {
		case <-r.Context().Done():
			return
		case <-c.ctx.Done():
			return
		case <-changed:
		case <-every.C:
		}
		select { // gather what else changes meanwhile into the same push
		case <-r.Context().Done():
			return
		case <-time.After(c.cfg.Push):
		}
	}
}

type request struct {
	Node  string  `json:"node"`
	Shard *uint32 `json:"shard"`
	ID    string  `json:"id"`
}

func (c *Console) decode(w http.ResponseWriter, r *http.Request) (request, bool) {
	var q request
	if r.Header.Get(Header) == "" {
		writeJSON(w, http.StatusForbidden, answer{Error: "missing header " + Header + " (requests come from the console's page)"})
		return q, false
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&q); err != nil {
		writeJSON(w, http.StatusBadRequest, answer{Error: "bad request body: " + err.Error()})
		return q, false
	}
	return q, true
}

type answer struct {
	OK    bool   `json:"ok"`
	Text  string `json:"text,omitempty"`
	Error string `json:"error,omitempty"`
	ID    string `json:"id,omitempty"`
	Plan  any    `json:"plan,omitempty"`
}

func (c *Console) action(w http.ResponseWriter, r *http.Request) {
	q, ok := c.decode(w, r)
	if !ok {
		return
	}
	verb := r.PathValue("verb")
	ctx, cancel := c.actionContext(r.Context())
	defer cancel()
	shards := c.w.Cluster().Shards
	needShard := func() (uint32, error) {
		if q.Shard == nil || *q.Shard >= shards {
			return 0, fmt.Errorf("shard: want a number in 0..%d", shards-1)
		}
		return *q.Shard, nil
	}
	var (
		what, text string
		err        error
		bad        bool
	)
	switch verb {
	case "drain", "undrain":
		what = verb + " " + q.Node
		if err = store.ValidID(q.Node); err != nil {
			bad = true
			break
		}
		if verb == "drain" {
			err = coordinator.Drain(ctx, c.cfg.Store, q.Node)
			text = q.Node + " drained: the coordinator moves its shards away"
		} else {
			err = coordinator.Undrain(ctx, c.cfg.Store, q.Node)
			text = q.Node + " undrained: the coordinator may place shards on it again"
		}
	case "move":
		var sh uint32
		if sh, err = needShard(); err != nil {
			bad = true
			break
		}
		what = fmt.Sprintf("move %d %s", sh, q.Node)
		var from store.Assignment
		from, err = coordinator.RequestMove(ctx, c.cfg.Store, sh, q.Node)
		switch {
		case errors.Is(err, coordinator.ErrAlreadyPlaced):
			err, text = nil, fmt.Sprintf("shard %d is already on %s", sh, q.Node)
		case err == nil:
			text = fmt.Sprintf("shard %d: hand-off %s → %s requested", sh, from.Owner, q.Node)
		}
	case "pin", "unpin":
		var sh uint32
		if sh, err = needShard(); err != nil {
			bad = true
			break
		}
		what = verb + " " + strconv.FormatUint(uint64(sh), 10)
		err = coordinator.Pin(ctx, c.cfg.Store, sh, verb == "pin")
		text = fmt.Sprintf("shard %d %sned", sh, verb)
	default:
		writeJSON(w, http.StatusNotFound, answer{Error: "no such action: " + verb})
		return
	}
	if bad {
		writeJSON(w, http.StatusBadRequest, answer{Error: err.Error()})
		return
	}
	if cause := context.Cause(ctx); err != nil && cause != nil && !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) {
		err = cause // the server refused it: say so, not "context canceled"
	}
	c.audit(verb, what, err)
	c.note(what, err)
	if err != nil {
		status := http.StatusInternalServerError
		var re refusedError
		switch {
		case errors.Is(err, coordinator.ErrMoveRefused):
			status = http.StatusConflict
		case errors.As(err, &re):
			status = http.StatusForbidden
		}
		writeJSON(w, status, answer{Error: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, answer{OK: true, Text: text})
}

// Refused ends the actions under way with err: the NATS server refused a request of theirs (a
// permission violation comes back on the connection, not as the request's answer). The caller's
// connection error handler calls it, e.g. for credentials of the observer role.
func (c *Console) Refused(err error) {
	c.log.Warn("the NATS server refused a request", "err", err)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refusal = refusedError{err}
	close(c.refused)
	c.refused = make(chan struct{})
}

// refusedError is an action the NATS server refused.
type refusedError struct{ error }

func (e refusedError) Unwrap() error { return e.error }

// actionContext bounds an action to 10 s, and ends it at once with the server's refusal.
func (c *Console) actionContext(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	tctx, tcancel := context.WithTimeout(ctx, 10*time.Second)
	c.mu.Lock()
	refused := c.refused
	c.mu.Unlock()
	stop := make(chan struct{})
	go func() {
		select {
		case <-refused:
			c.mu.Lock()
			err := c.refusal
			c.mu.Unlock()
			cancel(err)
		case <-stop:
		}
	}()
	return tctx, func() {
		close(stop)
		tcancel()
		cancel(nil)
	}
}

// note puts an operator action on the timeline.
func (c *Console) note(what string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	text := "console: " + what
	if err != nil {
		text += ": " + err.Error()
	}
	c.add(Event{At: time.Now(), Kind: "action", Text: text})
	c.bump()
}

func (c *Console) audit(verb, what string, result error) {
	e := auth.NewAuditEntry(c.cfg.Creds, what, result)
	e.Via = "console"
	ctx, cancel := c.actionContext(context.Background()) // observers may not append: refused at once
	defer cancel()
	if err := auth.RecordAudit(ctx, c.cfg.NC, verb, e); err != nil {
		c.log.Warn("the action was not recorded in the audit stream", "what", what, "err", err)
	}
}

// PlanView is a rebalance plan as the page shows it before it is confirmed.
type PlanView struct {
	Before float64            `json:"imbalance_before"`
	After  float64            `json:"imbalance_after"`
	Moves  []coordinator.Move `json:"moves"`
}

func (c *Console) rebalance(w http.ResponseWriter, r *http.Request) {
	q, ok := c.decode(w, r)
	if !ok {
		return
	}
	switch r.PathValue("step") {
	case "plan":
		// The dry run: tickctl rebalance --dry-run's plan, over the watched state.
		p := c.w.State().Plan(int(c.w.Cluster().Shards), c.cfg.Tolerance)
		sort.Slice(p.Moves, func(i, j int) bool { return p.Moves[i].Shard < p.Moves[j].Shard })
		c.mu.Lock()
		c.planSeq++
		id := "p" + strconv.Itoa(c.planSeq)
		c.plans = map[string]planned{id: {plan: p, at: time.Now()}} // only the last plan shown can be applied
		c.mu.Unlock()
		moves := p.Moves
		if moves == nil {
			moves = []coordinator.Move{}
		}
		writeJSON(w, http.StatusOK, answer{OK: true, ID: id, Plan: PlanView{Before: p.Before, After: p.After, Moves: moves},
			Text: fmt.Sprintf("imbalance now %.2f, after the plan %.2f; %d moves", p.Before, p.After, len(p.Moves))})
	case "apply":
		c.mu.Lock()
		pl, found := c.plans[q.ID]
		busy := c.applying
		if found && !busy {
			delete(c.plans, q.ID)
			c.applying = true
		}
		c.mu.Unlock()
		switch {
		case !found:
			writeJSON(w, http.StatusConflict, answer{Error: "no such plan (only the last plan shown can be applied): plan again"})
			return
		case busy:
			writeJSON(w, http.StatusConflict, answer{Error: "a rebalance is already under way"})
			return
		case time.Since(pl.at) > 5*time.Minute:
			c.mu.Lock()
			c.applying = false
			c.mu.Unlock()
			writeJSON(w, http.StatusConflict, answer{Error: "the plan is older than 5 minutes: plan again"})
			return
		}
		go c.apply(pl.plan)
		writeJSON(w, http.StatusOK, answer{OK: true, Text: fmt.Sprintf("rebalance started: %d moves", len(pl.plan.Moves))})
	default:
		writeJSON(w, http.StatusNotFound, answer{Error: "no such step"})
	}
}

// apply carries out a plan as tickctl rebalance does, and records it once it has ended.
func (c *Console) apply(p coordinator.Plan) {
	ctx, cancel := context.WithTimeout(c.ctx, 10*time.Minute)
	defer cancel()
	start := time.Now()
	done, err := coordinator.ApplyPlan(ctx, c.cfg.Store, c.w.Cluster().Epoch, p.Moves, c.cfg.MaxMoves, func(ap coordinator.ApplyProgress) {
		if ap.Refused != nil {
			c.note(fmt.Sprintf("rebalance: shard %d not moved", ap.Move.Shard), ap.Refused)
		}
	})
	c.audit("rebalance", "rebalance", err)
	c.mu.Lock()
	c.applying = false
	c.add(Event{At: time.Now(), Kind: "rebalance", Count: done,
		Text: fmt.Sprintf("console: rebalance: %d of %d moves in %v", done, len(p.Moves), time.Since(start).Round(time.Millisecond))})
	c.bump()
	c.mu.Unlock()
	if err != nil {
		c.note("rebalance", err)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
