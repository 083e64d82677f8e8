package auth

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// AuditStreamConfig is the audit stream's configuration with the given replicas: file storage,
// entries kept a year.
func AuditStreamConfig(replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{Name: AuditStream, Subjects: []string{AuditSubject + ".>"},
		Storage: jetstream.FileStorage, Replicas: max(replicas, 1), MaxAge: 365 * 24 * time.Hour}
}

// AuditEntry is one operator action in the audit stream (tickctl's verbs, the console's buttons).
type AuditEntry struct {
	Who    string    `json:"who"`  // the credential's user name ("" without credentials)
	Role   string    `json:"role"` // its role
	What   string    `json:"what"` // the command line's arguments, e.g. "drain n2"
	When   time.Time `json:"when"`
	Result string    `json:"result"` // "ok" or the error
	Host   string    `json:"host,omitempty"`
	// Via names the tool when it is not tickctl's command line: "console".
	Via string `json:"via,omitempty"`
}

// NewAuditEntry is the entry of an action with what (the verb and its arguments) and its result,
// by the user of the credentials file creds (may be ""), on this host, now.
func NewAuditEntry(creds, what string, result error) AuditEntry {
	e := AuditEntry{What: what, When: time.Now().UTC(), Result: "ok"}
	if result != nil {
		e.Result = result.Error()
	}
	if creds != "" {
		if u, err := ReadCreds(creds); err == nil {
			e.Who, e.Role = u.Name, string(u.Role)
		}
	}
	e.Host, _ = os.Hostname()
	return e
}

// RecordAudit appends e to the audit stream under AuditSubject.<verb>. On a cluster made before
// the audit stream (no stream answers), it creates it (one replica) and tries again — which only
// a user who may create streams can (admin, or anyone without the roles); tickctl cluster init
// makes it for everyone else.
func RecordAudit(ctx context.Context, nc *nats.Conn, verb string, e AuditEntry) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	subject := AuditSubject + "." + verb
	_, err = js.Publish(ctx, subject, b)
	if errors.Is(err, jetstream.ErrNoStreamResponse) {
		if err = EnsureAuditStream(ctx, js, 1); err == nil {
			_, err = js.Publish(ctx, subject, b)
		}
	}
	return err
}
