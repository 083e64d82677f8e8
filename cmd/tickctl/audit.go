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

// The audit stream: one entry per operator action tickctl runs (issue 14.5); nodes create it.
const (
	auditStream  = auth.AuditStream
	auditSubject = auth.AuditSubject + "." // + the verb
)

// auditEntry is one recorded action.
type auditEntry struct {
	Who    string    `json:"who"`  // the credential's user name ("" without credentials)
	Role   string    `json:"role"` // its role
	What   string    `json:"what"` // the command line's arguments
	When   time.Time `json:"when"`
	Result string    `json:"result"` // "ok" or the error
	Host   string    `json:"host,omitempty"`
}

// audited are the verbs whose every run is recorded.
func audited(pos []string, g globals) bool {
	switch pos[0] {
	case "move", "drain", "undrain", "pin", "unpin", "weight", "restore":
		return true
	case "rebalance":
		return !g.dryRun
	}
	return false
}

// recordAudit appends what was done and how it ended to the audit stream (creating it on first
// use). A failure to record is reported on stderr, never hides the command's own result.
func recordAudit(nc *nats.Conn, g globals, pos []string, result error) {
	e := auditEntry{What: strings.Join(pos, " "), When: time.Now().UTC(), Result: "ok"}
	if result != nil {
		e.Result = result.Error()
	}
	if g.creds != "" {
		if u, err := auth.ReadCreds(g.creds); err == nil {
			e.Who, e.Role = u.Name, string(u.Role)
		}
	}
	e.Host, _ = os.Hostname()
	b, _ := json.Marshal(e)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err == nil {
		_, err = js.Publish(ctx, auditSubject+pos[0], b)
		if errors.Is(err, jetstream.ErrNoStreamResponse) { // a cluster whose nodes predate the audit stream
			if err = auth.EnsureAuditStream(ctx, js, 1); err == nil {
				_, err = js.Publish(ctx, auditSubject+pos[0], b)
			}
		}
	}
	if err != nil {
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
