package auth

// Revocation, the system account's user that tells running servers, and the list of a directory's
// credentials.
//
// A user is revoked the NATS way: its account's JWT lists the user's public key with a time, and
// a server refuses every JWT of that key issued at or before it, and closes the connections that
// hold one. Revoke re-signs the account's JWT with the operator key and rewrites server.conf's
// preload; Push sends the new JWT to the running servers as the system account's user (sys.creds)
// on $SYS.REQ.ACCOUNT.<account>.CLAIMS.UPDATE. Every server of a cluster receives it (the system
// account spans the routes) and answers; one with the "full" resolver (ServerOptions, server.conf)
// stores it, so it holds even for an account it has not loaded yet and across a restart with an
// older server.conf.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/conf"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// SystemUser is the name of the system account's user (SystemUser.creds, made by Init): it may
// only push account JWTs to the servers and count them, nothing else of the system account.
const SystemUser = "sys"

// SystemRole is the role tag of the system account's user (not a Role: NewUser makes none).
const SystemRole = "system"

const sysKey = "sys.nk" // the system account's seed: signs sys.creds

// jwtDir is the directory of the full resolver under a server's JetStream store directory.
const jwtDir = "jwt"

// accountResolver is the resolver of an embedded server with JetStream files in storeDir: NATS's
// "full" directory resolver in storeDir/jwt (updates over the system account are stored, a newer
// JWT wins over an older preload), or without storeDir a memory one.
func accountResolver(storeDir string) (server.AccountResolver, error) {
	if storeDir == "" {
		return &server.MemAccResolver{}, nil
	}
	r, err := server.NewDirAccResolver(filepath.Join(storeDir, jwtDir), 0, 0, server.NoDelete)
	if err != nil {
		return nil, fmt.Errorf("account JWT directory: %w", err)
	}
	return r, nil
}

// newSystemUser signs sys.creds with the system account's key: publish the claim updates and the
// server ping, receive replies under its inbox.
func newSystemUser(dir string, sys nkeys.KeyPair) (string, error) {
	u, err := nkeys.CreateUser()
	if err != nil {
		return "", err
	}
	uPub, _ := u.PublicKey()
	uc := jwt.NewUserClaims(uPub)
	uc.Name = SystemUser
	uc.Tags.Add("role:" + SystemRole)
	uc.Pub.Allow.Add(claimUpdateSubject("*"), "$SYS.REQ.CLAIMS.UPDATE", serverPingSubject)
	uc.Sub.Allow.Add(InboxPrefix(SystemUser) + ".>")
	token, err := uc.Encode(sys)
	if err != nil {
		return "", err
	}
	seed, _ := u.Seed()
	creds, err := jwt.FormatUserConfig(token, seed)
	if err != nil {
		return "", err
	}
	path := CredsFile(dir, SystemUser)
	if err := os.WriteFile(path, creds, 0o600); err != nil {
		return "", err
	}
	return path, os.Chmod(path, 0o600)
}

func claimUpdateSubject(account string) string {
	return "$SYS.REQ.ACCOUNT." + account + ".CLAIMS.UPDATE"
}

const serverPingSubject = "$SYS.REQ.SERVER.PING"

// ErrNoSystemUser is an auth directory made before revocations could be pushed: it has no system
// account key (sys.nk) and no sys.creds.
var ErrNoSystemUser = errors.New("this auth directory has no system account user (sys.creds; made by a tickctl auth init " +
	"before revocations could be pushed): running servers learn of a revocation only when restarted with the new server.conf; " +
	"a directory made by a new tickctl auth init (and servers restarted with it) revokes without restarts")

// SystemCreds is the credentials file of dir's system account user, or ErrNoSystemUser.
func SystemCreds(dir string) (string, error) {
	f := CredsFile(dir, SystemUser)
	if _, err := os.Stat(f); errors.Is(err, fs.ErrNotExist) {
		return "", ErrNoSystemUser
	} else if err != nil {
		return "", err
	}
	return f, nil
}

// serverConf is an auth directory's server.conf: its text and the accounts it preloads.
type serverConf struct {
	path     string
	text     string
	system   string            // the system account's public key
	accounts map[string]string // public key → account JWT
}

func readServerConf(dir string) (*serverConf, error) {
	path := filepath.Join(dir, ServerConf)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no %s in %s: not an auth directory (make one with tickctl auth init)", ServerConf, dir)
	}
	if err != nil {
		return nil, err
	}
	m, err := conf.Parse(string(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	sc := &serverConf{path: path, text: string(b), accounts: map[string]string{}}
	sc.system, _ = m["system_account"].(string)
	pre, _ := m["resolver_preload"].(map[string]any)
	for pub, v := range pre {
		if s, ok := v.(string); ok {
			sc.accounts[pub] = s
		}
	}
	if len(sc.accounts) == 0 {
		return nil, fmt.Errorf("%s: no resolver_preload (as tickctl auth init writes)", path)
	}
	return sc, nil
}

// accountName is the name of the account with public key pub in server.conf ("" if not there).
func (sc *serverConf) accountName(pub string) string {
	if t, ok := sc.accounts[pub]; ok {
		if ac, err := jwt.DecodeAccountClaims(t); err == nil {
			return ac.Name
		}
	}
	return ""
}

// replace writes server.conf with the JWT of account pub replaced by t (atomically, mode 0600).
func (sc *serverConf) replace(pub, t string) error {
	old := sc.accounts[pub]
	if old == "" || strings.Count(sc.text, old) != 1 {
		return fmt.Errorf("%s: the JWT of account %s is not in it exactly once: edit by hand?", sc.path, pub)
	}
	text := strings.Replace(sc.text, old, t, 1)
	tmp := sc.path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, sc.path); err != nil {
		os.Remove(tmp)
		return err
	}
	sc.text, sc.accounts[pub] = text, t
	return nil
}

// readUserClaims reads the user JWT of a credentials file.
func readUserClaims(file string) (*jwt.UserClaims, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	token, err := jwt.ParseDecoratedJWT(b)
	if err != nil {
		return nil, fmt.Errorf("credentials %s: %w", file, err)
	}
	uc, err := jwt.DecodeUserClaims(token)
	if err != nil {
		return nil, fmt.Errorf("credentials %s: %w", file, err)
	}
	return uc, nil
}

// issuerAccount is the account that issued a user JWT (its signing key's account if signed by one).
func issuerAccount(uc *jwt.UserClaims) string {
	if uc.IssuerAccount != "" {
		return uc.IssuerAccount
	}
	return uc.Issuer
}

// Revocation is what Revoke did.
type Revocation struct {
	User        string    // the user's name (its credentials file: CredsFile(dir, User))
	Key         string    // the user's public key: what the account lists
	Account     string    // the account's name (TICKFENCE, PLAYERS)
	AccountKey  string    // its public key
	At          time.Time // JWTs of Key issued at or before it are refused
	Already     bool      // it was revoked before: nothing changed
	AccountJWT  string    // the account's JWT with the revocation, for Push
	RevokedJWTs int       // how many keys the account revokes now
}

// Revoke revokes the credential of user name in dir (CredsFile(dir, name)): its public key is
// added to its account's revocations, the account JWT re-signed with the operator key and
// server.conf rewritten with it. Servers learn of it when they restart with the new server.conf,
// or at once from Push. The credentials file stays (List shows it revoked); another user of the
// same name is a new key, not revoked. Revoking a revoked user changes nothing (Already).
func Revoke(dir, name string) (Revocation, error) {
	if name == SystemUser {
		return Revocation{}, fmt.Errorf("%s is the system account's user: make a new directory with tickctl auth init to replace it", name)
	}
	file := userFile(dir, name) // its .creds file, or the JWT NewUser kept when the file left
	uc, err := readUserClaims(file)
	if errors.Is(err, fs.ErrNotExist) {
		return Revocation{}, fmt.Errorf("no credential %s in %s (tickctl auth list %s shows them)", name, dir, dir)
	}
	if err != nil {
		return Revocation{}, err
	}
	sc, err := readServerConf(dir)
	if err != nil {
		return Revocation{}, err
	}
	accPub := issuerAccount(uc)
	accJWT, ok := sc.accounts[accPub]
	if !ok {
		return Revocation{}, fmt.Errorf("%s was signed by account %s, which %s does not hold: a credential of another directory?", file, accPub, sc.path)
	}
	ac, err := jwt.DecodeAccountClaims(accJWT)
	if err != nil {
		return Revocation{}, fmt.Errorf("%s: account %s: %w", sc.path, accPub, err)
	}
	r := Revocation{User: name, Key: uc.Subject, Account: ac.Name, AccountKey: accPub}
	if ac.IsClaimRevoked(uc) {
		r.Already, r.AccountJWT, r.RevokedJWTs = true, accJWT, len(ac.Revocations)
		r.At = time.Unix(ac.Revocations[uc.Subject], 0)
		return r, nil
	}
	op, err := readKey(dir, operatorKey)
	if err != nil {
		return Revocation{}, err
	}
	if opPub, _ := op.PublicKey(); opPub != ac.Issuer {
		return Revocation{}, fmt.Errorf("%s: account %s was signed by operator %s, not by %s's key", sc.path, ac.Name, ac.Issuer, operatorKey)
	}
	// A server keeps the newer of two JWTs of an account by issue time (seconds): the new one
	// must be issued after the one it replaces.
	for time.Now().Unix() <= ac.IssuedAt {
		time.Sleep(50 * time.Millisecond)
	}
	r.At = time.Now()
	if iat := time.Unix(uc.IssuedAt, 0); r.At.Before(iat) { // a clock behind the one that issued it
		r.At = iat
	}
	ac.RevokeAt(uc.Subject, r.At)
	t, err := ac.Encode(op)
	if err != nil {
		return Revocation{}, err
	}
	if err := sc.replace(accPub, t); err != nil {
		return Revocation{}, err
	}
	r.AccountJWT, r.RevokedJWTs = t, len(ac.Revocations)
	return r, nil
}

func readKey(dir, file string) (nkeys.KeyPair, error) {
	seed, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return nil, fmt.Errorf("the operator's key (made by tickctl auth init): %w", err)
	}
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(seed))))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return kp, nil
}

// AccountJWTs are the JWTs of dir's accounts that hold users (TICKFENCE and PLAYERS; not the
// system account), as server.conf preloads them: what Push sends after a Revoke that could not.
func AccountJWTs(dir string) ([]string, error) {
	sc, err := readServerConf(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for pub, t := range sc.accounts {
		if pub != sc.system {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out, nil
}

// PushReply is one server's answer to one account JWT Push sent.
type PushReply struct {
	Server  string `json:"server"`  // the server's name
	Account string `json:"account"` // the account's name
	Applied bool   `json:"applied"` // the server stored it and applied it to the account
	Message string `json:"message"` // what it said
}

// Push sends account JWTs to every server of the cluster nc is connected to, as the system
// account's user (connect with SystemCreds), and returns each server's answers. It first asks the
// servers to count themselves ($SYS.REQ.SERVER.PING), then waits for that many answers per JWT,
// until ctx ends. A server with the full resolver answers "jwt updated"; one with a memory
// resolver (a server.conf of an older tickctl auth init) answers "jwt update skipped" for an
// account it has not loaded (Applied false: it still holds the old JWT, and will load it, until
// restarted with the new server.conf). An error: no server answered.
func Push(ctx context.Context, nc *nats.Conn, accountJWTs ...string) ([]PushReply, error) {
	servers, err := countServers(ctx, nc)
	if err != nil {
		return nil, err
	}
	var out []PushReply
	for _, t := range accountJWTs {
		ac, err := jwt.DecodeAccountClaims(t)
		if err != nil {
			return out, err
		}
		replies, err := gather(ctx, nc, claimUpdateSubject(ac.Subject), []byte(t), len(servers), 0)
		if err != nil {
			return out, err
		}
		seen := map[string]bool{}
		for _, b := range replies {
			var r server.ServerAPIClaimUpdateResponse
			if err := json.Unmarshal(b, &r); err != nil {
				return out, fmt.Errorf("a server's answer to the update of %s: %w", ac.Name, err)
			}
			pr := PushReply{Account: ac.Name}
			if r.Server != nil {
				pr.Server = r.Server.Name
			}
			seen[pr.Server] = true
			switch {
			case r.Error != nil:
				pr.Message = r.Error.Description
			case r.Data != nil:
				pr.Message = r.Data.Message
				pr.Applied = r.Data.Message == "jwt updated"
			}
			out = append(out, pr)
		}
		for _, s := range servers {
			if !seen[s] {
				why := "no answer"
				if err := context.Cause(ctx); err != nil {
					why += ": " + err.Error()
				}
				out = append(out, PushReply{Server: s, Account: ac.Name, Message: why})
			}
		}
	}
	return out, nil
}

// countServers asks every server for its name: the servers of the cluster nc reaches.
func countServers(ctx context.Context, nc *nats.Conn) ([]string, error) {
	replies, err := gather(ctx, nc, serverPingSubject, nil, 0, 300*time.Millisecond)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, b := range replies {
		var r struct {
			Server struct {
				Name string `json:"name"`
			} `json:"server"`
		}
		if json.Unmarshal(b, &r) == nil && !slices.Contains(names, r.Server.Name) {
			names = append(names, r.Server.Name)
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no server answered %s: is %s a system account user of these servers' operator?", serverPingSubject, SystemUser)
	}
	slices.Sort(names)
	return names, nil
}

// gather publishes a request and collects its answers: want of them, or (want 0) until none came
// for quiet after the first; in any case until ctx ends.
func gather(ctx context.Context, nc *nats.Conn, subject string, data []byte, want int, quiet time.Duration) ([][]byte, error) {
	inbox := nc.NewRespInbox()
	ch := make(chan *nats.Msg, 64)
	sub, err := nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest(subject, inbox, data); err != nil {
		return nil, err
	}
	if err := nc.FlushWithContext(ctx); err != nil {
		return nil, err
	}
	var out [][]byte
	var idle <-chan time.Time
	for want == 0 || len(out) < want {
		select {
		case m := <-ch:
			out = append(out, m.Data)
			if quiet > 0 {
				idle = time.After(quiet)
			}
		case <-idle:
			return out, nil
		case <-ctx.Done():
			if len(out) == 0 {
				return nil, fmt.Errorf("no server answered %s: %w", subject, context.Cause(ctx))
			}
			return out, nil
		}
	}
	return out, nil
}

// UserInfo is one credential of an auth directory, as List reports it.
type UserInfo struct {
	Name    string    `json:"name"`
	Role    string    `json:"role"`             // from its role tag
	Account string    `json:"account"`          // TICKFENCE, PLAYERS or SYS
	Trusted bool      `json:"trusted"`          // a trusted gateway
	Expires time.Time `json:"expires,omitzero"` // zero (left out): never
	Expired bool      `json:"expired"`
	Revoked bool      `json:"revoked"` // by server.conf's account JWT
	Key     string    `json:"key"`     // the user's public key
	File    string    `json:"file"`
}

// List reads the credentials files of dir (*.creds), sorted by name, each with its account and
// whether server.conf's account JWT revokes it.
func List(dir string) ([]UserInfo, error) {
	sc, err := readServerConf(dir)
	if err != nil {
		return nil, err
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.creds"))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	var out []UserInfo
	for _, f := range files {
		uc, err := readUserClaims(f)
		if err != nil {
			return nil, err
		}
		u, err := ReadCreds(f)
		if err != nil {
			return nil, err
		}
		acc := issuerAccount(uc)
		ui := UserInfo{Name: u.Name, Role: string(u.Role), Account: sc.accountName(acc), Trusted: u.Trusted, Expires: u.Expires,
			Key: uc.Subject, File: f}
		if ui.Account == "" {
			ui.Account = "? " + acc // not an account of this directory
		}
		if !u.Expires.IsZero() && now.Unix() > u.Expires.Unix() { // a server accepts it through its last second
			ui.Expired = true
		}
		if t, ok := sc.accounts[acc]; ok {
			if ac, err := jwt.DecodeAccountClaims(t); err == nil {
				ui.Revoked = ac.IsClaimRevoked(uc)
			}
		}
		out = append(out, ui)
	}
	slices.SortFunc(out, func(a, b UserInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
