package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/tickfence/tickfence/auth"
)

// authCmd runs tickctl auth init DIR and tickctl auth user DIR ROLE NAME (no NATS needed).
func authCmd(g globals, args []string, out io.Writer) error {
	switch {
	case len(args) == 2 && args[0] == "init":
		files, err := auth.Init(args[1])
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
			tf, err := auth.InitTLS(args[1], hosts)
			if err != nil {
				return err
			}
			files = append(files, tf...)
		}
		for _, f := range files {
			fmt.Fprintln(out, "wrote", f)
		}
		fmt.Fprintf(out, "start the server with tickd --auth %s (embedded) or tickd server --auth %s; give each process its "+
			"role's file with --creds (or NATS_CREDS); keep operator.nk and account.nk secret (they sign new users)\n", args[1], args[1])
		return nil
	case len(args) == 4 && args[0] == "user":
		r, err := auth.ParseRole(args[2])
		if err != nil {
			return usageError{err.Error()}
		}
		f, err := auth.NewUser(args[1], r, args[3])
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "wrote %s (role %s, replies under %s)\n", f, r, auth.InboxPrefix(args[3]))
		return nil
	}
	return usageError{"want auth init <dir> or auth user <dir> <role> <name>"}
}
