package main

// The command line: a table of verbs, each with its arguments, help and flags, parsed with the
// standard flag package (one FlagSet per verb).
//
// Why not a CLI library: the nats CLI uses choria-io/fisk (a kingpin fork; not among the modules
// available here), and github.com/alecthomas/kingpin/v2 is. kingpin would give per-command flags,
// help and completion scripts, but tickctl's documented syntax lets any flag stand anywhere on
// the line, before the verb too (`tickctl --json status`, `tickctl instance --request-id=r1 send
// d1 {}`), which kingpin refuses for a subcommand's own flags; its errors and exit codes (1 for a
// usage error, help on stderr for some paths) would need overriding too. The table below is a few
// hundred lines without a new dependency: parse finds the verb first (with every flag known, so a
// value is not taken for a word), checks the verb's arguments before anything connects, and parses
// again with only the flags that verb takes (global: --nats, --creds, --tls-ca, --json,
// --timeout), so a foreign flag is an error naming the verbs that take it. Help (tickctl --help,
// tickctl VERB --help, tickctl help VERB) goes to stdout with exit 0, usage errors to stderr with
// exit 2 and a hint, and `tickctl completion bash|zsh` prints scripts that ask the binary itself
// (tickctl __complete WORDS...) for the candidates, so they follow this table.
//
// To add a verb, append a verb to verbs (and its flags to flagDefs).

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/auth"
	"github.com/tickfence/tickfence/store"
)

// verb is one command of tickctl.
type verb struct {
	path     string                                                 // its words: "drain", "instance create"
	args     string                                                 // synopsis of its arguments and required flags: "<shard> <node>"
	min, max int                                                    // how many positional arguments it takes
	short    string                                                 // what it does (the line of tickctl --help; may wrap with \n)
	long     string                                                 // more, for tickctl VERB --help
	flags    []string                                               // the flags it takes besides the global ones (names in flagDefs)
	offline  bool                                                   // runs without NATS: no global flags
	timeout  time.Duration                                          // default --timeout (0: 10s); negative: none, the verb runs until Ctrl-C (SIGINT/SIGTERM end it cleanly)
	check    func(g *globals, args []string) error                  // before connecting
	run      func(ctx context.Context, c *cli, args []string) error // connected
	local    func(g globals, args []string, out io.Writer) error    // offline
	hidden   bool
	setup    bool // connects, but reads no cluster record (cluster init makes it)
}

// globalFlags are the flags every verb that connects takes.
var globalFlags = []string{"nats", "creds", "tls-ca", "tls-cert", "tls-key", "json", "timeout"}

type flagDef struct {
	name string
	def  func(fs *flag.FlagSet, g *globals)
}

func defaultNATS() string {
	if u := os.Getenv("NATS_URL"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}

var flagDefs = []flagDef{
	{"nats", func(fs *flag.FlagSet, g *globals) {
		fs.StringVar(&g.natsURL, "nats", defaultNATS(), "NATS server `URL`s, comma-separated (default $NATS_URL, else nats://127.0.0.1:4222;\n"+
			"start tickd with --nats-listen 127.0.0.1:4222 to expose its embedded server)")
	}},
	{"creds", func(fs *flag.FlagSet, g *globals) {
		fs.StringVar(&g.creds, "creds", auth.CredsFromEnv(), "NATS credentials `FILE` (default $NATS_CREDS): operator.creds for the control plane,\n"+
			"observer.creds to look only; cluster init, restore and gc need admin.creds")
	}},
	{"tls-ca", func(fs *flag.FlagSet, g *globals) {
		fs.StringVar(&g.tlsCA, "tls-ca", "", "connect over TLS, verifying the server against this CA `FILE` (e.g. DIR/ca.pem)")
	}},
	{"tls-cert", func(fs *flag.FlagSet, g *globals) {
		fs.StringVar(&g.tlsCert, "tls-cert", "", "with --tls-ca: the client certificate `FILE` to present to a server that requires one\n"+
			"(tickd server --tls-verify; tickctl auth cert makes a dev one)")
	}},
	{"tls-key", func(fs *flag.FlagSet, g *globals) {
		fs.StringVar(&g.tlsKey, "tls-key", "", "the key `FILE` of --tls-cert")
	}},
	{"json", func(fs *flag.FlagSet, g *globals) { fs.BoolVar(&g.json, "json", false, "JSON output for scripts") }},
	{"timeout", func(fs *flag.FlagSet, g *globals) {
		fs.DurationVar(&g.timeout, "timeout", 10*time.Second, "give up after `D` (default 10s; move, drain, rebalance, backup, restore, gc: 2m;\n"+
			"instance watch: none)")
	}},
	{"request-id", func(fs *flag.FlagSet, g *globals) {
		fs.StringVar(&g.requestID, "request-id", "", "request `ID` of the command (default: a new random one; reuse one to retry)")
	}},
	{"kind", func(fs *flag.FlagSet, g *globals) {
		fs.StringVar(&g.kind, "kind", "", "the instance's `KIND`, e.g. dungeon (required)")
	}},
	{"boss-hp", func(fs *flag.FlagSet, g *globals) {
		fs.IntVar(&g.bossHP, "boss-hp", 0, "dungeon: the boss's hit points (`N`; default: the kind's)")
	}},
	{"shard", func(fs *flag.FlagSet, g *globals) {
		fs.IntVar(&g.shard, "shard", -1, "only the instances of shard `N`")
	}},
	{"label", func(fs *flag.FlagSet, g *globals) {
		fs.Var(&g.labels, "label", "`K=V` labels, comma-separated or repeated (instances: only those holding every one, V * for any\n"+
			"value; instance create: the instance's)")
	}},
	{"dry-run", func(fs *flag.FlagSet, g *globals) {
		fs.BoolVar(&g.dryRun, "dry-run", false, "print what would be done, change nothing")
	}},
	{"max-moves", func(fs *flag.FlagSet, g *globals) {
		fs.IntVar(&g.maxMoves, "max-moves", 8, "moves under way at once (`N`, default 8)")
	}},
	{"tolerance", func(fs *flag.FlagSet, g *globals) {
		fs.Float64Var(&g.tolerance, "tolerance", 0.05, "leave nodes within this factor `F` of the mean load alone (default 0.05)")
	}},
	{"topic", func(fs *flag.FlagSet, g *globals) {
		fs.StringVar(&g.topics, "topic", "", "watch only these `TOPICS`, comma-separated (a game's frame topics; an empty one in the list,\n"+
			"as in \",hud\", is the main subject; default: every topic)")
	}},
	{"player", func(fs *flag.FlagSet, g *globals) {
		fs.StringVar(&g.player, "player", "", "also the frames the game made for player `NAME` only (actor.Frames.PublishTo; an operator's\n"+
			"or observer's credential may watch any player's)")
	}},
	{"durable", func(fs *flag.FlagSet, g *globals) {
		fs.BoolVar(&g.durable, "durable", false, "show a frame only once its tick is stored: never one a failover undoes")
	}},
	{"count", func(fs *flag.FlagSet, g *globals) {
		fs.IntVar(&g.count, "count", 0, "stop after `N` (watch: frames; audit: entries, default 50)")
	}},
	{"grace", func(fs *flag.FlagSet, g *globals) {
		fs.DurationVar(&g.grace, "grace", time.Hour, "keep unreferenced blobs younger than `D` (default 1h; a write on its way uploads\n"+
			"its blob before the record that points at it)")
	}},
	{"yes", func(fs *flag.FlagSet, g *globals) {
		fs.BoolVar(&g.yes, "yes", false, "really replace the cluster's state")
	}},
	{"takeover", func(fs *flag.FlagSet, g *globals) {
		fs.BoolVar(&g.takeover, "takeover", false, "take over the claim of a restore that crashed, and finish it")
	}},
	{"undo", func(fs *flag.FlagSet, g *globals) {
		fs.BoolVar(&g.undo, "undo", false, "release the claim of a crashed restore that sealed nothing (only if its process is gone:\n"+
			"a frozen one can still seal)")
	}},
	{"tls", func(fs *flag.FlagSet, g *globals) {
		fs.BoolVar(&g.tls, "tls", false, "also write a self-signed dev CA (ca.pem) and a server certificate (server.pem,\n"+
			"server-key.pem) for localhost, 127.0.0.1 and --hosts")
	}},
	{"hosts", func(fs *flag.FlagSet, g *globals) {
		fs.StringVar(&g.hosts, "hosts", "", "with --tls: more `HOSTS` of the server certificate, comma-separated")
	}},
	{"expires", func(fs *flag.FlagSet, g *globals) {
		fs.StringVar(&g.expires, "expires", "", "the credential stops being accepted after `WHEN`: a duration from now (720h, 90d)\n"+
			"or a time (2027-01-31T00:00:00Z); default: never")
	}},
	{"trusted", func(fs *flag.FlagSet, g *globals) {
		fs.BoolVar(&g.trusted, "trusted", false, "a gateway trusted to name the player it acts for (the studio's own; default: it is\n"+
			"the player it is named after)")
	}},
}

func shardNumber(s string) error {
	if _, err := strconv.ParseUint(s, 10, 32); err != nil {
		return usageError{fmt.Sprintf("shard %q: want a shard number", s)}
	}
	return nil
}

func validInstance(id string) error {
	if err := store.ValidID(id); err != nil {
		return usageError{err.Error()}
	}
	return nil
}

var verbs = []*verb{
	{path: "status", short: "shards, partitions and replicas, each partition's stream leader, the coordinator\n" +
		"leader, nodes with load and lease age, imbalance",
		run: func(ctx context.Context, c *cli, _ []string) error { return c.status(ctx) }},
	{path: "nodes", short: "the live nodes", run: func(ctx context.Context, c *cli, _ []string) error { return c.nodes(ctx) }},
	{path: "shards", short: "owner, session and token of every shard",
		run: func(ctx context.Context, c *cli, _ []string) error { return c.shards(ctx) }},
	{path: "instances", args: "[--shard N] [--label K=V,…]", short: "instances with shard, token, tick, kind, labels, and those failed on their node",
		flags: []string{"shard", "label"},
		long: "--label mode=heroic lists only the instances whose last stored record holds that label (several:\n" +
			"all of them; mode=* any value). Ended instances are listed ended, passivated ones passive.",
		run: func(ctx context.Context, c *cli, _ []string) error { return c.instances(ctx) }},
	{path: "instance get", args: "<id>", min: 1, max: 1, short: "the decoded record of one instance",
		check: func(_ *globals, a []string) error { return validInstance(a[0]) },
		run:   func(ctx context.Context, c *cli, a []string) error { return c.get(ctx, a[0]) }},
	{path: "instance create", args: "<id> --kind dungeon [--label K=V,…]", min: 1, max: 1, short: "create an instance (through its owner)",
		flags: []string{"kind", "boss-hp", "request-id", "label"},
		check: func(g *globals, a []string) error {
			if g.kind == "" {
				return usageError{"instance create needs --kind"}
			}
			return validInstance(a[0])
		},
		run: func(ctx context.Context, c *cli, a []string) error {
			m := map[string]any{"type": "create", "kind": c.g.kind}
			if c.g.bossHP > 0 {
				m["boss_hp"] = c.g.bossHP
			}
			if len(c.g.labels.m) > 0 {
				m["labels"] = c.g.labels.m
			}
			b, _ := json.Marshal(m)
			return c.send(ctx, a[0], b)
		}},
	{path: "instance end", args: "<id>", min: 1, max: 1, short: "end an instance (a fenced tombstone by its owner)", flags: []string{"request-id"},
		check: func(_ *globals, a []string) error { return validInstance(a[0]) },
		run: func(ctx context.Context, c *cli, a []string) error {
			return c.send(ctx, a[0], []byte(`{"type":"end"}`))
		}},
	{path: "instance reload", args: "<id>", min: 1, max: 1, short: "load a failed instance again from its stored state, once the game is fixed\n" +
		"(an operator's request to the node that owns it)",
		long: "An instance whose game code failed on its node — a panic in Handle or Tick, a state its kind\n" +
			"cannot Restore, a kind the node does not know — answers every command instance_failed and is\n" +
			"listed FAILED by tickctl instances. Once the game is fixed (the node restarted with the fix, or\n" +
			"the cause removed), reload asks its owner to load it again; nothing of what it held in memory\n" +
			"when it failed is kept (its stored state is). Needs an operator's credential.",
		check: func(_ *globals, a []string) error { return validInstance(a[0]) },
		run:   func(ctx context.Context, c *cli, a []string) error { return c.reload(ctx, a[0]) }},
	{path: "instance send", args: "<id> '<json command>'", min: 2, max: 2,
		short: `send a command, e.g. '{"type":"attack","player":"p1"}'`, flags: []string{"request-id"},
		long: "The answer is printed with its request ID; sending again with the same --request-id returns the\n" +
			"same answer without applying the command twice.",
		check: func(_ *globals, a []string) error {
			if !json.Valid([]byte(a[1])) {
				return usageError{fmt.Sprintf("command is not valid JSON: %s", a[1])}
			}
			return validInstance(a[0])
		},
		run: func(ctx context.Context, c *cli, a []string) error { return c.send(ctx, a[0], []byte(a[1])) }},
	{path: "instance watch", args: "<id> [--count N] [--topic T,…] [--player NAME] [--durable]", min: 1, max: 1, flags: []string{"count", "topic", "player", "durable"}, timeout: -1,
		short: "print the instance's frames live (until Ctrl-C, --count frames or --timeout if\n" +
			"given), zombies' frames dropped; --durable: only frames whose tick is stored",
		check: func(g *globals, a []string) error {
			if g.count < 0 {
				return usageError{"--count must not be negative"}
			}
			for _, t := range strings.Split(g.topics, ",") {
				if err := actor.ValidFrame(actor.Frame{Topic: t}); err != nil {
					return usageError{"--topic: " + err.Error()}
				}
			}
			if g.player != "" && !actor.ValidPlayer(g.player) {
				return usageError{fmt.Sprintf("--player %q: want 1-64 of A-Z a-z 0-9 _ -", g.player)}
			}
			return validInstance(a[0])
		},
		run: func(ctx context.Context, c *cli, a []string) error { return c.watch(ctx, a[0]) }},
	{path: "move", args: "<shard> <node>", min: 2, max: 2, timeout: 2 * time.Minute,
		short: "hand a shard off to a node, and wait until it runs there",
		check: func(_ *globals, a []string) error { return shardNumber(a[0]) },
		run:   func(ctx context.Context, c *cli, a []string) error { return c.move(ctx, a[0], a[1]) }},
	{path: "drain", args: "<node>", min: 1, max: 1, timeout: 2 * time.Minute, short: "move every shard off a node (waits, with progress)",
		run: func(ctx context.Context, c *cli, a []string) error { return c.drain(ctx, a[0]) }},
	{path: "undrain", args: "<node>", min: 1, max: 1, short: "let the coordinator place shards on it again",
		run: func(ctx context.Context, c *cli, a []string) error { return c.undrain(ctx, a[0]) }},
	{path: "pin", args: "<shard>", min: 1, max: 1, short: "keep a shard where it is (the rebalancer skips it)",
		check: func(_ *globals, a []string) error { return shardNumber(a[0]) },
		run:   func(ctx context.Context, c *cli, a []string) error { return c.pin(ctx, a[0], true) }},
	{path: "unpin", args: "<shard>", min: 1, max: 1, short: "let the rebalancer move a pinned shard again",
		check: func(_ *globals, a []string) error { return shardNumber(a[0]) },
		run:   func(ctx context.Context, c *cli, a []string) error { return c.pin(ctx, a[0], false) }},
	{path: "weight", args: "<node> <w>", min: 2, max: 2, short: "a node's share of the load (default 1)",
		check: func(_ *globals, a []string) error {
			if w, err := strconv.ParseFloat(a[1], 64); err != nil || w <= 0 || w > 1000 {
				return usageError{fmt.Sprintf("weight %q: want a number in (0, 1000]", a[1])}
			}
			return nil
		},
		run: func(ctx context.Context, c *cli, a []string) error { return c.weight(ctx, a[0], a[1]) }},
	{path: "rebalance", args: "[--dry-run]", flags: []string{"dry-run", "max-moves", "tolerance"}, timeout: 2 * time.Minute,
		short: "plan load-based moves (and apply them, with progress)",
		long:  "--dry-run prints the plan and the imbalance before and after, and changes nothing.",
		check: func(g *globals, _ []string) error {
			if g.maxMoves < 1 {
				return usageError{"--max-moves must be at least 1"}
			}
			if g.tolerance < 0 {
				return usageError{"--tolerance must not be negative"}
			}
			return nil
		},
		run: func(ctx context.Context, c *cli, _ []string) error { return c.rebalance(ctx, c.g.dryRun) }},
	{path: "backup", args: "<file>", min: 1, max: 1, timeout: 2 * time.Minute,
		short: "save the latest value of every key of the current epoch (and the blobs its\n" +
			"records point at)",
		run: func(ctx context.Context, c *cli, a []string) error { return c.backup(ctx, a[0]) }},
	{path: "gc", args: "[--grace 1h] [--dry-run]", flags: []string{"grace", "dry-run"}, timeout: 2 * time.Minute,
		short: "delete large-state blobs no current record points at, older than the grace period",
		check: func(g *globals, _ []string) error {
			if g.grace < 0 {
				return usageError{"--grace must not be negative"}
			}
			return nil
		},
		run: func(ctx context.Context, c *cli, _ []string) error { return c.gc(ctx) }},
	{path: "restore", args: "<file> --yes [--takeover] | --undo --yes", max: 1, flags: []string{"yes", "takeover", "undo"}, timeout: 2 * time.Minute,
		short: "seal the current epoch, restore the backup into the next; --takeover finishes a\n" +
			"restore that crashed or hangs (safe even if it wakes); --undo undoes a crashed\n" +
			"restore that sealed nothing yet (its process must be gone)",
		check: func(g *globals, a []string) error {
			switch {
			case g.undo && len(a) != 0:
				return usageError{"restore --undo takes no file"}
			case g.undo && g.takeover:
				return usageError{"restore: --undo or --takeover, not both"}
			case !g.undo && len(a) != 1:
				return usageError{"restore takes <file> (or --undo)"}
			}
			return nil
		},
		run: func(ctx context.Context, c *cli, a []string) error {
			if c.g.undo {
				return c.undoRestore(ctx)
			}
			return c.restore(ctx, a[0])
		}},
	{path: "audit", args: "[--count N]", flags: []string{"count"},
		short: "the last N (50) operator actions: who (the credential's user), role, what, when,\n" +
			"result; move, drain, undrain, pin, unpin, weight, rebalance and restore append one each",
		check: func(g *globals, _ []string) error {
			if g.count < 0 {
				return usageError{"--count must not be negative"}
			}
			return nil
		},
		run: func(ctx context.Context, c *cli, _ []string) error { return c.audit(ctx) }},
	consoleVerb,     // console.go
	clusterInitVerb, // cluster.go
	{path: "auth init", args: "<dir> [--tls [--hosts h1,h2]]", min: 1, max: 1, offline: true, flags: []string{"tls", "hosts"},
		short: "new credentials: one file per role (node, gateway, operator, observer, admin, effects .creds,\n" +
			"mode 0600) and server.conf that enforces them (tickd --auth DIR, tickd server --auth\n" +
			"DIR, nats-server); --tls: a self-signed dev CA (ca.pem) and a server certificate\n" +
			"(server.pem, server-key.pem) for localhost, 127.0.0.1 and the hosts",
		local: authInit},
	{path: "auth user", args: "<dir> <role> <name> [--expires WHEN] [--trusted]", min: 3, max: 3, offline: true,
		flags: []string{"expires", "trusted"},
		short: "one more credential of a role, e.g. a second gateway with its own reply inbox\n" +
			"(_INBOX.<name>); --expires: until when it is accepted",
		long: "A name whose credential is still valid is not replaced (the old one would stay valid):\n" +
			"revoke it first (tickctl auth revoke), or choose another name.",
		check: func(g *globals, a []string) error {
			r, err := auth.ParseRole(a[1])
			if err != nil {
				return usageError{err.Error()}
			}
			if g.trusted && r != auth.Gateway {
				return usageError{fmt.Sprintf("--trusted is for gateways (it may name the player it acts for), not a %s", r)}
			}
			if _, err := parseExpiry(g.expires, time.Now()); err != nil {
				return usageError{err.Error()}
			}
			return nil
		},
		local: authUser},
	{path: "auth revoke", args: "<dir> <name> [--nats URL]", min: 2, max: 2, offline: true,
		flags: []string{"nats", "tls-ca", "tls-cert", "tls-key", "timeout"},
		short: "revoke a credential: its account's JWT lists it, server.conf is rewritten, and the\n" +
			"running servers are told as sys.creds (no restart): they close its connections and\n" +
			"refuse it",
		long: "Without a server to tell (or with a directory made before sys.creds), server.conf is still\n" +
			"updated and tickctl says so and exits 1: the servers accept the credential until told with\n" +
			"tickctl auth push DIR --nats URL, or restarted with the new server.conf.",
		local: authRevoke},
	{path: "auth push", args: "<dir> [--nats URL]", min: 1, max: 1, offline: true,
		flags: []string{"nats", "tls-ca", "tls-cert", "tls-key", "timeout"},
		short: "send server.conf's account JWTs (revocations) to the running servers, as sys.creds",
		local: authPush},
	{path: "auth list", args: "<dir> [--json]", min: 1, max: 1, offline: true, flags: []string{"json"},
		short: "the credentials of an auth directory: name, role, account, trusted, expiry, revoked",
		local: authList},
	{path: "auth cert", args: "<dir> <name>", min: 2, max: 2, offline: true,
		short: "a client certificate (NAME.pem, NAME-key.pem) signed by the dev CA of auth init --tls, for\n" +
			"a server that requires them (tickd server --tls-verify): --tls-cert and --tls-key",
		local: authCert},
	{path: "completion", args: "bash|zsh", min: 1, max: 1, offline: true,
		short: "a shell completion script, e.g. source <(tickctl completion bash)",
		long: "bash: source <(tickctl completion bash), or save it in /etc/bash_completion.d/tickctl.\n" +
			"zsh: source <(tickctl completion zsh) after compinit, or save it as _tickctl in a directory of\n" +
			"$fpath. The scripts ask tickctl itself for the words (tickctl __complete WORDS...), so they\n" +
			"follow the binary's verbs and flags.",
		check: func(_ *globals, a []string) error {
			if _, ok := completionScripts[a[0]]; !ok {
				return usageError{fmt.Sprintf("completion %q: want bash or zsh", a[0])}
			}
			return nil
		},
		local: func(_ globals, a []string, out io.Writer) error {
			_, err := io.WriteString(out, completionScripts[a[0]])
			return err
		}},
}

func findVerb(path string) *verb {
	for _, v := range verbs {
		if v.path == path {
			return v
		}
	}
	return nil
}

// group returns the verbs under a first word that has more than one ("instance", "auth").
func group(word string) []*verb {
	var g []*verb
	for _, v := range verbs {
		if strings.HasPrefix(v.path, word+" ") {
			g = append(g, v)
		}
	}
	return g
}

// flagSet is a verb's flags (nil: every flag of every verb, to tell flags from words).
func flagSet(v *verb, g *globals) *flag.FlagSet {
	fs := flag.NewFlagSet("tickctl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	for _, d := range flagDefs {
		if v == nil || slices.Contains(v.flags, d.name) || !v.offline && slices.Contains(globalFlags, d.name) {
			d.def(fs, g)
		}
	}
	return fs
}

// parsed is a command line taken apart.
type parsed struct {
	g          globals
	v          *verb
	args       []string // the verb's arguments
	words      []string // every positional word
	help       bool     // --help, -h or tickctl help
	timeoutSet bool
}

// isHelp: -h, -help and --help (the flag package's own).
func isHelp(a string) bool { return a == "-h" || a == "--help" || a == "-help" }

// words splits args into flags (parsed into fs) and positional words: flags may stand before,
// between and after the words; after "--" everything is a word.
func words(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return pos, err
		}
		rest := fs.Args()
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// parse finds the verb (knowing every flag, so a flag's value is not taken for a word), then
// parses the line again with only that verb's flags, and checks the number of its arguments.
func parse(args []string) (parsed, error) {
	var p parsed
	var rest []string
	for i, a := range args {
		if a == "--" {
			rest = append(rest, args[i:]...)
			break
		}
		if isHelp(a) {
			p.help = true
			continue
		}
		rest = append(rest, a)
	}
	var scratch globals
	pos, err := words(flagSet(nil, &scratch), rest)
	if err != nil {
		v, _ := resolve(pos)
		return p, flagError(err, v)
	}
	if len(pos) > 0 && pos[0] == "help" {
		p.help = true
		pos = pos[1:]
	}
	p.words = pos
	if len(pos) == 0 {
		return p, nil
	}
	v, n := resolve(pos)
	if v == nil {
		if g := group(pos[0]); len(g) > 0 {
			if p.help && len(pos) == 1 {
				return p, nil // the group's help
			}
			return p, verbUsage{groupMessage(pos), pos[0]}
		}
		return p, usageError{unknownMessage(pos[0])}
	}
	p.v = v
	fs := flagSet(v, &p.g)
	if _, err := words(fs, rest); err != nil {
		return p, flagError(err, v)
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "timeout" {
			p.timeoutSet = true
		}
	})
	if p.help {
		return p, nil
	}
	p.args = pos[n:]
	if v.path == "restore" { // its check says which form it wants
		return p, nil
	}
	if len(p.args) < v.min || len(p.args) > v.max {
		msg := fmt.Sprintf("%s needs %s", v.path, v.args)
		switch {
		case len(p.args) > v.max && v.max == 0:
			msg = fmt.Sprintf("%s takes no arguments, not %q", v.path, strings.Join(p.args, " "))
		case len(p.args) > v.max:
			msg = fmt.Sprintf("%s takes %s, not %q", v.path, v.args, strings.Join(p.args, " "))
		}
		return p, verbUsage{msg, v.path}
	}
	return p, nil
}

// resolve returns the verb the words name and how many words its name has.
func resolve(pos []string) (*verb, int) {
	if len(pos) >= 2 {
		if v := findVerb(pos[0] + " " + pos[1]); v != nil {
			return v, 2
		}
	}
	if len(pos) >= 1 {
		if v := findVerb(pos[0]); v != nil {
			return v, 1
		}
	}
	return nil, 0
}

func groupMessage(pos []string) string {
	var subs []string
	for _, v := range group(pos[0]) {
		subs = append(subs, strings.TrimPrefix(v.path, pos[0]+" "))
	}
	if len(pos) == 1 {
		return fmt.Sprintf("%s needs one of: %s", pos[0], strings.Join(subs, ", "))
	}
	return fmt.Sprintf("unknown command %q: %s takes one of: %s", strings.Join(pos[:2], " "), pos[0], strings.Join(subs, ", "))
}

func unknownMessage(word string) string {
	msg := fmt.Sprintf("unknown command %q", word)
	best, bestD := "", 3
	for _, v := range verbs {
		if v.hidden {
			continue
		}
		first := strings.Fields(v.path)[0]
		if d := editDistance(word, first); d < bestD || d == bestD && best == "" && strings.HasPrefix(first, word) {
			best, bestD = first, d
		}
	}
	if best != "" {
		msg += fmt.Sprintf("; did you mean %q?", best)
	}
	return msg
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// flagError says which flag is wrong, and for a flag of other verbs, which ones take it.
func flagError(err error, v *verb) error {
	msg := err.Error()
	const undefined = "flag provided but not defined: -"
	if name, ok := strings.CutPrefix(msg, undefined); ok {
		var takers []string
		for _, o := range verbs {
			if slices.Contains(o.flags, name) || !o.offline && slices.Contains(globalFlags, name) {
				takers = append(takers, o.path)
			}
		}
		switch {
		case v != nil && v.offline && slices.Contains(globalFlags, name):
			msg = fmt.Sprintf("%s runs offline: it takes no --%s", v.path, name)
		case v != nil && slices.Contains(globalFlags, name):
			msg = fmt.Sprintf("%s does not take --%s", v.path, name) // not reached: every verb that connects takes them
		case v != nil && len(takers) > 0:
			msg = fmt.Sprintf("%s does not take --%s (a flag of: %s)", v.path, name, strings.Join(takers, ", "))
		default: // no verb takes it
			msg = fmt.Sprintf("unknown flag --%s", name)
		}
	}
	if v != nil {
		return verbUsage{msg, v.path}
	}
	return usageError{msg}
}

// verbUsage is a usage error of a verb: the hint names its help.
type verbUsage struct{ msg, verb string }

func (e verbUsage) Error() string { return fmt.Sprintf("%s (see tickctl %s --help)", e.msg, e.verb) }

// usageText is tickctl --help.
func usageText() string {
	var b strings.Builder
	b.WriteString("tickctl inspects and drives a tickfence cluster.\n\nUsage:\n")
	for _, v := range verbs {
		if v.hidden {
			continue
		}
		use := v.path
		if v.args != "" {
			use += " " + v.args
		}
		writeEntry(&b, "tickctl "+use, v.short, 48)
	}
	b.WriteString("\nGlobal flags (before or after the arguments; not taken by auth and completion):\n")
	var g globals
	fs := flagSet(&verb{}, &g)
	writeFlags(&b, fs, globalFlags)
	b.WriteString("\nEach verb takes only its own flags besides these: tickctl VERB --help (or tickctl help VERB)\n" +
		"lists them. Shell completion: tickctl completion bash|zsh.\n" +
		"Exit status: 0 done, 1 failed, 2 a usage error (nothing was sent).\n")
	return b.String()
}

// verbHelp is tickctl VERB --help.
func verbHelp(v *verb) string {
	var b strings.Builder
	use := "tickctl " + v.path
	if v.args != "" {
		use += " " + v.args
	}
	if !v.offline || len(v.flags) > 0 {
		use += " [flags]"
	}
	fmt.Fprintf(&b, "Usage: %s\n\n%s.\n", use, strings.Join(wrap(upperFirst(v.short), 100), "\n"))
	if v.long != "" {
		fmt.Fprintf(&b, "\n%s\n", v.long)
	}
	var g globals
	fs := flagSet(v, &g)
	if len(v.flags) > 0 {
		b.WriteString("\nFlags:\n")
		writeFlags(&b, fs, v.flags)
	}
	if !v.offline {
		b.WriteString("\nGlobal flags:\n")
		writeFlags(&b, fs, globalFlags)
		if v.timeout != 0 {
			d := v.timeout.String()
			if v.timeout < 0 {
				d = "none"
			}
			fmt.Fprintf(&b, "  (--timeout of tickctl %s: default %s)\n", v.path, strings.TrimSuffix(strings.TrimSuffix(d, "0s"), "m0"))
		}
	}
	return b.String()
}

// groupHelp is tickctl instance --help.
func groupHelp(word string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: tickctl %s VERB ...\n\n", word)
	for _, v := range group(word) {
		writeEntry(&b, "tickctl "+v.path+" "+v.args, v.short, 48)
	}
	fmt.Fprintf(&b, "\ntickctl %s VERB --help for its flags.\n", word)
	return b.String()
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func writeEntry(b *strings.Builder, use, short string, col int) {
	lines := wrap(short, 60)
	if len(use)+2 > col {
		fmt.Fprintf(b, "  %s\n", use)
	} else {
		fmt.Fprintf(b, "  %-*s", col, use)
		fmt.Fprintf(b, "%s\n", lines[0])
		lines = lines[1:]
	}
	for _, l := range lines {
		fmt.Fprintf(b, "  %-*s%s\n", col, "", l)
	}
}

// wrap breaks text into lines of at most width runes (at spaces).
func wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(text) {
		if line != "" && len([]rune(line))+1+len([]rune(w)) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	return append(lines, line)
}

func writeFlags(b *strings.Builder, fs *flag.FlagSet, names []string) {
	for _, n := range names {
		f := fs.Lookup(n)
		if f == nil {
			continue
		}
		arg, usage := flag.UnquoteUsage(f)
		use := "--" + n
		if arg != "" {
			use += " " + arg
		}
		lines := strings.Split(usage, "\n")
		fmt.Fprintf(b, "  %-18s %s\n", use, lines[0])
		for _, l := range lines[1:] {
			fmt.Fprintf(b, "  %-18s %s\n", "", l)
		}
	}
}

// printHelp prints the help the parsed line asks for.
func printHelp(out io.Writer, p parsed) {
	switch {
	case p.v != nil:
		fmt.Fprint(out, verbHelp(p.v))
	case len(p.words) > 0 && len(group(p.words[0])) > 0:
		fmt.Fprint(out, groupHelp(p.words[0]))
	default:
		fmt.Fprint(out, usageText())
	}
}

// complete returns the candidates for the last of words (the word being typed, maybe empty),
// given the words before it: verbs, a group's verbs, the verb's flags, completion's shells.
// Nothing means: complete a file name.
func complete(ws []string) []string {
	if len(ws) == 0 {
		ws = []string{""}
	}
	cur, prev := ws[len(ws)-1], ws[:len(ws)-1]
	var scratch globals
	all := flagSet(nil, &scratch)
	if n := len(prev); n > 0 && strings.HasPrefix(prev[n-1], "-") && !strings.Contains(prev[n-1], "=") && prev[n-1] != "--" {
		if f := all.Lookup(strings.TrimLeft(prev[n-1], "-")); f != nil && !isBoolFlag(f) {
			return nil // a flag's value
		}
	}
	var pos []string
	for i := 0; i < len(prev); i++ {
		a := prev[i]
		if !strings.HasPrefix(a, "-") || a == "-" {
			pos = append(pos, a)
			continue
		}
		if f := all.Lookup(strings.TrimLeft(a, "-")); f != nil && !isBoolFlag(f) && !strings.Contains(a, "=") {
			i++ // its value
		}
	}
	if len(pos) > 0 && pos[0] == "help" {
		pos = pos[1:]
	}
	var cands []string
	v, _ := resolve(pos)
	if strings.HasPrefix(cur, "-") {
		var g globals
		fs := flagSet(v, &g)
		if v == nil {
			fs = flagSet(&verb{}, &g)
		}
		fs.VisitAll(func(f *flag.Flag) { cands = append(cands, "--"+f.Name) })
		cands = append(cands, "--help")
	} else {
		switch {
		case len(pos) == 0:
			seen := map[string]bool{}
			for _, v := range verbs {
				if w := strings.Fields(v.path)[0]; !v.hidden && !seen[w] {
					seen[w] = true
					cands = append(cands, w)
				}
			}
			cands = append(cands, "help")
		case len(pos) == 1 && v == nil:
			for _, g := range group(pos[0]) {
				cands = append(cands, strings.TrimPrefix(g.path, pos[0]+" "))
			}
		case len(pos) == 1 && v.path == "completion":
			cands = []string{"bash", "zsh"}
		case len(pos) == 3 && v != nil && v.path == "auth user":
			for _, r := range auth.Roles {
				cands = append(cands, string(r))
			}
		}
	}
	var out []string
	for _, c := range cands {
		if strings.HasPrefix(c, cur) {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

var completionScripts = map[string]string{
	"bash": `# bash completion for tickctl: source <(tickctl completion bash)
_tickctl() {
	local cur=${COMP_WORDS[COMP_CWORD]} IFS=$'\n'
	COMPREPLY=($(compgen -W "$("${COMP_WORDS[0]}" __complete "${COMP_WORDS[@]:1:COMP_CWORD}" 2>/dev/null)" -- "$cur"))
}
complete -o default -F _tickctl tickctl
`,
	"zsh": `#compdef tickctl
# zsh completion for tickctl: source <(tickctl completion zsh) after compinit, or save as _tickctl on $fpath
_tickctl() {
	local -a cands
	cands=("${(@f)$("${words[1]}" __complete "${(@)words[2,CURRENT]}" 2>/dev/null)}")
	cands=(${cands:#})
	if (( ${#cands} )); then
		compadd -- "${cands[@]}"
	else
		_files
	fi
}
if [ "$funcstack[1]" = "_tickctl" ]; then
	_tickctl "$@"
else
	compdef _tickctl tickctl
fi
`,
}
