// Package docs holds the tests of the documents in this directory.
package docs

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode"
)

// A block of game-guide.md: its fence's language, its text, the line it starts on, and the
// marker before it.
type block struct {
	lang, text string
	line       int
	marker     string // "run", "skip: why", "excerpt FILE", or ""
}

var markerRE = regexp.MustCompile(`^<!-- guide-test: (run|skip: .+|excerpt \S+) -->$`)

// guideBlocks reads the fenced blocks of the guide and the marker on the last non-blank line
// before each.
func guideBlocks(t *testing.T) []block {
	t.Helper()
	f, err := os.Open("game-guide.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var blocks []block
	var cur *block
	prev, n := "", 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n++
		l := sc.Text()
		switch {
		case cur == nil && strings.HasPrefix(l, "```"):
			cur = &block{lang: strings.TrimPrefix(l, "```"), line: n}
			if m := markerRE.FindStringSubmatch(prev); m != nil {
				cur.marker = m[1]
			}
		case cur != nil && l == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.text += l + "\n"
		}
		if strings.TrimSpace(l) != "" {
			prev = l
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur != nil {
		t.Fatalf("game-guide.md:%d: a block that never closes", cur.line)
	}
	return blocks
}

// TestGameGuideBlocks: every sh block of the guide says whether the reader runs it (then
// TestGameGuide does) or why not, and every go block is an excerpt of the file its marker names,
// line for line — a file the guide's own commands build, vet and test (go run, go test, go
// build in examples/raid), so every Go snippet compiles.
func TestGameGuideBlocks(t *testing.T) {
	run := 0
	for _, b := range guideBlocks(t) {
		switch b.lang {
		case "sh":
			if b.marker != "run" && !strings.HasPrefix(b.marker, "skip: ") {
				t.Errorf("game-guide.md:%d: an sh block without <!-- guide-test: run --> or <!-- guide-test: skip: why --> before it", b.line)
			}
			if b.marker == "run" {
				run++
			}
		case "go":
			file, ok := strings.CutPrefix(b.marker, "excerpt ")
			if !ok {
				t.Errorf("game-guide.md:%d: a go block without <!-- guide-test: excerpt FILE --> before it", b.line)
				continue
			}
			src, err := os.ReadFile(filepath.Join("..", file))
			if err != nil {
				t.Errorf("game-guide.md:%d: %v", b.line, err)
				continue
			}
			if !strings.Contains("\n"+string(src), "\n"+b.text) {
				t.Errorf("game-guide.md:%d: the go block is not in %s as it is there (line for line, tabs included):\n%s", b.line, file, b.text)
			}
		case "text", "":
		default:
			if b.marker != "" {
				t.Errorf("game-guide.md:%d: a marker before a %s block", b.line, b.lang)
			}
		}
	}
	if run == 0 {
		t.Error("game-guide.md: no block to run")
	}
	// Its links to files of the tree, and to their headings, lead somewhere.
	guide, _ := os.ReadFile("game-guide.md")
	for _, m := range regexp.MustCompile(`\]\(([^)#]*)(#[^)]*)?\)`).FindAllStringSubmatch(string(guide), -1) {
		file, anchor := m[1], strings.TrimPrefix(m[2], "#")
		if strings.Contains(file, "://") {
			continue
		}
		if file == "" {
			file = "game-guide.md"
		}
		b, err := os.ReadFile(file)
		if fi, serr := os.Stat(file); serr != nil || (anchor != "" && (err != nil || fi.IsDir())) {
			t.Errorf("game-guide.md: the link %s%s leads nowhere", m[1], m[2])
			continue
		}
		if anchor != "" && !slices.Contains(headingAnchors(string(b)), anchor) {
			t.Errorf("game-guide.md: %s has no heading #%s", file, anchor)
		}
	}
}

// headingAnchors are the anchors GitHub makes of a markdown file's headings: lower case, only
// letters, digits, spaces, - and _ kept, spaces made -.
func headingAnchors(md string) []string {
	var out []string
	for _, l := range strings.Split(md, "\n") {
		h := strings.TrimLeft(l, "#")
		if len(h) == len(l) || !strings.HasPrefix(h, " ") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(h)) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		out = append(out, b.String())
	}
	return out
}

// TestGameGuide runs every sh block of the guide marked run, in order, in one bash (set -euo
// pipefail: a command that fails fails the test), in a copy of this tree as a clone gives it
// (the files git knows of, and new ones it does not ignore), as a reader does in one terminal.
// What it changes: 127.0.0.1:4222 becomes a free port (the machine may run another server there),
// NATS_URL is unset at the start, and GOFLAGS gets -trimpath (the build cache then serves the
// copy as it serves the tree). The servers and nodes the guide starts in the background are
// killed with the shell's process group at the end, whatever happened.
func TestGameGuide(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the guide: builds, a node, a cluster of two and a failover (about 2 minutes)")
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	blocks := guideBlocks(t)
	dir := copyTree(t)
	port := freePort(t)
	var script strings.Builder
	script.WriteString("set -euo pipefail\nset -x\n")
	for _, b := range blocks {
		if b.lang == "sh" && b.marker == "run" {
			fmt.Fprintf(&script, "echo \"::guide-block %d $(date +%%s.%%N)\"\n%s", b.line, strings.ReplaceAll(b.text, "127.0.0.1:4222", fmt.Sprintf("127.0.0.1:%d", port)))
		}
	}
	script.WriteString("echo \"::guide-block end $(date +%s.%N)\"\n")
	logf := filepath.Join(t.TempDir(), "guide.log")
	out, err := os.Create(logf)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd := exec.Command("bash", "-c", script.String())
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = append(withoutEnv(os.Environ(), "NATS_URL", "GOFLAGS"), "GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -trimpath"))
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	defer syscall.Kill(-pgid, syscall.SIGKILL) // what the guide left running, if it failed half-way
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	const limit = 5 * time.Minute
	select {
	case err = <-done:
	case <-time.After(limit):
		syscall.Kill(-pgid, syscall.SIGKILL)
		err = fmt.Errorf("not done after %v", limit)
		<-done
	}
	t.Logf("the guide ran in %v; seconds per block, by its line in game-guide.md: %s", time.Since(start).Round(time.Second), blockTimes(logf))
	if err == nil && testing.Verbose() {
		t.Logf("what it printed (the end):\n%s", tail(logf, 300))
	}
	if err != nil {
		t.Errorf("the guide failed: %v\n%s", err, tail(logf, 120))
		logs, _ := filepath.Glob(filepath.Join(dir, "examples", "raid", "*.log"))
		for _, l := range logs {
			t.Logf("%s:\n%s", filepath.Base(l), tail(l, 30))
		}
	}
}

// copyTree copies the repository's files — those git tracks, and new ones it does not ignore —
// to a new directory, and returns it.
func copyTree(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	ls := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	ls.Dir = root
	list, err := ls.Output()
	if err != nil {
		t.Skipf("git ls-files in %s: %v (the test copies the tree git knows)", root, err)
	}
	dst := filepath.Join(t.TempDir(), "tickfence")
	for _, name := range strings.Split(strings.TrimRight(string(list), "\x00"), "\x00") {
		src := filepath.Join(root, name)
		fi, err := os.Lstat(src)
		if err != nil || !fi.Mode().IsRegular() {
			continue // deleted in the work tree, or not a file
		}
		if err := os.MkdirAll(filepath.Join(dst, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := copyFile(src, filepath.Join(dst, name), fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func copyFile(src, dst string, perm os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func withoutEnv(env []string, names ...string) []string {
	var out []string
	for _, e := range env {
		k, _, _ := strings.Cut(e, "=")
		keep := true
		for _, n := range names {
			keep = keep && k != n
		}
		if keep {
			out = append(out, e)
		}
	}
	return out
}

// blockTimes says how long each block took, from the log's ::guide-block lines.
func blockTimes(log string) string {
	b, _ := os.ReadFile(log)
	re := regexp.MustCompile(`(?m)^::guide-block (\S+) (\d+\.\d+)$`)
	var out []string
	var last string
	var at float64
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		var ts float64
		fmt.Sscan(m[2], &ts)
		if last != "" {
			out = append(out, fmt.Sprintf("%s: %.1f", last, ts-at))
		}
		last, at = m[1], ts
	}
	return strings.Join(out, ", ")
}

// tail is the last n lines of a file.
func tail(file string, n int) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return err.Error()
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
