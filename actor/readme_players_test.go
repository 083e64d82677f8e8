package actor_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestREADMEPlayersBuilds: the game of the README's "Players" (the game guide) builds against
// this package as it is (go build with an overlay: nothing is written to the tree).
func TestREADMEPlayersBuilds(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n### Players\n")
	_, code, ok2 := strings.Cut(section, "\n```go\n")
	code, _, ok3 := strings.Cut(code, "\n```\n")
	if !ok || !ok2 || !ok3 || !strings.HasPrefix(code, "package raid\n") {
		t.Fatal(`README.md: no "### Players" section with a go block holding package raid`)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "raid.go")
	// The block is a Logic but for its Kind: check that it is one.
	check := code + "\nvar _ interface {\n\tactor.Logic\n\tactor.PlayerJoiner\n\tactor.PlayerLeaver\n\tactor.PresenceTimeout\n} = (*Raid)(nil)\n"
	if err := os.WriteFile(src, []byte(check), 0o600); err != nil {
		t.Fatal(err)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	overlay, _ := json.Marshal(map[string]any{"Replace": map[string]string{filepath.Join(wd, "readmeplayers", "raid.go"): src}})
	ov := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(ov, overlay, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "build", "-o", os.DevNull, "-overlay", ov, "./readmeplayers").CombinedOutput()
	if err != nil {
		t.Fatalf("the README's raid does not build: %v\n%s\n%s", err, out, code)
	}
}
