package client_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestREADMEProgramBuilds: the complete program of the README's "Talking to it from Go" builds
// against this package as it is (go build with an overlay: nothing is written to the tree).
func TestREADMEProgramBuilds(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Talking to it from Go\n")
	_, code, ok2 := strings.Cut(section, "\n```go\n")
	code, _, ok3 := strings.Cut(code, "\n```\n")
	if !ok || !ok2 || !ok3 || !strings.HasPrefix(code, "package main\n") {
		t.Fatal(`README.md: no "## Talking to it from Go" section with a go block holding a package main`)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte(code+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	overlay, _ := json.Marshal(map[string]any{"Replace": map[string]string{filepath.Join(wd, "readmecheck", "main.go"): src}})
	ov := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(ov, overlay, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "build", "-o", os.DevNull, "-overlay", ov, "./readmecheck").CombinedOutput()
	if err != nil {
		t.Fatalf("the README's program does not build: %v\n%s\n%s", err, out, code)
	}
}
