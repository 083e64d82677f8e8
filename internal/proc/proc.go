// Package proc runs tickd as real processes, for the tools that measure or attack a cluster
// (tickbench cluster, tickbench chaos) and for the tests that do (internal/clustertest,
// cmd/tickd's): it builds the binary, starts `tickd server` and nodes, keeps their JSON log
// lines, scrapes their Prometheus metrics (parsed with prometheus/common's expfmt) and sends
// them signals.
package proc

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Build compiles tickd (without -race, so a server and several nodes fit on a small machine)
// into dir and returns the binary's path.
func Build(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "tickd")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/tickfence/tickfence/cmd/tickd")
	cmd.Dir = moduleRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build tickd: %w\n%s", err, out)
	}
	return bin, nil
}

// moduleRoot is the tickfence module's directory: the working directory's if it is inside it,
// else the one this package was compiled from.
func moduleRoot() string {
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && strings.Contains(string(b), "module github.com/tickfence/tickfence\n") {
				return d
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return ""
	}
	return filepath.Dir(filepath.Dir(filepath.Dir(file))) // internal/proc/proc.go → module root
}

// Proc is one running process and the log lines it wrote to stderr. JSON lines are decoded;
// any other line is kept as {"msg": line}.
type Proc struct {
	Name   string
	cmd    *exec.Cmd
	done   chan struct{}
	server bool // a life of a Cluster's server

	mu      sync.Mutex
	lines   []map[string]any
	metrics string // URL of /metrics, from the node's "metrics" log line
	waitErr error
}

// Start starts bin with args and extra environment variables.
func Start(bin, name string, env []string, args ...string) (*Proc, error) {
	p := &Proc{Name: name, cmd: exec.Command(bin, args...), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go p.read(stderr)
	return p, nil
}

func (p *Proc) read(r io.Reader) {
	defer close(p.done)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			m = map[string]any{"msg": sc.Text()}
		}
		p.mu.Lock()
		p.lines = append(p.lines, m)
		if m["msg"] == "metrics" && p.metrics == "" {
			p.metrics, _ = m["url"].(string)
		}
		p.mu.Unlock()
	}
	err := p.cmd.Wait()
	p.mu.Lock()
	p.waitErr = err
	p.mu.Unlock()
}

// Pid is the process ID.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Exited is closed once the process has exited and its output is read.
func (p *Proc) Exited() <-chan struct{} { return p.done }

// Alive reports whether the process has not exited.
func (p *Proc) Alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// ExitErr is the process's exit status once it has exited.
func (p *Proc) ExitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waitErr
}

// MetricsURL is the node's metrics URL once it has logged it ("" before).
func (p *Proc) MetricsURL() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.metrics
}

// LineCount is the number of log lines so far: a mark for WaitLog.
func (p *Proc) LineCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.lines)
}

// Lines returns a copy of the log lines from index from on.
func (p *Proc) Lines(from int) []map[string]any {
	p.mu.Lock()
	defer p.mu.Unlock()
	if from >= len(p.lines) {
		return nil
	}
	return append([]map[string]any(nil), p.lines[from:]...)
}

// Find returns the index of the first line from index from on that matches, or -1.
func (p *Proc) Find(from int, match func(map[string]any) bool) (int, map[string]any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := from; i < len(p.lines); i++ {
		if match(p.lines[i]) {
			return i, p.lines[i]
		}
	}
	return -1, nil
}

// ErrExited is returned by waits on a process that exited.
var ErrExited = errors.New("process exited")

// WaitLog waits until a line from index from on matches and returns it with its index.
func (p *Proc) WaitLog(ctx context.Context, from int, match func(map[string]any) bool) (int, map[string]any, error) {
	for {
		if i, m := p.Find(from, match); i >= 0 {
			return i, m, nil
		}
		select {
		case <-ctx.Done():
			return -1, nil, fmt.Errorf("%s: %w", p.Name, ctx.Err())
		case <-p.done:
			if i, m := p.Find(from, match); i >= 0 {
				return i, m, nil
			}
			return -1, nil, fmt.Errorf("%s: %w (%v)", p.Name, ErrExited, p.ExitErr())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Msg matches a log line by its message.
func Msg(msg string) func(map[string]any) bool {
	return func(m map[string]any) bool { return m["msg"] == msg }
}

// Signal sends sig to the process.
func (p *Proc) Signal(sig syscall.Signal) error {
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %v to %s: %w", sig, p.Name, err)
	}
	return nil
}

// Stopped reports whether the process is in the stopped state (SIGSTOP).
func (p *Proc) Stopped() bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Pid()))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses and may contain spaces.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		f := strings.Fields(s[i+1:])
		return len(f) > 0 && (f[0] == "T" || f[0] == "t")
	}
	return false
}

// WaitStopped waits until the process is stopped.
func (p *Proc) WaitStopped(ctx context.Context) error {
	for !p.Stopped() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not stop: %w", p.Name, ctx.Err())
		case <-p.done:
			return fmt.Errorf("%s: %w", p.Name, ErrExited)
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// Kill resumes the process if it is stopped, kills it (SIGKILL) and waits for it.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Scrape reads the node's metrics. A stopped process never answers, so callers pass a short
// deadline.
func (p *Proc) Scrape(ctx context.Context) (Metrics, error) {
	url := p.MetricsURL()
	if url == "" {
		return nil, fmt.Errorf("%s: metrics address not logged yet", p.Name)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s metrics: %w", p.Name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s metrics: %w", p.Name, err)
	}
	return ParseMetrics(string(b)), nil
}
