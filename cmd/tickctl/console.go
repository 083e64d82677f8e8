package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/internal/console"
	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/internal/webguard"
)

// tickctl console: the operator console (package internal/console) served over HTTP.

// consoleOpts are the console's own flags (flagDefs below bind them).
var consoleOpts struct {
	listen        string
	insecure      bool
	allowHosts    webguard.Hosts
	tokenRequired bool
	leaseTTL      time.Duration
	leaseMargin   time.Duration
	history       time.Duration
	logJSON       bool
}

func init() {
	flagDefs = append(flagDefs,
		flagDef{"listen", func(fs *flag.FlagSet, _ *globals) {
			fs.StringVar(&consoleOpts.listen, "listen", "127.0.0.1:8080", "serve the console on `HOST:PORT` (default 127.0.0.1:8080; port 0: a free one)")
		}},
		flagDef{"insecure", func(fs *flag.FlagSet, _ *globals) {
			fs.BoolVar(&consoleOpts.insecure, "insecure", false, "let --listen be an address other than loopback; the console then needs a login token,\n"+
				"printed once on stderr as a URL with ?token= (or $"+consoleTokenEnv+"): whoever has it acts with these\n"+
				"NATS credentials. It still serves only its own Host names (--allow-host)")
		}},
		flagDef{"allow-host", func(fs *flag.FlagSet, _ *globals) {
			consoleOpts.allowHosts = nil
			fs.Var(&consoleOpts.allowHosts, "allow-host", "also serve requests for this Host `NAME` (repeatable, comma-separated; IP addresses, localhost\n"+
				"and --listen's host are always served, any other name is refused: a DNS-rebinding page cannot drive the console)")
		}},
		flagDef{"token-required", func(fs *flag.FlagSet, _ *globals) {
			fs.BoolVar(&consoleOpts.tokenRequired, "token-required", false, "need the login token on loopback too (off loopback it always is; so it is when\n"+
				"$"+consoleTokenEnv+" is set)")
		}},
		flagDef{"lease-ttl", func(fs *flag.FlagSet, _ *globals) {
			fs.DurationVar(&consoleOpts.leaseTTL, "lease-ttl", 2*time.Second, "the nodes' lease TTL (`D`, tickd --lease; default 2s): a node not renewed for\n"+
				"--lease-ttl minus --lease-margin is shown self-fenced")
		}},
		flagDef{"lease-margin", func(fs *flag.FlagSet, _ *globals) {
			fs.DurationVar(&consoleOpts.leaseMargin, "lease-margin", 500*time.Millisecond, "the nodes' lease margin (`D`, default 500ms)")
		}},
		flagDef{"history", func(fs *flag.FlagSet, _ *globals) {
			fs.DurationVar(&consoleOpts.history, "history", 5*time.Minute, "how far back the lateness chart goes (`D`, default 5m)")
		}},
		flagDef{"log-json", func(fs *flag.FlagSet, _ *globals) {
			fs.BoolVar(&consoleOpts.logJSON, "log-json", false, "log JSON lines (slog) on stderr instead of text")
		}},
	)
}

// consoleVerb is `tickctl console`.
var consoleVerb = &verb{path: "console", args: "[--listen 127.0.0.1:8080]", timeout: -1,
	flags: []string{"listen", "insecure", "allow-host", "token-required", "lease-ttl", "lease-margin", "history", "max-moves", "tolerance", "log-json"},
	short: "the operator console in a browser: leader, nodes, a grid of every shard by owner, moves,\n" +
		"lateness, a timeline of failovers and hand-offs, and the operator verbs as buttons",
	long: "Serves a live page (updated from watches of the control bucket, pushed as Server-Sent Events)\n" +
		"until Ctrl-C. Its buttons call what tickctl drain, undrain, move, pin, unpin and rebalance call\n" +
		"(a rebalance shows its dry-run plan first, and applies that plan once confirmed), and each\n" +
		"appends an entry to the audit stream with via=console, as these NATS credentials' user.\n" +
		"With observer credentials the page shows everything and the buttons are refused by the server.\n" +
		"Off loopback (--insecure) it needs a login token, printed once on stderr as http://HOST:PORT/?token=...\n" +
		"(opening it sets a cookie), or sent as Authorization: Bearer TOKEN; $" + consoleTokenEnv + " supplies your own.\n" +
		"--json prints the URL as {\"url\": ...}. Example:\n" +
		"  tickctl console --listen 127.0.0.1:8080 --creds operator.creds   # then open http://127.0.0.1:8080/",
	check: func(g *globals, _ []string) error {
		host, _, err := net.SplitHostPort(consoleOpts.listen)
		if err != nil {
			return usageError{fmt.Sprintf("--listen %q: want HOST:PORT", consoleOpts.listen)}
		}
		if !natsserver.Loopback(host) && !consoleOpts.insecure {
			return usageError{fmt.Sprintf("--listen %s is not a loopback address: whoever reaches the console and has its "+
				"login token could drain nodes with your credentials; add --insecure if that is what you want (the token is printed at start)", consoleOpts.listen)}
		}
		if consoleOpts.leaseTTL <= consoleOpts.leaseMargin || consoleOpts.leaseMargin < 0 {
			return usageError{"--lease-ttl must be longer than --lease-margin (and the margin not negative)"}
		}
		if consoleOpts.history <= 0 {
			return usageError{"--history must be positive"}
		}
		if g.maxMoves < 1 {
			return usageError{"--max-moves must be at least 1"}
		}
		if g.tolerance < 0 {
			return usageError{"--tolerance must not be negative"}
		}
		return nil
	},
	run: func(ctx context.Context, c *cli, _ []string) error { return c.console(ctx) },
}

func (c *cli) console(ctx context.Context) error {
	// The console outlives a refused request (observer credentials clicking drain: that request
	// fails, the page goes on) and any --timeout: it ends on Ctrl-C or SIGTERM only.
	ctx, stop := signal.NotifyContext(context.WithoutCancel(ctx), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var h slog.Handler = slog.NewTextHandler(os.Stderr, nil)
	if consoleOpts.logJSON {
		h = slog.NewJSONHandler(os.Stderr, nil)
	}
	log := slog.New(h).With("component", "console")
	ln, err := net.Listen("tcp", consoleOpts.listen)
	if err != nil {
		return fmt.Errorf("console: %w", err)
	}
	defer ln.Close()
	guard, err := consoleGuard(webguard.Addr(consoleOpts.listen, ln.Addr()), log)
	if err != nil {
		return err
	}
	con, err := console.New(ctx, console.Config{Store: c.st, NC: c.nc, Creds: c.g.creds, LeaseTTL: consoleOpts.leaseTTL,
		LeaseMargin: consoleOpts.leaseMargin, History: consoleOpts.history, MaxMoves: c.g.maxMoves, Tolerance: c.g.tolerance, Log: log,
		Guard: guard})
	if err != nil {
		return err
	}
	// A refused request (a permission violation) comes back on the connection: end that action at
	// once with the reason, and keep serving.
	c.nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			con.Refused(permissionError{err: err, creds: c.g.creds})
			return
		}
		log.Warn("NATS connection error", "err", err)
	})
	srv := &http.Server{Handler: con.Handler(), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	url := "http://" + ln.Addr().String() + "/"
	if c.g.json {
		_ = json.NewEncoder(c.out).Encode(map[string]string{"url": url})
	} else {
		fmt.Fprintf(c.out, "console on %s (Ctrl-C to stop)\n", url)
	}
	log.Info("console serving", "url", url, "cluster_shards", c.cl.Shards, "epoch", c.cl.Epoch)
	select {
	case <-ctx.Done():
	case err := <-served:
		return fmt.Errorf("console: %w", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	log.Info("console stopped")
	return nil
}

// consoleTokenEnv supplies the console's login token instead of a random one.
const consoleTokenEnv = "TICKFENCE_CONSOLE_TOKEN"

// consoleGuard is the console's guard on addr (the bound address): its Host names, and its login
// token off loopback, with --token-required or $TICKFENCE_CONSOLE_TOKEN (logged once on log).
func consoleGuard(addr string, log *slog.Logger) (*webguard.Guard, error) {
	return webguard.New(webguard.Options{Name: "console", Addr: addr, AllowHosts: consoleOpts.allowHosts, AllowFlag: "tickctl console --allow-host",
		TokenEnv: consoleTokenEnv, TokenRequired: consoleOpts.tokenRequired, Log: log})
}
