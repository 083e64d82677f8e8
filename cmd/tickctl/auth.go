package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/tickfence/tickfence/auth"
)

// authInit runs tickctl auth init DIR [--tls [--hosts h1,h2]] (no NATS needed).
func authInit(g globals, args []string, out io.Writer) error {
	if g.hosts != "" && !g.tls {
		return usageError{"--hosts goes with --tls"}
	}
	files, err := auth.Init(args[0])
	if err != nil {
		return err
	}
	if g.tls {
		var hosts []string
		for h := range strings.SplitSeq(g.hosts, ",") {
			if h = strings.TrimSpace(h); h != "" {
				hosts = append(hosts, h)
			}
		}
		tf, err := auth.InitTLS(args[0], hosts)
		if err != nil {
			return err
		}
		files = append(files, tf...)
	}
	for _, f := range files {
		fmt.Fprintln(out, "wrote", f)
	}
	fmt.Fprintf(out, "start the server with tickd --auth %s (embedded) or tickd server --auth %s; give each process its "+
		"role's file with --creds (or NATS_CREDS); keep operator.nk, account.nk, players.nk and sys.nk secret (they sign "+
		"accounts and users), and sys.creds (it changes accounts on the running servers: tickctl auth revoke)\n", args[0], args[0])
	return nil
}

// authCert runs tickctl auth cert DIR NAME (no NATS needed).
func authCert(_ globals, args []string, out io.Writer) error {
	cert, key, err := auth.NewClientCert(args[0], args[1])
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "wrote %s and %s: present them with --tls-cert %s --tls-key %s (and --tls-ca %s)\n",
		cert, key, cert, key, filepath.Join(args[0], auth.TLSCA))
	return nil
}

// authUser runs tickctl auth user DIR ROLE NAME [--expires WHEN] [--trusted] (no NATS needed).
func authUser(g globals, args []string, out io.Writer) error {
	r, err := auth.ParseRole(args[1])
	if err != nil {
		return usageError{err.Error()}
	}
	now := time.Now()
	expires, err := parseExpiry(g.expires, now)
	if err != nil {
		return usageError{err.Error()}
	}
	if err := stillValid(args[0], args[2], now); err != nil {
		return err
	}
	f, err := auth.NewUserWith(args[0], r, args[2], auth.UserOptions{Trusted: g.trusted, Expires: expires})
	if err != nil {
		return err
	}
	what := fmt.Sprintf("role %s, replies under %s", r, auth.InboxPrefix(args[2]))
	if g.trusted {
		what += ", trusted to name the player it acts for"
	}
	if expires.IsZero() {
		what += "; never expires: tickctl auth revoke ends it"
	} else {
		what += fmt.Sprintf("; expires %s, in %s", expires.UTC().Format(time.RFC3339), expires.Sub(now).Round(time.Second))
	}
	fmt.Fprintf(out, "wrote %s (%s)\n", f, what)
	return nil
}
