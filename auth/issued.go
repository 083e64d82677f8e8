package auth

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/jwt/v2"
)

// A name is one user's while any credential of it is valid: a player is its name (its command
// subjects and its inbox carry it), so a second credential of a name would be that player too, or
// could read a trusted gateway's inbox. A .creds file leaves the directory when it is handed to its
// owner, so NewUser keeps a copy of every JWT it signs (no seed: the JWT is public) in
// DIR/issued/NAME.jwt, and refuses a name whose last credential is neither expired nor revoked;
// Revoke finds the key there when the .creds file is gone.

// issuedFile is where NewUser keeps the last JWT it signed for name.
func issuedFile(dir, name string) string { return filepath.Join(dir, "issued", name+".jwt") }

// keepIssued records token as name's last JWT.
func keepIssued(dir, name, token string) error {
	if err := os.MkdirAll(filepath.Join(dir, "issued"), 0o700); err != nil {
		return err
	}
	return os.WriteFile(issuedFile(dir, name), []byte(token+"\n"), 0o600)
}

// userFile is the file holding name's credential: its .creds file, or else its issued JWT.
func userFile(dir, name string) string {
	if f := CredsFile(dir, name); fileExists(f) {
		return f
	}
	return issuedFile(dir, name)
}

func fileExists(f string) bool {
	_, err := os.Stat(f)
	return err == nil
}

// nameInUse is nil, or why name may not be issued again: a credential of it (its .creds file, or
// the last one NewUser signed) is still valid, neither expired nor revoked.
func nameInUse(dir, name string, now time.Time) error {
	sc, err := readServerConf(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // a directory being made (Init), or none: NewUserWith says why
	} else if err != nil {
		return err
	}
	for _, f := range []string{CredsFile(dir, name), issuedFile(dir, name)} {
		uc, err := readUserClaims(f)
		if err != nil {
			continue
		}
		if uc.Expires > 0 && now.Unix() > uc.Expires {
			continue
		}
		if t, ok := sc.accounts[issuerAccount(uc)]; ok {
			if ac, err := jwt.DecodeAccountClaims(t); err == nil && ac.IsClaimRevoked(uc) {
				continue
			}
		}
		return fmt.Errorf("a credential named %s is still valid (key %s, %s): a second one would be the same user (a player is its name); "+
			"revoke it first (tickctl auth revoke %s %s), or choose another name", name, uc.Subject, f, dir, name)
	}
	return nil
}
