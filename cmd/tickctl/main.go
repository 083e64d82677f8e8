// Command tickctl inspects and drives a tickfence cluster: shards and their owners, instances and
// their decoded records, and commands sent through the same path gateways use.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
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
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/natskv"
)

const usage = `tickctl inspects and drives a tickfence cluster.

Usage:
  tickctl status                                  shards, partitions and replicas, each partition's stream
                                                  leader, the coordinator leader, nodes with load and
                                                  lease age, imbalance
  tickctl nodes                                   the live nodes
  tickctl shards                                  owner, session and token of every shard
  tickctl instances [--shard N]                   instances with shard, token, tick and kind
  tickctl instance get <id>                       the decoded record of one instance
  tickctl instance create <id> --kind dungeon     create an instance (through its owner)
  tickctl instance end <id>                       end an instance (a fenced tombstone by its owner)
  tickctl instance send <id> '<json command>'     send a command, e.g. '{"type":"attack","player":"p1"}'
  tickctl instance watch <id> [--count N]         print the instance's frames live (until Ctrl-C, --count
                                                  frames or --timeout if given), zombies' frames dropped
  tickctl move <shard> <node>                     hand a shard off to a node, and wait until it runs there
  tickctl drain <node>                            move every shard off a node (waits, with progress)
  tickctl undrain <node>                          let the coordinator place shards on it again
  tickctl pin <shard> | unpin <shard>             keep a shard where it is (the rebalancer skips it)
  tickctl weight <node> <w>                       a node's share of the load (default 1)
  tickctl rebalance [--dry-run]                   plan load-based moves (and apply them, with progress)
  tickctl backup <file>                           save the latest value of every key of the current epoch
                                                  (and the blobs its records point at)
  tickctl gc [--grace 1h] [--dry-run]             delete large-state blobs no current record points at,
                                                  older than the grace period
  tickctl restore <file> --yes                    seal the current epoch, restore the backup into the next
  tickctl restore <file> --yes --takeover         finish a restore that crashed or hangs, into the next epoch (safe even if it wakes)
  tickctl restore --undo --yes                    undo a crashed restore that sealed nothing yet (its process must be gone)
  tickctl audit [--count N]                       the last N (50) operator actions: who (the credential's user),
                                                  role, what, when, result; move, drain, undrain, pin, unpin,
                                                  weight, rebalance and restore append one each
  tickctl auth init <dir>                         new credentials: one file per role (node, gateway, operator,
                                                  observer, admin .creds, mode 0600) and server.conf that enforces
                                                  them (tickd --auth DIR, tickd server --auth DIR, nats-server)
  tickctl auth init <dir> --tls [--hosts h1,h2]   ... and a self-signed dev CA (ca.pem) with a server certificate
                                                  (server.pem, server-key.pem) for localhost, 127.0.0.1 and the hosts
  tickctl auth user <dir> <role> <name>           one more credential of a role, e.g. a second gateway with
                                                  its own reply inbox (_INBOX.<name>)

Flags (before or after the arguments):
  --nats URL          NATS server (default $NATS_URL, else nats://127.0.0.1:4222; start tickd with
                      --nats-listen 127.0.0.1:4222 to expose its embedded server)
  --creds FILE        NATS credentials (default $NATS_CREDS): operator.creds for the control plane,
                      observer.creds to look only; restore and gc need admin.creds (they write a new
                      epoch's records, drop buckets and delete blobs, which operators may not)
  --tls-ca FILE       connect over TLS, verifying the server against this CA (e.g. DIR/ca.pem)
  --json              JSON output for scripts
  --request-id ID     request ID of create/end/send (default: a new random one; reuse one to retry)
  --timeout D         give up after D (default 10s; drain and rebalance: 2m; watch: none)
  --count N           watch: stop after N frames
  --dry-run           rebalance: print the plan and the imbalance before/after, change nothing
  --yes               restore: really replace the cluster's state
  --takeover          restore: take over the claim of a restore that crashed, and finish it
  --undo              restore: release the claim of a crashed restore that sealed nothing (only if its process is gone: a frozen one can still seal)
  --max-moves N       rebalance: moves under way at once (default 8)
  --tolerance F       rebalance: leave nodes within this factor of the mean alone (default 0.05)
  --grace D           gc: keep unreferenced blobs younger than this (default 1h; a write on its way
                      uploads its blob before the record that points at it)
`

type globals struct {
	natsURL   string
	creds     string
	tlsCA     string
	tls       bool
	hosts     string
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
	grace     time.Duration
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "tickctl:", err)
		var ue usageError
		if errors.As(err, &ue) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg + " (see tickctl --help)" }

// parse accepts flags before, between and after positional arguments.
func parse(args []string) (globals, []string, error) {
	var g globals
	fs := flag.NewFlagSet("tickctl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	url := os.Getenv("NATS_URL")
	if url == "" {
		url = "nats://127.0.0.1:4222"
	}
	fs.StringVar(&g.natsURL, "nats", url, "")
	fs.StringVar(&g.creds, "creds", auth.CredsFromEnv(), "")
	fs.StringVar(&g.tlsCA, "tls-ca", "", "")
	fs.BoolVar(&g.tls, "tls", false, "")
	fs.StringVar(&g.hosts, "hosts", "", "")
	fs.BoolVar(&g.json, "json", false, "")
	fs.StringVar(&g.requestID, "request-id", "", "")
	fs.DurationVar(&g.timeout, "timeout", 10*time.Second, "")
	fs.StringVar(&g.kind, "kind", "", "")
	fs.IntVar(&g.bossHP, "boss-hp", 0, "")
	fs.IntVar(&g.shard, "shard", -1, "")
	fs.BoolVar(&g.dryRun, "dry-run", false, "")
	fs.BoolVar(&g.yes, "yes", false, "")
	fs.BoolVar(&g.takeover, "takeover", false, "")
	fs.BoolVar(&g.undo, "undo", false, "")
	fs.IntVar(&g.maxMoves, "max-moves", 8, "")
	fs.Float64Var(&g.tolerance, "tolerance", 0.05, "")
	fs.IntVar(&g.count, "count", 0, "")
	fs.DurationVar(&g.grace, "grace", time.Hour, "")
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return g, nil, flag.ErrHelp
			}
			return g, nil, usageError{err.Error()}
		}
		args = fs.Args()
		if len(args) == 0 {
			return g, pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

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

func run(args []string, out io.Writer) (err error) {
	g, pos, err := parse(args)
	if errors.Is(err, flag.ErrHelp) || (err == nil && len(pos) == 0) {
		fmt.Fprint(out, usage)
		return nil
	}
	if err != nil {
		return err
	}
	if pos[0] == "auth" {
		return authCmd(g, pos[1:], out)
	}
	if !timeoutSet(args) && len(pos) > 0 && (pos[0] == "drain" || pos[0] == "rebalance" || pos[0] == "move" || pos[0] == "backup" || pos[0] == "restore" || pos[0] == "gc") {
		g.timeout = 2 * time.Minute
	}
	watching := len(pos) > 1 && pos[0] == "instance" && pos[1] == "watch"
	if watching && !timeoutSet(args) {
		g.timeout = 100 * 365 * 24 * time.Hour // until Ctrl-C or --count
	}
	base := context.Background()
	if watching { // Ctrl-C ends a watch cleanly; other commands keep the default (exit at once)
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
		to, err := auth.TLSClientOptions(g.tlsCA, "", "")
		if err != nil {
			return err
		}
		copts = append(copts, to...)
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
		return fmt.Errorf("connect to %s: %w (is tickd running with --nats-listen?)", g.natsURL, err)
	}
	defer nc.Close()
	if audited(pos, g) {
		defer func() { recordAudit(nc, g, pos, err) }()
	}
	st, err := natskv.Open(nc, natskv.Options{})
	if err != nil {
		return err
	}
	defer st.Close()
	cl, err := st.Cluster(ctx)
	if err != nil {
		return fmt.Errorf("read cluster record: %w (has a tickd started against %s?)", err, g.natsURL)
	}
	c := &cli{g: g, st: st, cl: cl, nc: nc, out: out}
	switch {
	case pos[0] == "shards" && len(pos) == 1:
		return c.shards(ctx)
	case pos[0] == "instances" && len(pos) == 1:
		return c.instances(ctx)
	case pos[0] == "status" && len(pos) == 1:
		return c.status(ctx)
	case pos[0] == "audit" && len(pos) == 1:
		return c.audit(ctx)
	case pos[0] == "nodes" && len(pos) == 1:
		return c.nodes(ctx)
	case pos[0] == "move" && len(pos) == 3:
		return c.move(ctx, pos[1], pos[2])
	case pos[0] == "drain" && len(pos) == 2:
		return c.drain(ctx, pos[1])
	case pos[0] == "undrain" && len(pos) == 2:
		return c.undrain(ctx, pos[1])
	case (pos[0] == "pin" || pos[0] == "unpin") && len(pos) == 2:
		return c.pin(ctx, pos[1], pos[0] == "pin")
	case pos[0] == "weight" && len(pos) == 3:
		return c.weight(ctx, pos[1], pos[2])
	case pos[0] == "rebalance" && len(pos) == 1:
		return c.rebalance(ctx, g.dryRun)
	case pos[0] == "gc" && len(pos) == 1:
		return c.gc(ctx)
	case pos[0] == "backup" && len(pos) == 2:
		return c.backup(ctx, pos[1])
	case pos[0] == "restore" && len(pos) == 2 && !g.undo:
		return c.restore(ctx, pos[1])
	case pos[0] == "restore" && len(pos) == 1 && g.undo:
		return c.undoRestore(ctx)
	case pos[0] == "instance" && len(pos) >= 3:
		id := pos[2]
		if err := store.ValidID(id); err != nil {
			return usageError{err.Error()}
		}
		switch {
		case pos[1] == "get" && len(pos) == 3:
			return c.get(ctx, id)
		case pos[1] == "create" && len(pos) == 3:
			if g.kind == "" {
				return usageError{"instance create needs --kind"}
			}
			m := map[string]any{"type": "create", "kind": g.kind}
			if g.bossHP > 0 {
				m["boss_hp"] = g.bossHP
			}
			b, _ := json.Marshal(m)
			return c.send(ctx, id, b)
		case pos[1] == "end" && len(pos) == 3:
			return c.send(ctx, id, []byte(`{"type":"end"}`))
		case pos[1] == "send" && len(pos) == 4:
			return c.send(ctx, id, []byte(pos[3]))
		case pos[1] == "watch" && len(pos) == 3:
			return c.watch(ctx, id)
		}
	}
	return usageError{fmt.Sprintf("unknown command %q", strings.Join(pos, " "))}
}

type cli struct {
	g   globals
	st  *natskv.Store
	cl  store.Cluster
	nc  *nats.Conn
	out io.Writer
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
	fi, _ := os.Stderr.Stat()
	progress := !c.g.json && fi != nil && fi.Mode()&os.ModeCharDevice != 0 // only on a terminal
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
		if progress && s%64 == 63 && s+1 < c.cl.Shards {
			fmt.Fprintf(os.Stderr, "\rreading shards %d/%d", s+1, c.cl.Shards)
		}
	}
	if progress && c.cl.Shards > 64 {
		fmt.Fprint(os.Stderr, "\r\033[K")
	}
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
	ID    string `json:"id"`
	Shard uint32 `json:"shard"`
	Kind  string `json:"kind"`
	Token uint64 `json:"token"`
	Tick  uint64 `json:"tick"`
	Rev   uint64 `json:"revision"`
	Ended bool   `json:"ended,omitempty"`
	Error string `json:"error,omitempty"`
}

func (c *cli) instances(ctx context.Context) error {
	var rows []instRow
	for s := uint32(0); s < c.cl.Shards; s++ {
		if c.g.shard >= 0 && uint32(c.g.shard) != s {
			continue
		}
		ids, err := c.st.Instances(ctx, c.cl.Epoch, s)
		if err != nil {
			return err
		}
		for _, id := range ids {
			rec, rev, err := c.st.Load(ctx, c.cl.Epoch, s, id)
			row := instRow{ID: id, Shard: s, Kind: rec.Kind, Token: rec.Token, Tick: rec.Tick, Rev: rev, Ended: rec.Ended}
			if err != nil {
				row.Error = err.Error()
			}
			rows = append(rows, row)
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].ID < rows[j].ID })
	if c.g.json {
		return c.printJSON(rows)
	}
	w := c.table()
	fmt.Fprintln(w, "INSTANCE\tSHARD\tKIND\tTOKEN\tTICK\tREVISION")
	for _, r := range rows {
		if r.Error != "" {
			fmt.Fprintf(w, "%s\t%d\t!\t\t\t%s\n", r.ID, r.Shard, r.Error)
			continue
		}
		kind := r.Kind
		if r.Ended {
			kind += " (ended)"
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%d\t%d\t%d\n", r.ID, r.Shard, kind, r.Token, r.Tick, r.Rev)
	}
	fmt.Fprintf(w, "%d instances\n", len(rows))
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
			"revision": rev, "state": state, "recent_request_ids": reqs, "ended": rec.Ended}
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
	fmt.Fprintf(w, "requests\t%d remembered\n", len(rec.Reqs))
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
		b, _ := json.MarshalIndent(state, "", "  ")
		fmt.Fprintf(c.out, "state:\n%s\n", b)
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
	client := natscmd.NewClient(c.nc, c.cl.Shards)
	raw, r, err := client.Send(ctx, id, reqID, body, true)
	if err != nil {
		return err
	}
	if c.g.json {
		_, err := fmt.Fprintf(c.out, "%s\n", raw)
		return err
	}
	if !r.OK {
		return fmt.Errorf("%s: %s (request id %s)", r.Error.Code, r.Error.Message, reqID)
	}
	res, _ := json.Marshal(r.Result)
	fmt.Fprintf(c.out, "ok (request id %s): %s\n", reqID, res)
	return nil
}

// watch prints an instance's frames as they come: one line each (tick, grant, the payload as
// JSON), or with --json a JSON object per line.
func (c *cli) watch(ctx context.Context, id string) error {
	client := natscmd.NewClient(c.nc, c.cl.Shards)
	w, err := client.Watch(ctx, id)
	if err != nil {
		return err
	}
	if !c.g.json {
		fmt.Fprintf(os.Stderr, "watching %s on %s[.<topic>] (Ctrl-C to stop)\n", id, wire.FrameSubject(store.ShardOf(id, c.cl.Shards), id, ""))
	}
	n := 0
	for f := range w.C {
		b, err := wire.MsgpackToJSON(f.Payload)
		if err != nil {
			b, _ = json.Marshal(fmt.Sprintf("%d bytes, not msgpack", len(f.Payload)))
		}
		if c.g.json {
			if err := json.NewEncoder(c.out).Encode(map[string]any{"instance": id, "topic": f.Topic, "epoch": f.Epoch,
				"token": f.Token, "tick": f.Tick, "frame": json.RawMessage(b)}); err != nil {
				return err
			}
		} else {
			topic := ""
			if f.Topic != "" {
				topic = " [" + f.Topic + "]"
			}
			fmt.Fprintf(c.out, "tick %d  epoch %d token %d%s  %s\n", f.Tick, f.Epoch, f.Token, topic, b)
		}
		if n++; c.g.count > 0 && n >= c.g.count {
			return nil
		}
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) && timeoutSet(os.Args[1:]) {
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
	fmt.Fprintf(c.out, "%d blobs: %d referenced by a current record, %d unreferenced but younger than %v, %s %d\n",
		res.Objects, res.Referenced, res.Young, c.g.grace, verb, len(res.Deleted))
	for _, n := range res.Deleted {
		fmt.Fprintf(c.out, "  %s\n", n)
	}
	return nil
}

func timeoutSet(args []string) bool {
	for _, a := range args {
		if a == "--timeout" || a == "-timeout" || strings.HasPrefix(a, "--timeout=") || strings.HasPrefix(a, "-timeout=") {
			return true
		}
	}
	return false
}
