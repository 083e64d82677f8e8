// Package auth makes NATS enforce tickfence's trust boundaries and roles (DESIGN 9).
//
// Two accounts separate the two sides, the way NATS separates tenants. TICKFENCE, the trusted
// account, holds the streams and the users that run or operate the cluster: node, operator,
// observer, admin and effects, each with the narrowest subject permissions that let it work.
// PLAYERS, the untrusted account, holds gateways and players; it reaches only what TICKFENCE
// exports: the command services and the frames (tickfence.out.>, and tickfence.to.>, the frames for
// one player). A player's credential may send commands only on its own subject,
// tickfence.play.<S>.<id>.<its name>, so the subject — which the server authorises — names the
// player, and may subscribe the frames for one player only under its own name
// (tickfence.to.<S>.<id>.<its name>[.<topic>]); a trusted gateway's sends on tickfence.cmd.> and names
// the player it acts for.
// Nothing else of the cluster exists for it: no bucket, no stream, no JetStream API, and no way
// to aim a node's answer anywhere but back at the requester (the server rewrites reply subjects
// of requests that cross accounts).
//
// Credentials are NATS's decentralized JWTs: one operator, a system account and the two accounts,
// whose users carry their role's permissions signed into their JWT. Init writes a directory with
// one .creds file per role (what nats.go's UserCredentials and the nats CLI's --creds read), the
// keys that sign more users (NewUser: a second gateway, a player, a node of its own) and
// server.conf, a nats-server configuration with a resolver preloaded with the accounts, which
// enforces them. tickd --auth DIR (the embedded server and tickd server) loads the same
// directory (ServerOptions).
//
// Every user receives replies only under its own inbox prefix, _INBOX.<user name> (InboxPrefix):
// a client must connect with nats.CustomInboxPrefix(InboxPrefix(name)) — ClientOptions does it
// from the credentials file — so that one gateway cannot subscribe to another's replies. Nodes
// answer commands with narrow publish rights (the server's response subjects, _R_.>, and the
// command inboxes of the trusted account, _INBOX.*.cmd.>), never with allow_responses, and only
// on reply subjects that are inboxes (natscmd.InboxReply).
package auth

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/conf"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// Role is what a credential may do (DESIGN 9).
type Role string

// The four roles.
const (
	// Node runs shards and may hold the coordinator: reads and writes the data buckets and its
	// control keys, publishes frames, effects and replies, serves commands. It is data-plane only:
	// it creates, updates, deletes or purges no bucket or stream (an admin makes them: tickctl
	// cluster init) and never writes the cluster record.
	Node Role = "node"
	// Gateway sends commands, receives its own replies and watches frames: nothing else. It lives
	// in the PLAYERS account: its commands reach the nodes through the command service, carrying
	// its identity. An untrusted gateway (a player's browser, a player's own client) is the player
	// it is named after; a trusted one (UserOptions.Trusted: the studio's own gateway, Init's
	// gateway.creds) may name the player it acts for.
	Gateway Role = "gateway"
	// Operator reads everything and writes the control plane's placement inputs (move, drain,
	// pin, weight), and sends commands like a gateway; never an instance record or a shard.
	Operator Role = "operator"
	// Observer reads the control bucket and the records; writes nothing.
	Observer Role = "observer"
	// Admin runs tickctl cluster init, restore and gc: cluster init makes the buckets and streams
	// (no other role may shape storage), a restore makes, seals and drops buckets and writes a
	// new epoch's records, gc deletes blobs — more than an operator may (it never writes a
	// record) and than a node may (it never deletes a bucket). Keep its file offline.
	Admin Role = "admin"
	// Effects is a game's effect consumer (examples/loot): it reads the effects stream through
	// durable consumers of its own and acknowledges what it applied; it writes no record and
	// sends no command.
	Effects Role = "effects"
)

// Roles are the roles, in the order Init writes them.
var Roles = []Role{Node, Gateway, Operator, Observer, Admin, Effects}

// ParseRole reads a role's name.
func ParseRole(s string) (Role, error) {
	if r := Role(s); slices.Contains(Roles, r) {
		return r, nil
	}
	return "", fmt.Errorf("unknown role %q: want node, gateway, operator, observer, admin or effects", s)
}

// Account is the name of the trusted account: tickfence's streams and its trusted users.
const Account = "TICKFENCE"

// PlayersAccount is the name of the untrusted account: gateways and players (DESIGN 9).
const PlayersAccount = "PLAYERS"

// TrustedTag is the JWT tag of a trusted gateway: one that may name the player it acts for.
const TrustedTag = "trusted"

// The services and streams the trusted account exports to the players' account.
const (
	CommandService = "tickfence.cmd.>"  // the trusted senders' command service (trusted gateways)
	PlayerService  = "tickfence.play.>" // the players' command service: each player publishes only under its own name
	FrameStream    = "tickfence.out.>"  // the frames
	PlayerFrames   = "tickfence.to.>"   // the frames for one player each; a player may subscribe its own only
)

// Files in an auth directory.
const (
	ServerConf  = "server.conf"  // the nats-server configuration that enforces the roles
	operatorKey = "operator.nk"  // the operator's seed: signs accounts
	accountKey  = "account.nk"   // the TICKFENCE account's seed: signs its users (NewUser)
	playersKey  = "players.nk"   // the PLAYERS account's seed: signs gateways and players (NewUser)
	operatorJWT = "operator.jwt" // the operator's JWT (also inside server.conf)
)

// InboxPrefix is the prefix of the reply subjects a user may receive: _INBOX.<name>.
func InboxPrefix(name string) string { return "_INBOX." + name }

// CredsFile is the credentials file of user name in dir.
func CredsFile(dir, name string) string { return filepath.Join(dir, name+".creds") }

var validName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Init creates dir (which must not hold an auth directory already) with a new operator, system
// account and TICKFENCE account, one credentials file per role named after it (node.creds,
// gateway.creds, operator.creds, observer.creds, admin.creds, effects.creds; mode 0600), the
// system account's user sys.creds (it pushes revocations: Revoke, Push) and server.conf. It
// returns the files written.
func Init(dir string) ([]string, error) {
	if _, err := os.Stat(filepath.Join(dir, accountKey)); err == nil {
		return nil, fmt.Errorf("%s already holds credentials (%s): remove it first, or issue more users with NewUser", dir, accountKey)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	op, err := nkeys.CreateOperator()
	if err != nil {
		return nil, err
	}
	sys, err := nkeys.CreateAccount()
	if err != nil {
		return nil, err
	}
	acc, err := nkeys.CreateAccount()
	if err != nil {
		return nil, err
	}
	players, err := nkeys.CreateAccount()
	if err != nil {
		return nil, err
	}
	opPub, _ := op.PublicKey()
	sysPub, _ := sys.PublicKey()
	accPub, _ := acc.PublicKey()
	playersPub, _ := players.PublicKey()

	oc := jwt.NewOperatorClaims(opPub)
	oc.Name = "tickfence"
	oc.SystemAccount = sysPub
	opJWT, err := oc.Encode(op)
	if err != nil {
		return nil, err
	}
	sc := jwt.NewAccountClaims(sysPub)
	sc.Name = "SYS"
	sysJWT, err := sc.Encode(op)
	if err != nil {
		return nil, err
	}
	ac := jwt.NewAccountClaims(accPub)
	ac.Name = Account
	// JetStream on, no limits of its own (the servers' limits apply).
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1, MaxAckPending: -1,
		MemoryMaxStreamBytes: -1, DiskMaxStreamBytes: -1}
	// What the players' account may reach, and nothing else: commands (one answer each) and frames.
	ac.Exports.Add(&jwt.Export{Name: "commands", Subject: CommandService, Type: jwt.Service, ResponseType: jwt.ResponseTypeSingleton},
		&jwt.Export{Name: "player-commands", Subject: PlayerService, Type: jwt.Service, ResponseType: jwt.ResponseTypeSingleton},
		&jwt.Export{Name: "frames", Subject: FrameStream, Type: jwt.Stream},
		&jwt.Export{Name: "player-frames", Subject: PlayerFrames, Type: jwt.Stream})
	accJWT, err := ac.Encode(op)
	if err != nil {
		return nil, err
	}
	pc := jwt.NewAccountClaims(playersPub)
	pc.Name = PlayersAccount
	// No Share: the identity of a command is its subject (a player publishes only under its own
	// name), not the Nats-Request-Info header Share would add, which a client can forge around
	// (shard/natscmd/sender.go).
	pc.Imports.Add(&jwt.Import{Name: "commands", Subject: CommandService, Account: accPub, Type: jwt.Service},
		&jwt.Import{Name: "player-commands", Subject: PlayerService, Account: accPub, Type: jwt.Service},
		&jwt.Import{Name: "frames", Subject: FrameStream, Account: accPub, Type: jwt.Stream},
		&jwt.Import{Name: "player-frames", Subject: PlayerFrames, Account: accPub, Type: jwt.Stream})
	playersJWT, err := pc.Encode(op)
	if err != nil {
		return nil, err
	}
	var written []string
	write := func(name string, data []byte) error {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			return err
		}
		written = append(written, p)
		return nil
	}
	opSeed, _ := op.Seed()
	accSeed, _ := acc.Seed()
	if err := write(operatorKey, append(opSeed, '\n')); err != nil {
		return nil, err
	}
	// The system account's key signs sys.creds, the user that pushes account updates (a
	// revocation) to running servers: tickctl auth revoke, auth push.
	sysSeed, _ := sys.Seed()
	if err := write(sysKey, append(sysSeed, '\n')); err != nil {
		return nil, err
	}
	if err := write(accountKey, append(accSeed, '\n')); err != nil {
		return nil, err
	}
	playersSeed, _ := players.Seed()
	if err := write(playersKey, append(playersSeed, '\n')); err != nil {
		return nil, err
	}
	if err := write(operatorJWT, []byte(opJWT+"\n")); err != nil {
		return nil, err
	}
	cfg := fmt.Sprintf(`# tickfence roles (DESIGN 9), made by tickctl auth init on %s.
# Load it in nats-server with "include" or run nats-server -c on a file that includes it, beside
# the server's own settings (jetstream, listen, cluster); tickd --auth DIR and tickd server --auth DIR
# read it themselves. Users' permissions are in their JWTs (the .creds files), signed by the
# TICKFENCE (trusted) or PLAYERS (gateways, players) account: adding a user needs no change here.
operator: %q
system_account: %s
# The "full" resolver keeps the account JWTs in a directory of each server's own and takes updates
# from the system account without a restart (tickctl auth revoke and auth push send them as
# sys.creds); a newer JWT it holds wins over an older preload below. dir is relative to the
# server's working directory (as nsc writes it): give each server its own, e.g. beside its
# JetStream store_dir.
resolver: {
  type: full
  dir: "./jwt"
}
resolver_preload: {
  %s: %q
  %s: %q
  %s: %q
}
`, time.Now().UTC().Format(time.RFC3339), opJWT, sysPub, sysPub, sysJWT, accPub, accJWT, playersPub, playersJWT)
	if err := write(ServerConf, []byte(cfg)); err != nil {
		return nil, err
	}
	p, err := newSystemUser(dir, sys)
	if err != nil {
		return nil, err
	}
	written = append(written, p)
	for _, r := range Roles {
		// Init's gateway.creds is the studio's own gateway: trusted to name its players.
		p, err := NewUserWith(dir, r, string(r), UserOptions{Trusted: r == Gateway})
		if err != nil {
			return nil, err
		}
		written = append(written, p)
	}
	return written, nil
}

// NewUser signs a new user of role r named name (its inbox prefix: InboxPrefix(name)) with dir's
// account key (a gateway's: the players' account) and writes its credentials to
// CredsFile(dir, name), mode 0600. Several gateways each get a name of their own, so none
// receives another's replies. A gateway made here is untrusted: it is the player it is named
// after (NewUserWith makes a trusted one).
func NewUser(dir string, r Role, name string) (string, error) {
	return NewUserWith(dir, r, name, UserOptions{})
}

// UserOptions are a new user's options beyond its role and name.
type UserOptions struct {
	// Trusted marks a gateway that may name the player it acts for (the TrustedTag tag). Only
	// for gateways.
	Trusted bool
	// Expires, if not zero, is when the credential stops being accepted (the JWT's expiry).
	Expires time.Time
}

// NewUserWith is NewUser with options.
func NewUserWith(dir string, r Role, name string, o UserOptions) (string, error) {
	if _, err := ParseRole(string(r)); err != nil {
		return "", err
	}
	if !validName.MatchString(name) {
		return "", fmt.Errorf("user name %q: want 1-64 of A-Z a-z 0-9 _ - (it is a subject token of its inbox)", name)
	}
	if name == SystemUser {
		return "", fmt.Errorf("user name %q is the system account's user (%s.creds, made by tickctl auth init): choose another", name, SystemUser)
	}
	if o.Trusted && r != Gateway {
		return "", fmt.Errorf("only a gateway can be trusted (to name the player it acts for), not a %s", r)
	}
	if !o.Expires.IsZero() && !o.Expires.After(time.Now()) {
		return "", fmt.Errorf("expiry %s is not in the future", o.Expires.Format(time.RFC3339))
	}
	if err := nameInUse(dir, name, time.Now()); err != nil {
		return "", err
	}
	keyFile := accountKey
	if r == Gateway {
		keyFile = playersKey
	}
	seed, err := os.ReadFile(filepath.Join(dir, keyFile))
	if errors.Is(err, fs.ErrNotExist) && keyFile == playersKey {
		return "", fmt.Errorf("%s has no players' account (%s): it was made before gateways moved to their own account; make a new directory with tickctl auth init and restart the servers with it", dir, playersKey)
	}
	if err != nil {
		return "", fmt.Errorf("the account key (made by tickctl auth init): %w", err)
	}
	acc, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(seed))))
	if err != nil {
		return "", fmt.Errorf("%s: %w", keyFile, err)
	}
	u, err := nkeys.CreateUser()
	if err != nil {
		return "", err
	}
	uPub, _ := u.PublicKey()
	uc := jwt.NewUserClaims(uPub)
	uc.Name = name
	uc.Tags.Add("role:" + string(r))
	if o.Trusted {
		uc.Tags.Add(TrustedTag)
	}
	if !o.Expires.IsZero() {
		uc.Expires = o.Expires.Unix()
	}
	p := rolePerms(r, name, o.Trusted)
	uc.Pub.Allow.Add(p.pubAllow...)
	uc.Pub.Deny.Add(p.pubDeny...)
	uc.Sub.Allow.Add(p.subAllow...)
	uc.Sub.Deny.Add(p.subDeny...)
	if p.subs > 0 {
		uc.Limits.Subs = p.subs
	}
	if p.payload > 0 {
		uc.Limits.Payload = p.payload
	}
	if p.responses {
		uc.Resp = &jwt.ResponsePermission{MaxMsgs: 1, Expires: 5 * time.Minute}
	}
	token, err := uc.Encode(acc)
	if err != nil {
		return "", err
	}
	uSeed, _ := u.Seed()
	creds, err := jwt.FormatUserConfig(token, uSeed)
	if err != nil {
		return "", err
	}
	if err := keepIssued(dir, name, token); err != nil {
		return "", err
	}
	path := CredsFile(dir, name)
	if err := os.WriteFile(path, creds, 0o600); err != nil {
		return "", err
	}
	return path, os.Chmod(path, 0o600)
}

// User is what a credentials file says about its user.
type User struct {
	Name    string // the JWT's name: the inbox prefix is InboxPrefix(Name)
	Role    Role   // from the role tag ("" if it has none)
	Trusted bool   // a trusted gateway (the TrustedTag tag)

	servesPlayers bool      // a node's: it may subscribe players' commands (tickfence.play.>)
	playerFrames  bool      // a node's: it may publish frames for one player (tickfence.to.>)
	Expires       time.Time // zero: never
}

// ReadCreds reads a credentials file's user.
func ReadCreds(file string) (User, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return User{}, err
	}
	token, err := jwt.ParseDecoratedJWT(b)
	if err != nil {
		return User{}, fmt.Errorf("credentials %s: %w", file, err)
	}
	uc, err := jwt.DecodeUserClaims(token)
	if err != nil {
		return User{}, fmt.Errorf("credentials %s: %w", file, err)
	}
	u := User{Name: uc.Name, servesPlayers: slices.Contains(uc.Sub.Allow, playCmds), playerFrames: slices.Contains(uc.Pub.Allow, privFrames)}
	for _, t := range uc.Tags {
		if r, ok := strings.CutPrefix(t, "role:"); ok {
			u.Role = Role(r)
		}
		if t == TrustedTag {
			u.Trusted = true
		}
	}
	if uc.Expires > 0 {
		u.Expires = time.Unix(uc.Expires, 0)
	}
	if u.Name == "" {
		u.Name = uc.Subject
	}
	return u, nil
}

// LooseMode says why a credentials file's mode is too open ("" if it is not): a group or others
// can read it.
func LooseMode(file string) string {
	fi, err := os.Stat(file)
	if err != nil {
		return ""
	}
	if m := fi.Mode().Perm(); m&0o077 != 0 {
		return fmt.Sprintf("credentials file %s has mode %v: its group or others can read it (chmod 600 %s)", file, m, file)
	}
	return ""
}

// ClientOptions connect as the user of a credentials file: nats.UserCredentials and the user's
// own inbox prefix. warn (if not nil) receives LooseMode's warning.
func ClientOptions(file string, warn func(string)) ([]nats.Option, error) {
	u, err := ReadCreds(file)
	if err != nil {
		return nil, err
	}
	if w := LooseMode(file); w != "" && warn != nil {
		warn(w)
	}
	return []nats.Option{nats.UserCredentials(file), nats.CustomInboxPrefix(InboxPrefix(u.Name))}, nil
}

// CheckNode says whether the credentials file may run node nodeID: a node credential of its own
// (tickctl auth user DIR node n1) only node n1, whose lease is the only one it may write; the
// shared node.creds (user "node") any node; another role none. A file without a role tag (not
// made by Init or NewUser) is not judged: its server decides.
func CheckNode(file, nodeID string) error {
	u, err := ReadCreds(file)
	if err != nil {
		return err
	}
	switch {
	case u.Role == "":
		return nil
	case u.Role != Node:
		return fmt.Errorf("credentials %s are a %s's (user %s): a node needs a node credential (node.creds, or tickctl auth user DIR node %s)", file, u.Role, u.Name, nodeID)
	case u.Name != string(Node) && u.Name != nodeID:
		return fmt.Errorf("credentials %s are node %s's and may write only its lease: run this node as --node-id %s, or give node %s its own (tickctl auth user DIR node %s)", file, u.Name, u.Name, nodeID, nodeID)
	case !u.servesPlayers:
		return fmt.Errorf("credentials %s predate players' own command subjects (tickfence.play.>): this node could not serve players, "+
			"and the gateways of its directory are not told from players; make a new directory with tickctl auth init and restart the servers with it", file)
	}
	return nil
}

// PlayerFramesWarning says why a node on the credentials file cannot send frames to one player
// ("" if it can, or the file is not judged): a node credential made before them may not publish
// on tickfence.to.>, nor does its directory's players' account import them. Such a node still
// runs; it drops those frames (counted as dropped) instead of having the server refuse each.
func PlayerFramesWarning(file string) string {
	u, err := ReadCreds(file)
	if err != nil || u.Role != Node || u.playerFrames {
		return ""
	}
	return fmt.Sprintf("credentials %s predate frames for one player (tickfence.to.>, actor.Frames.PublishTo): this node drops them; "+
		"make a new directory with tickctl auth init and restart the servers with it", file)
}

// CredsFromEnv is the credentials file a flag's default should be: $NATS_CREDS.
func CredsFromEnv() string { return os.Getenv("NATS_CREDS") }

// ServerOptions makes opts enforce the roles of auth directory dir: its trusted operator, system
// account and a resolver preloaded with the accounts of server.conf. With a JetStream store
// directory (opts.StoreDir) the resolver is NATS's "full" one, keeping the account JWTs in
// StoreDir/jwt and taking updates (a revocation: tickctl auth revoke) from the system account
// while running; a JWT it holds that is newer than the preload's wins, so a server restarted with
// an old server.conf keeps a revocation. Without one, a memory resolver.
func ServerOptions(opts *server.Options, dir string) error {
	path := filepath.Join(dir, ServerConf)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("no %s in %s: make one with tickctl auth init %s", ServerConf, dir, dir)
	}
	m, err := conf.ParseFile(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	opJWT, _ := m["operator"].(string)
	sys, _ := m["system_account"].(string)
	pre, _ := m["resolver_preload"].(map[string]any)
	if opJWT == "" || sys == "" || len(pre) == 0 {
		return fmt.Errorf("%s: want operator, system_account and resolver_preload (as tickctl auth init writes)", path)
	}
	oc, err := jwt.DecodeOperatorClaims(opJWT)
	if err != nil {
		return fmt.Errorf("%s: operator: %w", path, err)
	}
	for pub, v := range pre {
		s, _ := v.(string)
		if _, err := jwt.DecodeAccountClaims(s); err != nil {
			return fmt.Errorf("%s: account %s: %w", path, pub, err)
		}
	}
	res, err := accountResolver(opts.StoreDir)
	if err != nil {
		return err
	}
	for pub, v := range pre {
		if err := res.Store(pub, v.(string)); err != nil {
			res.Close()
			return fmt.Errorf("%s: account %s: %w", path, pub, err)
		}
	}
	opts.TrustedOperators = []*jwt.OperatorClaims{oc}
	opts.SystemAccount = sys
	opts.AccountResolver = res
	return nil
}

// Connect connects to url as the user of credentials file creds (ClientOptions; "" connects
// without), the other opts after. A gateway or a player uses package client instead, which
// connects the same way and sends as the player its credential names:
//
//	c, err := client.Dial(ctx, os.Getenv("NATS_URL"), client.Creds(os.Getenv("NATS_CREDS")), client.Shards(256))
func Connect(url, creds string, warn func(string), opts ...nats.Option) (*nats.Conn, error) {
	if creds != "" {
		copts, err := ClientOptions(creds, warn)
		if err != nil {
			return nil, err
		}
		opts = append(copts, opts...)
	}
	return nats.Connect(url, opts...)
}

// The audit stream: tickctl appends one entry per operator action (tickctl audit reads them).
const (
	AuditStream  = "tickfence-audit"
	AuditSubject = "tickfence.audit" // AuditSubject.<verb>
)

// EnsureAuditStream creates the audit stream if it is missing (AuditStreamConfig). Creating it
// takes a right to create streams: with the roles enforced only admin has it (tickctl cluster
// init makes it), so that operators need none.
func EnsureAuditStream(ctx context.Context, js jetstream.JetStream, replicas int) error {
	if _, err := js.Stream(ctx, AuditStream); err == nil {
		return nil
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return err
	}
	_, err := js.CreateStream(ctx, AuditStreamConfig(replicas))
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return nil
	}
	return err
}
