package auth_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tickfence/tickfence/auth"
)

// TestNameIsOneUsersWhileValid: a player's name stays taken while its credential is valid, even
// once its .creds file has left the directory (handed to its owner): a second credential of the
// name would be that player (TestReview2SecondCredentialOfAPlayersName, review of issue 33), and
// one named like a trusted gateway would read its inbox. Revoking works without the file, and
// frees the name; an expired credential frees it too.
func TestNameIsOneUsersWhileValid(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "auth")
	if _, err := auth.Init(dir); err != nil {
		t.Fatal(err)
	}
	for _, u := range []struct {
		name    string
		trusted bool
	}{{"alice", false}, {"gw-eu1", true}} {
		if _, err := auth.NewUserWith(dir, auth.Gateway, u.name, auth.UserOptions{Trusted: u.trusted}); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(auth.CredsFile(dir, u.name), filepath.Join(t.TempDir(), u.name+".creds")); err != nil {
			t.Fatal(err)
		}
		if _, err := auth.NewUser(dir, auth.Gateway, u.name); err == nil || !strings.Contains(err.Error(), "still valid") {
			t.Errorf("a second credential named %s while the first is valid and its file is gone: %v", u.name, err)
		}
	}
	if _, err := auth.Revoke(dir, "alice"); err != nil {
		t.Fatalf("revoke alice without her .creds file: %v", err)
	}
	if _, err := auth.NewUser(dir, auth.Gateway, "alice"); err != nil {
		t.Errorf("alice after her credential was revoked: %v", err)
	}
	if _, err := auth.NewUserWith(dir, auth.Gateway, "brief", auth.UserOptions{Expires: time.Now().Add(1100 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.NewUser(dir, auth.Gateway, "brief"); err == nil {
		t.Error("a second brief while the first is valid")
	}
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(3 * time.Second)))
	if _, err := auth.NewUser(dir, auth.Gateway, "brief"); err != nil {
		t.Errorf("brief after its credential expired: %v", err)
	}
}
