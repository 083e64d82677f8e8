package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickfence/tickfence/auth"
)

// The audit stream: one entry per operator action tickctl runs (issue 14.5); tickctl cluster init
// creates it.
const auditStream = auth.AuditStream

// auditEntry is one recorded action (auth.AuditEntry: the console records the same).
type auditEntry = auth.AuditEntry

// audited are the verbs whose every run is recorded.
func audited(pos []string, g globals) bool {
	switch pos[0] {
	case "move", "drain", "undrain", "pin", "unpin", "weight", "restore":
		return true
	case "rebalance":
		return !g.dryRun
	case "instance":
		return len(pos) > 1 && pos[1] == "reload"
	}
	return false
}

// recordAudit appends what was done and how it ended to the audit stream (creating it on first
// use). A failure to record is reported on stderr, never hides the command's own result.
func recordAudit(nc *nats.Conn, g globals, pos []string, result error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := auth.RecordAudit(ctx, nc, pos[0], auth.NewAuditEntry(g.creds, strings.Join(pos, " "), result)); err != nil {
		fmt.Fprintln(os.Stderr, "tickctl: warning: the action was not recorded in the audit stream:", err)
	}
}

// audit prints the last --count entries (default 50).
func (c *cli) audit(ctx context.Context) error {
	js, err := jetstream.New(c.nc)
	if err != nil {
		return err
	}
	s, err := js.Stream(ctx, auditStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return c.done([]auditEntry{}, "no operator action recorded yet")
	}
	if err != nil {
		return err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return err
	}
	n := uint64(c.g.count)
	if n == 0 {
		n = 50
	}
	var entries []auditEntry
	if info.State.Msgs > 0 {
		start := info.State.FirstSeq
		if info.State.LastSeq >= n && info.State.LastSeq-n+1 > start {
			start = info.State.LastSeq - n + 1
		}
		for seq := start; seq <= info.State.LastSeq; seq++ {
			m, err := s.GetMsg(ctx, seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			var e auditEntry
			if json.Unmarshal(m.Data, &e) == nil {
				entries = append(entries, e)
			}
		}
	}
	if c.g.json {
		return c.printJSON(entries)
	}
	tw := c.table()
	fmt.Fprintln(tw, "WHEN\tWHO\tROLE\tWHAT\tRESULT")
	for _, e := range entries {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.When.Format(time.RFC3339), e.Who, e.Role, e.What, e.Result)
	}
	return tw.Flush()
}
