package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

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
		"role's file with --creds (or NATS_CREDS); keep operator.nk and account.nk secret (they sign new users)\n", args[0], args[0])
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

// authUser runs tickctl auth user DIR ROLE NAME (no NATS needed).
func authUser(_ globals, args []string, out io.Writer) error {
	r, err := auth.ParseRole(args[1])
	if err != nil {
		return usageError{err.Error()}
	}
	f, err := auth.NewUser(args[0], r, args[2])
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "wrote %s (role %s, replies under %s)\n", f, r, auth.InboxPrefix(args[2]))
	return nil
}
