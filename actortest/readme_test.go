package actortest_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestREADMESnippetPasses: the test file of the README's "Testing your game" builds against this
// package as it is, and passes (go test -c with an overlay: nothing is written to the tree).
func TestREADMESnippetPasses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a test binary")
	}
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n### Testing your game\n")
	_, code, ok2 := strings.Cut(section, "\n```go\n")
	code, _, ok3 := strings.Cut(code, "\n```\n")
	if !ok || !ok2 || !ok3 || !strings.HasPrefix(code, "package ") || !strings.Contains(code, "func Test") {
		t.Fatal(`README.md: no "### Testing your game" section with a go block holding a test file`)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "readme_test.go")
	if err := os.WriteFile(src, []byte(code+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	overlay, _ := json.Marshal(map[string]any{"Replace": map[string]string{filepath.Join(wd, "readmecheck", "readme_test.go"): src}})
	ov := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(ov, overlay, 0o600); err != nil {
		t.Fatal(err)
	}
	// Built with -c and run from here: the package's directory exists only in the overlay.
	bin := filepath.Join(dir, "readme.test")
	out, err := exec.Command("go", "test", "-c", "-vet=off", "-o", bin, "-overlay", ov, "./readmecheck").CombinedOutput()
	if err != nil {
		t.Fatalf("the README's test does not build: %v\n%s\n%s", err, out, code)
	}
	cmd := exec.Command(bin, "-test.v")
	cmd.Dir = dir
	if out, err = cmd.CombinedOutput(); err != nil {
		t.Fatalf("the README's test fails: %v\n%s\n%s", err, out, code)
	}
	if !strings.Contains(string(out), "--- PASS: Test") {
		t.Fatalf("the README's test ran no test:\n%s", out)
	}
}
