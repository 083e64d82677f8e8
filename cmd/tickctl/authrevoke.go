package main

// tickctl auth revoke, auth push and auth list, and auth user's --expires.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/auth"
)

// parseExpiry reads --expires: "" (never: the zero time), a duration from now (720h, or whole
// days: 90d) or an RFC 3339 time, which must be after now.
func parseExpiry(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	var t time.Time
	if d, err := time.ParseDuration(s); err == nil {
		t = now.Add(d)
	} else if n, err := strconv.Atoi(strings.TrimSuffix(s, "d")); err == nil && strings.HasSuffix(s, "d") {
		t = now.AddDate(0, 0, n)
	} else if t, err = time.Parse(time.RFC3339, s); err != nil {
		return time.Time{}, fmt.Errorf("--expires %q: want a duration from now (720h, 90d) or a time (2027-01-31T00:00:00Z)", s)
	}
	if !t.After(now) {
		return time.Time{}, fmt.Errorf("--expires %q: not in the future", s)
	}
	return t, nil
}

// stillValid refuses to replace the credentials file of a user that is still valid (neither
// revoked nor expired): the old credential would stay valid with nothing left to revoke it by.
func stillValid(dir, name string, now time.Time) error {
	f := auth.CredsFile(dir, name)
	if _, err := os.Stat(f); err != nil {
		return nil
	}
	users, err := auth.List(dir)
	if err != nil {
		return nil // not an auth directory: NewUserWith says why
	}
	for _, u := range users {
		if u.File == f && !u.Revoked && !u.Expired {
			return fmt.Errorf("%s holds a valid credential of %s (role %s): replacing the file would leave it valid; "+
				"revoke it first (tickctl auth revoke %s %s), or choose another name", f, u.Name, u.Role, dir, name)
		}
	}
	return nil
}

// authRevoke runs tickctl auth revoke DIR NAME: the revocation into server.conf, then pushed.
func authRevoke(g globals, args []string, out io.Writer) error {
	dir, name := args[0], args[1]
	r, err := auth.Revoke(dir, name)
	if err != nil {
		return err
	}
	if r.Already {
		fmt.Fprintf(out, "%s (key %s) was already revoked in account %s since %s; server.conf unchanged, telling the servers again\n",
			name, r.Key, r.Account, r.At.UTC().Format(time.RFC3339))
	} else {
		fmt.Fprintf(out, "revoked %s (key %s) in account %s: every JWT of that key issued up to %s is refused; wrote %s\n",
			name, r.Key, r.Account, r.At.UTC().Format(time.RFC3339), filepath.Join(dir, auth.ServerConf))
	}
	if err := push(g, dir, out, r.AccountJWT); errors.Is(err, auth.ErrNoSystemUser) {
		return fmt.Errorf("the running servers still accept %s until restarted with the new %s: %w", name, auth.ServerConf, err)
	} else if err != nil {
		return fmt.Errorf("%w: the running servers still accept %s until told (tickctl auth push %s --nats URL) or restarted "+
			"with the new %s", err, name, dir, auth.ServerConf)
	}
	fmt.Fprintf(out, "%s is refused from now on: its connections were closed\n", name)
	return nil
}

// authPush runs tickctl auth push DIR: server.conf's accounts to the running servers.
func authPush(g globals, args []string, out io.Writer) error {
	jwts, err := auth.AccountJWTs(args[0])
	if err != nil {
		return err
	}
	if err := push(g, args[0], out, jwts...); err != nil {
		return fmt.Errorf("%w: servers not told keep the accounts they had until restarted with the new %s", err, auth.ServerConf)
	}
	return nil
}

// push connects to --nats as dir's system account user and sends the account JWTs to every
// server, printing each server's answer; an error unless every server applied every JWT.
func push(g globals, dir string, out io.Writer, jwts ...string) error {
	creds, err := auth.SystemCreds(dir)
	if err != nil {
		return err
	}
	opts, err := auth.ClientOptions(creds, func(w string) { fmt.Fprintln(os.Stderr, "tickctl: warning:", w) })
	if err != nil {
		return err
	}
	opts = append(opts, nats.Name("tickctl auth"), nats.Timeout(3*time.Second), nats.MaxReconnects(0))
	if g.tlsCA != "" {
		to, err := auth.TLSClientOptions(g.tlsCA, g.tlsCert, g.tlsKey)
		if err != nil {
			return usageError{err.Error()}
		}
		opts = append(opts, to...)
	} else if g.tlsCert != "" || g.tlsKey != "" {
		return usageError{"--tls-cert and --tls-key need --tls-ca (the CA that signed the server's certificate)"}
	}
	nc, err := nats.Connect(g.natsURL, opts...)
	if err != nil {
		if g.tlsCA != "" {
			err = auth.ExplainTLS(err, g.tlsCert != "")
		}
		return fmt.Errorf("not sent to the servers: connect to %s as %s: %w", g.natsURL, creds, err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	defer cancel()
	replies, err := auth.Push(ctx, nc, jwts...)
	if err != nil {
		return fmt.Errorf("not sent to the servers: %w", err)
	}
	failed := 0
	for _, r := range replies {
		msg := r.Message
		if !r.Applied {
			failed++
			if strings.Contains(msg, "skipped") {
				msg += " (a memory resolver that has not loaded the account: it keeps the old JWT; restart it with the new " +
					auth.ServerConf + ", whose full resolver takes updates)"
			}
		}
		fmt.Fprintf(out, "  server %s, account %s: %s\n", r.Server, r.Account, msg)
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d updates not applied", failed, len(replies))
	}
	return nil
}

// authList runs tickctl auth list DIR [--json].
func authList(g globals, args []string, out io.Writer) error {
	users, err := auth.List(args[0])
	if err != nil {
		return err
	}
	if g.json {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if users == nil {
			users = []auth.UserInfo{}
		}
		return enc.Encode(users)
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tROLE\tACCOUNT\tTRUSTED\tEXPIRES\tSTATUS")
	for _, u := range users {
		trusted, expires, status := "-", "never", "valid"
		if u.Trusted {
			trusted = "yes"
		}
		if !u.Expires.IsZero() {
			expires = u.Expires.UTC().Format(time.RFC3339)
		}
		switch {
		case u.Revoked:
			status = "revoked"
		case u.Expired:
			status = "expired"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", u.Name, u.Role, u.Account, trusted, expires, status)
	}
	return w.Flush()
}
