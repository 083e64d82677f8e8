// Command tickctl inspects and drives a tickfence cluster: shards and their owners, instances and
// their decoded records, and commands sent through the same path gateways use.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/tickfence/tickfence/auth"
	"github.com/tickfence/tickfence/client"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/natskv"
)

type globals struct {
	natsURL   string
	creds     string
	tlsCA     string
	tlsCert   string
	tlsKey    string
	tls       bool
	hosts     string
	expires   string // auth user --expires
	trusted   bool   // auth user --trusted
	json      bool
	requestID string
	timeout   time.Duration
	kind      string
	bossHP    int
	shard     int
	dryRun    bool
	yes       bool
	takeover  bool
	undo      bool
	maxMoves  int
	tolerance float64
	count     int
	topics    string // instance watch --topic
	durable   bool   // instance watch --durable
	grace     time.Duration

	player string    // instance watch --player
	labels labelFlag // instances --label (a filter), instance create --label
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "tickctl:", err)
		var ue usageError
		var vu verbUsage
		if errors.As(err, &ue) || errors.As(err, &vu) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// usageError is a command line tickctl cannot run: exit status 2, nothing sent.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg + " (see tickctl --help)" }

// permissionError is the server refusing what the credentials may not do (package auth's roles).
type permissionError struct {
	err   error
	creds string
}

func (e permissionError) Error() string {
	who := "no credentials"
	if e.creds != "" {
		who = "credentials " + e.creds
		if u, err := auth.ReadCreds(e.creds); err == nil {
			who += fmt.Sprintf(" (user %s, role %s)", u.Name, u.Role)
		}
	}
	return fmt.Sprintf("refused by the NATS server: %v; %s may not do this (see tickctl --help, --creds)", e.err, who)
}

// run runs one command line: help and usage errors before anything connects.
func run(args []string, out io.Writer) (err error) {
	if len(args) > 0 && args[0] == "__complete" { // the completion scripts' question: the words so far
		for _, w := range complete(args[1:]) {
			fmt.Fprintln(out, w)
		}
		return nil
	}
	p, err := parse(args)
	if err != nil {
		return err
	}
	if p.help || p.v == nil {
		printHelp(out, p)
		return nil
	}
	v, g := p.v, p.g
	defer func() { // a usage error of the verb points at its help
		var ue usageError
		if errors.As(err, &ue) {
			err = verbUsage{ue.msg, v.path}
		}
	}()
	if v.check != nil {
		if err := v.check(&g, p.args); err != nil {
			return err
		}
	}
	if v.offline {
		return v.local(g, p.args, out)
	}
	if !p.timeoutSet && v.timeout > 0 {
		g.timeout = v.timeout
	}
	watching := v.timeout < 0 // runs until Ctrl-C (instance watch)
	if !p.timeoutSet && v.timeout < 0 {
		g.timeout = 100 * 365 * 24 * time.Hour // until Ctrl-C or --count
	}
	base := context.Background()
	if watching { // Ctrl-C ends it cleanly; other commands keep the default (exit at once)
		var stop context.CancelFunc
		base, stop = signal.NotifyContext(base, os.Interrupt, syscall.SIGTERM)
		defer stop()
	}
	tctx, cancel := context.WithTimeout(base, g.timeout)
	defer cancel()
	// A permission violation comes back asynchronously while the request waits for its answer:
	// end the command at once and say so.
	ctx, refuse := context.WithCancelCause(tctx)
	defer refuse(nil)
	defer func() {
		var pe permissionError
		if err != nil && errors.As(context.Cause(ctx), &pe) {
			err = pe
		}
	}()
	copts := []nats.Option{nats.Name("tickctl"), nats.Timeout(3 * time.Second),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				refuse(permissionError{err: err, creds: g.creds})
			}
		})}
	if g.tlsCA != "" {
		to, err := auth.TLSClientOptions(g.tlsCA, g.tlsCert, g.tlsKey)
		if err != nil {
			return usageError{err.Error()}
		}
		copts = append(copts, to...)
	} else if g.tlsCert != "" || g.tlsKey != "" {
		return usageError{"--tls-cert and --tls-key need --tls-ca (the CA that signed the server's certificate)"}
	}
	if g.creds != "" {
		ao, err := auth.ClientOptions(g.creds, func(w string) { fmt.Fprintln(os.Stderr, "tickctl: warning:", w) })
		if err != nil {
			return err
		}
		copts = append(copts, ao...)
	}
	nc, err := natskv.Connect(g.natsURL, copts...)
	if err != nil {
		if g.tlsCA != "" {
			return fmt.Errorf("connect to %s: %w", g.natsURL, auth.ExplainTLS(err, g.tlsCert != ""))
		}
		return fmt.Errorf("connect to %s: %w (is tickd running with --nats-listen?)", g.natsURL, err)
	}
	defer nc.Close()
	if audited(p.words, g) {
		defer func() { recordAudit(nc, g, p.words, err) }()
	}
	if v.setup {
		return v.run(ctx, &cli{g: g, nc: nc, out: out, timeoutSet: p.timeoutSet}, p.args)
	}
	st, err := natskv.Open(nc, natskv.Options{})
	if err != nil {
		return err
	}
	defer st.Close()
	cl, err := st.Cluster(ctx)
	if err != nil {
		return fmt.Errorf("read cluster record: %w (was the cluster made? tickctl cluster init as admin, or a tickd without credentials, makes it)", err)
	}
	c := &cli{g: g, st: st, cl: cl, nc: nc, out: out, timeoutSet: p.timeoutSet}
	return v.run(ctx, c, p.args)
}

type cli struct {
	g          globals
	st         *natskv.Store
	cl         store.Cluster
	nc         *nats.Conn
	out        io.Writer
	timeoutSet bool // --timeout given
}

func (c *cli) printJSON(v any) error {
	enc := json.NewEncoder(c.out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func (c *cli) table() *tabwriter.Writer { return tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0) }

type shardRow struct {
	Shard     uint32 `json:"shard"`
	Owner     string `json:"owner"`
	Session   string `json:"session"`
	Token     uint64 `json:"token"`
	Instances int    `json:"instances"`
}

func (c *cli) shards(ctx context.Context) error {
	var rows []shardRow
	owners := map[string]int{}
	pr := newProgress(c.g.json)
	for s := uint32(0); s < c.cl.Shards; s++ {
		a, rev, err := c.st.Assignment(ctx, c.cl.Epoch, s)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		ids, err := c.st.Instances(ctx, c.cl.Epoch, s)
		if err != nil {
			return err
		}
		rows = append(rows, shardRow{Shard: s, Owner: a.Owner, Session: a.Session, Token: rev, Instances: len(ids)})
		owners[a.Owner]++
		if s%64 == 63 && s+1 < c.cl.Shards {
			pr.show("reading shards %d/%d", s+1, c.cl.Shards)
		}
	}
	pr.clear()
	if c.g.json {
		return c.printJSON(map[string]any{"cluster": c.cl, "shards": rows})
	}
	fmt.Fprintf(c.out, "cluster: %s, epoch %d\n", shape(c.cl), c.cl.Epoch)
	var names []string
	for o := range owners {
		names = append(names, o)
	}
	sort.Strings(names)
	for _, o := range names {
		label := o
		if label == "" {
			label = "(unassigned)"
		}
		fmt.Fprintf(c.out, "  %-20s %d shards\n", label, owners[o])
	}
	w := c.table()
	fmt.Fprintln(w, "SHARD\tOWNER\tSESSION\tTOKEN\tINSTANCES")
	for _, r := range rows {
		owner := r.Owner
		if owner == "" {
			owner = "-"
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%d\t%d\n", r.Shard, owner, r.Session, r.Token, r.Instances)
	}
	return w.Flush()
}

type instRow struct {
	ID     string            `json:"id"`
	Shard  uint32            `json:"shard"`
	Kind   string            `json:"kind"`
	Token  uint64            `json:"token"`
	Tick   uint64            `json:"tick"`
	Rev    uint64            `json:"revision"`
	Labels map[string]string `json:"labels,omitempty"`
	Ended  bool              `json:"ended,omitempty"`
	// Passive: its last write passivated it (its next command or watcher wakes it).
	Passive bool   `json:"passive,omitempty"`
	Error   string `json:"error,omitempty"`
	// Failed: its owner reports it out of service because the game's code failed in it (it
	// answers instance_failed until tickctl instance reload).
	Failed *failedRow `json:"failed,omitempty"`
}

type failedRow struct {
	Node   string `json:"node"`
	Cause  string `json:"cause"`
	Reason string `json:"reason"`
	Since  string `json:"since"`
}

// failedInstances reads what the live nodes report failed in their leases (store.NodeRecord),
// by instance ID; more is the count of failed instances beyond those a node lists.
func (c *cli) failedInstances(ctx context.Context) (map[string]failedRow, int, error) {
	entries, err := c.st.ControlList(ctx, "node.*")
	if err != nil {
		return nil, 0, err
	}
	out := map[string]failedRow{}
	more := 0
	for _, e := range entries {
		var r store.NodeRecord
		if json.Unmarshal(e.Value, &r) != nil {
			continue
		}
		node := strings.TrimPrefix(e.Key, "node.")
		for _, f := range r.Failed {
			out[f.ID] = failedRow{Node: node, Cause: f.Cause, Reason: f.Reason, Since: time.UnixMilli(f.Since).UTC().Format(time.RFC3339)}
		}
		more += max(r.FailedCount-len(r.Failed), 0)
	}
	return out, more, nil
}

func (c *cli) instances(ctx context.Context) error {
	opt := store.ListOptions{Labels: c.g.labels.m, Ended: true}
	if c.g.shard >= 0 {
		s := uint32(c.g.shard)
		opt.Shard = &s
	}
	// One pass over the records of each data bucket (natskv's store.Lister); with --shard, a
	// listing and a load per instance of that shard.
	listed, err := store.ListInstances(ctx, c.st, c.cl, opt)
	if err != nil {
		return err
	}
	rows := make([]instRow, 0, len(listed))
	for _, l := range listed {
		rec := l.Record
		row := instRow{ID: l.ID, Shard: l.Shard, Kind: rec.Kind, Token: rec.Token, Tick: rec.Tick, Rev: l.Revision, Labels: rec.Labels,
			Ended: rec.Ended, Passive: rec.Passive}
		if l.Err != nil {
			row.Error = l.Err.Error()
		}
		rows = append(rows, row)
	}
	failed, more, err := c.failedInstances(ctx)
	if err != nil {
		return err
	}
	nfailed := 0
	for i := range rows {
		if f, ok := failed[rows[i].ID]; ok {
			rows[i].Failed = &f
			nfailed++
		}
	}
	if c.g.json {
		return c.printJSON(rows)
	}
	w := c.table()
	fmt.Fprintln(w, "INSTANCE\tSHARD\tKIND\tTOKEN\tTICK\tREVISION\tLABELS\tSTATUS")
	for _, r := range rows {
		status := "ok"
		switch {
		case r.Failed != nil:
			status = fmt.Sprintf("FAILED on %s since %s (%s): %s", r.Failed.Node, r.Failed.Since, r.Failed.Cause, r.Failed.Reason)
		case r.Ended:
			status = "ended"
		case r.Passive:
			status = "passive"
		}
		if r.Error != "" { // unreadable here too: the error, and what its node says if it failed
			if r.Failed == nil {
				status = ""
			}
			fmt.Fprintf(w, "%s\t%d\t!\t\t\t%s\t\t%s\n", r.ID, r.Shard, r.Error, status)
			continue
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%d\t%d\t%d\t%s\t%s\n", r.ID, r.Shard, r.Kind, r.Token, r.Tick, r.Rev, formatLabels(r.Labels), status)
	}
	fmt.Fprintf(w, "%d instances\n", len(rows))
	if nfailed+more > 0 {
		fmt.Fprintf(w, "%d failed: they answer instance_failed until the game is fixed and `tickctl instance reload ID` loads them again (the nodes' logs say more)\n", nfailed+more)
	}
	return w.Flush()
}

func (c *cli) get(ctx context.Context, id string) error {
	s := store.ShardOf(id, c.cl.Shards)
	rec, rev, err := c.st.Load(ctx, c.cl.Epoch, s, id)
	if err != nil {
		return err
	}
	a, token, aerr := c.st.Assignment(ctx, c.cl.Epoch, s)
	var state map[string]any
	if err := msgpack.Unmarshal(rec.State, &state); err != nil && len(rec.State) > 0 {
		state = map[string]any{"undecodable": err.Error()}
	}
	var reqs []string
	for _, q := range rec.Reqs {
		reqs = append(reqs, q.ID)
	}
	if c.g.json {
		v := map[string]any{"id": id, "shard": s, "kind": rec.Kind, "schema": rec.V, "token": rec.Token, "tick": rec.Tick,
			"revision": rev, "state": state, "recent_request_ids": reqs, "ended": rec.Ended, "labels": rec.Labels, "passive": rec.Passive}
		if len(rec.Players) > 0 {
			v["present"] = presentJSON(rec.Players)
		}
		if aerr == nil {
			v["owner"], v["session"], v["current_token"] = a.Owner, a.Session, token
		}
		return c.printJSON(v)
	}
	w := c.table()
	fmt.Fprintf(w, "instance\t%s\nshard\t%d\nkind\t%s\ntoken\t%d\ntick\t%d\nrevision\t%d\n", id, s, rec.Kind, rec.Token, rec.Tick, rev)
	if aerr == nil {
		fmt.Fprintf(w, "owner\t%s (session %s, current token %d)\n", a.Owner, a.Session, token)
	} else {
		fmt.Fprintf(w, "owner\t(unassigned)\n")
	}
	if rec.Ended {
		fmt.Fprintf(w, "ended\tat %s (a tombstone: it answers retransmitted requests until it expires)\n",
			time.UnixMilli(rec.EndedAt).UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(w, "labels\t%s\n", formatLabels(rec.Labels))
	if rec.Passive {
		fmt.Fprintf(w, "passive\tyes: unloaded by its owner until a command or a watcher wakes it\n")
	}
	fmt.Fprintf(w, "requests\t%d remembered\n", len(rec.Reqs))
	if rec.Blob != nil { // a large state: its blob is uploaded again only when it changes
		fmt.Fprintf(w, "state\t%d bytes, in blob %s\n", len(rec.State), rec.Blob.Name)
	} else if !rec.Ended {
		fmt.Fprintf(w, "state\t%d bytes, in the record\n", len(rec.State))
	}
	if len(rec.Players) > 0 {
		fmt.Fprintf(w, "present\t%s\n", presentText(rec.Players))
	}
	if rec.Kind == "dungeon" && state != nil {
		fmt.Fprintf(w, "boss\tHP %v/%v, phase %v, run %v, kills %v\n", state["hp"], state["max_hp"], state["phase"], state["run"], state["kills"])
		if ps, ok := state["players"].([]any); ok {
			fmt.Fprintf(w, "players\t%d\n", len(ps))
		}
		if loot, ok := state["loot"].([]any); ok {
			fmt.Fprintf(w, "loot\t%d items granted\n", len(loot))
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if rec.Kind != "dungeon" && state != nil {
		b, _ := json.MarshalIndent(shortBinary(state), "", "  ")
		fmt.Fprintf(c.out, "state:\n%s\n", b)
	}
	return nil
}

// shortBinary replaces, in a decoded state, each binary value over 64 bytes by "(N bytes)": a
// large state's terrain or pixels say nothing in base64, and would fill the screen (--json
// keeps them).
func shortBinary(v any) any {
	switch x := v.(type) {
	case []byte:
		if len(x) > 64 {
			return fmt.Sprintf("(%d bytes)", len(x))
		}
	case map[string]any:
		for k, e := range x {
			x[k] = shortBinary(e)
		}
	case []any:
		for i, e := range x {
			x[i] = shortBinary(e)
		}
	}
	return v
}

// client is a command client of the cluster on tickctl's connection: the shard count is the
// record's tickctl read already; verify: frames' grants are checked against the store.
func (c *cli) client(ctx context.Context, verify bool) (*client.Client, error) {
	opts := []client.Option{client.Shards(c.cl.Shards), client.Heartbeat(-1)} // tickctl speaks for no player
	if verify {
		opts = append(opts, client.VerifyGrants())
	}
	if u, err := auth.ReadCreds(c.g.creds); err == nil && u.Role == auth.Observer {
		opts = append(opts, client.NoInterest()) // an observer may not publish a watcher's interest (a command subject)
	}
	return client.New(ctx, c.nc, opts...)
}

// reload asks the owner of a failed instance to load it again from its stored state (an
// operator's request, tickfence.op).
func (c *cli) reload(ctx context.Context, id string) error {
	cl, err := c.client(ctx, false)
	if err != nil {
		return err
	}
	defer cl.Close()
	r, err := cl.Commands().Reload(ctx, id)
	if err != nil {
		return err
	}
	if c.g.json {
		return c.printJSON(r)
	}
	if !r.OK {
		return fmt.Errorf("%s: %s", r.Error.Code, r.Error.Message)
	}
	res, _ := r.Result.(map[string]any)
	if res["reloaded"] == true {
		fmt.Fprintf(c.out, "instance %s reloaded from its stored state on %v (tick %v); it runs again\n", id, res["node"], res["tick"])
	} else {
		fmt.Fprintf(c.out, "instance %s runs on %v (tick %v); it had not failed, nothing to reload\n", id, res["node"], res["tick"])
	}
	return nil
}

func (c *cli) send(ctx context.Context, id string, body []byte) error {
	if !json.Valid(body) {
		return usageError{fmt.Sprintf("command is not valid JSON: %s", body)}
	}
	reqID := c.g.requestID
	if reqID == "" {
		reqID = fmt.Sprintf("tickctl-%d", time.Now().UnixNano())
	}
	cl, err := c.client(ctx, false)
	if err != nil {
		return err
	}
	defer cl.Close()
	// As JSON, as typed: the node reads it (and refuses a repeated key), and answers in JSON.
	r, err := cl.Exec(ctx, id, reqID, client.JSON(body))
	if err != nil {
		return err
	}
	if c.g.json {
		_, err := fmt.Fprintf(c.out, "%s\n", r.Raw)
		return err
	}
	if !r.OK {
		return fmt.Errorf("%s: %s (request id %s)", r.Error.Code, r.Error.Message, reqID)
	}
	res, _ := json.Marshal(r.Result())
	fmt.Fprintf(c.out, "ok (request id %s): %s\n", reqID, res)
	return nil
}

// watch prints an instance's frames as they come: one line each (tick, stored tick, grant, the
// payload as JSON), or with --json a JSON object per line. --topic watches those topics only;
// --durable shows only frames whose tick is stored (client.WatchDurable).
func (c *cli) watch(ctx context.Context, id string) error {
	cl, err := c.client(ctx, true) // it reads the store: a forged frame's grant is never followed
	if err != nil {
		return err
	}
	defer cl.Close()
	var topics []string
	if c.g.topics != "" {
		topics = strings.Split(c.g.topics, ",")
	}
	var w *client.Watch
	switch {
	case c.g.durable && c.g.player != "":
		return fmt.Errorf("--durable and --player: watch a player's frames durably from its own client (client.WatchDurable with its credential)")
	case c.g.durable:
		w, err = cl.WatchDurable(ctx, id, topics...)
	default:
		// An operator's watch of a player's own frames never speaks for the player (no heartbeat).
		w, err = cl.WatchPlayer(ctx, id, c.g.player, topics...)
	}
	if err != nil {
		return err
	}
	if !c.g.json {
		subj := wire.FrameSubject(cl.ShardOf(id), id, "") + "[.<topic>]"
		if c.g.player != "" {
			subj += ", " + wire.PrivateFrameSubject(cl.ShardOf(id), id, c.g.player, "") + "[.<topic>]"
		}
		if topics != nil {
			var subjs []string
			for _, t := range topics {
				subjs = append(subjs, wire.FrameSubject(cl.ShardOf(id), id, t))
				if c.g.player != "" {
					subjs = append(subjs, wire.PrivateFrameSubject(cl.ShardOf(id), id, c.g.player, t))
				}
			}
			subj = strings.Join(subjs, ", ")
		}
		fmt.Fprintf(os.Stderr, "watching %s on %s (Ctrl-C to stop)\n", id, subj)
	}
	n := 0
	for f := range w.C {
		b, err := wire.MsgpackToJSON(f.Payload)
		if err != nil {
			b, _ = json.Marshal(fmt.Sprintf("%d bytes, not msgpack", len(f.Payload)))
		}
		if c.g.json {
			v := map[string]any{"instance": id, "topic": f.Topic, "epoch": f.Epoch, "token": f.Token, "tick": f.Tick,
				"stored": f.Stored, "rewound": f.Rewound, "frame": json.RawMessage(b)}
			if f.To != "" {
				v["to"] = f.To
			}
			if err := json.NewEncoder(c.out).Encode(v); err != nil {
				return err
			}
		} else {
			topic := ""
			if f.Topic != "" {
				topic = " [" + f.Topic + "]"
			}
			if f.To != "" {
				topic += " (to " + f.To + ")"
			}
			if f.Rewound {
				fmt.Fprintf(c.out, "rewound: the frames past tick %d were undone (the instance went on from its stored tick)\n", f.Stored)
			}
			fmt.Fprintf(c.out, "tick %d (stored %d)  epoch %d token %d%s  %s\n", f.Tick, f.Stored, f.Epoch, f.Token, topic, b)
		}
		if n++; c.g.count > 0 && n >= c.g.count {
			return nil
		}
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) && c.timeoutSet {
		return nil // --timeout was the intended end
	}
	if c.g.count > 0 && n < c.g.count {
		return fmt.Errorf("watch ended after %d of %d frames: %w", n, c.g.count, ctx.Err())
	}
	return nil
}

// gc collects the blobs no current record references (store.BlobBucket).
func (c *cli) gc(ctx context.Context) error {
	if c.g.grace < 0 {
		return usageError{"--grace must not be negative"}
	}
	res, err := c.st.CollectBlobs(ctx, c.g.grace, c.g.dryRun)
	if err != nil {
		return err
	}
	if c.g.json {
		return c.printJSON(res)
	}
	verb := "deleted"
	if c.g.dryRun {
		verb = "would delete"
	}
	fmt.Fprintf(c.out, "%d blobs: %d referenced by a current record, %d unreferenced but younger than %v, %s %d (%d bytes); %s %d half-made uploads\n",
		res.Objects, res.Referenced, res.Young, c.g.grace, verb, len(res.Deleted), res.DeletedBytes, verb, res.OrphanChunks)
	for _, n := range res.Deleted {
		fmt.Fprintf(c.out, "  %s\n", n)
	}
	return nil
}
