// Package browser finds a Chromium on this machine and drives it headless through the DevTools
// protocol (github.com/chromedp/chromedp), for tests of the pages tickfence serves.
//
// A test opens a browser with ForTest: it skips the test, naming what to install, only when no
// Chromium can be found; any other failure to start fails the test. The browser is closed when the
// test ends.
//
//	func TestPage(t *testing.T) {
//		b := browser.ForTest(t, browser.Options{Width: 1280, Height: 900})
//		if err := b.Do(chromedp.Navigate(srv.URL), chromedp.WaitVisible(chromedp.CSS("#grid"))); err != nil {
//			t.Fatal(err)
//		}
//		title, err := browser.Run(b, chromedp.Title())
//		...
//		var owners map[string]int
//		if err := b.Eval(`window.ownersCount()`, &owners); err != nil { ... }
//		if err := b.Do(chromedp.Click(chromedp.CSS("button.drain"))); err != nil { ... }
//		if err := b.WaitFor(`document.querySelectorAll('.moving').length === 0`, 10*time.Second); err != nil { ... }
//		if err := b.Screenshot("../../docs/img/page.png"); err != nil { ... }
//		if errs := b.JSErrors(); len(errs) > 0 {
//			t.Errorf("the page threw: %v", errs)
//		}
//	}
//
// Outside tests, Start does the same and returns the error instead (ErrNotFound when there is no
// browser). Find looks in this order: $CHROME (a path or a command name), then chromium,
// chromium-browser, google-chrome, google-chrome-stable on $PATH. On Debian or Ubuntu:
//
//	apt-get install -y chromium
//
// chromedp v0.23's actions are values of the type chromedp.Action[T]: those returning nothing
// (Navigate, Click, WaitVisible, SendKeys ...) run with b.Do, one returning a value with
// browser.Run(b, action), each bounded by Options.Timeout; or with chromedp.Do/Run on
// b.Context(), which has no timeout.
package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Install is what to run to get a browser Find accepts, on Debian or Ubuntu.
const Install = "apt-get install -y chromium"

// ErrNotFound is returned (wrapped) by Find and Start when no Chromium can be found.
var ErrNotFound = errors.New("no Chromium found: set $CHROME to its path, or install one (" + Install + ")")

// Names are the commands Find looks for on $PATH, in order, after $CHROME.
var Names = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

// Find returns the path of the browser to run: $CHROME if it is set (a path, or a name on $PATH),
// else the first of Names found on $PATH.
func Find() (string, error) {
	if c := os.Getenv("CHROME"); c != "" {
		p, err := exec.LookPath(c)
		if err != nil {
			return "", fmt.Errorf("$CHROME=%q: %w: %w", c, err, ErrNotFound)
		}
		return p, nil
	}
	for _, n := range Names {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("looked for $CHROME and %s on $PATH: %w", strings.Join(Names, ", "), ErrNotFound)
}

// Options configure Start. The zero value is usable.
type Options struct {
	// Width and Height of the window in CSS pixels (default 1280 × 900). Screenshots are of
	// the whole page, whatever its height.
	Width, Height int
	// Timeout bounds each Run (default 30 s).
	Timeout time.Duration
	// Path of the browser; empty: Find.
	Path string
}

// Browser is one headless browser process with one tab.
type Browser struct {
	// Path of the browser binary running.
	Path string

	opts        Options
	allocCancel context.CancelFunc
	tab         context.Context
	tabCancel   context.CancelFunc

	mu     sync.Mutex
	errs   []string
	logs   []string
	closed bool
}

// Start launches a headless browser and opens its tab.
func Start(ctx context.Context, o Options) (*Browser, error) {
	if o.Width <= 0 {
		o.Width = 1280
	}
	if o.Height <= 0 {
		o.Height = 900
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	path := o.Path
	if path == "" {
		p, err := Find()
		if err != nil {
			return nil, err
		}
		path = p
	}
	flags := append([]chromedp.ExecAllocatorOption{}, chromedp.DefaultExecAllocatorOptions[:]...)
	flags = append(flags,
		chromedp.ExecPath(path),
		chromedp.WindowSize(o.Width, o.Height),
		// Containers have a small /dev/shm; root cannot use the sandbox.
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("hide-scrollbars", true),
	)
	if os.Geteuid() == 0 {
		flags = append(flags, chromedp.NoSandbox)
	}
	actx, acancel := chromedp.NewExecAllocator(ctx, flags...)
	b := &Browser{Path: path, opts: o, allocCancel: acancel}
	tab, tcancel := chromedp.NewContext(actx)
	b.tab, b.tabCancel = tab, tcancel
	// The first Do starts the process, which lives as long as the context of that Do: so it
	// runs on the tab's own context, and a timer ends it if the start takes too long.
	timer := time.AfterFunc(o.Timeout, b.Close)
	err := chromedp.Do(tab)
	if !timer.Stop() && err == nil {
		err = fmt.Errorf("did not start in %v", o.Timeout)
	}
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("start %s: %w", path, err)
	}
	msgs := chromedp.Console(tab)
	go b.collect(msgs)
	return b, nil
}

// ForTest starts a browser for t and closes it when t ends. It calls t.Skip, naming what to
// install, only when no browser is found (ErrNotFound); any other error fails t.
func ForTest(t testing.TB, o Options) *Browser {
	t.Helper()
	b, err := Start(context.Background(), o)
	if errors.Is(err, ErrNotFound) {
		t.Skipf("browser test skipped: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

func (b *Browser) collect(msgs iter.Seq2[chromedp.ConsoleMessage, error]) {
	for m, err := range msgs {
		if err != nil {
			return
		}
		b.mu.Lock()
		line := m.String()
		if m.IsException() && m.Exception != nil && m.Exception.Exception != nil && m.Exception.Exception.Description != "" {
			line = string(m.Type) + ": " + m.Exception.Exception.Description
		}
		b.logs = append(b.logs, line)
		if m.IsException() || m.Type == chromedp.ConsoleError {
			b.errs = append(b.errs, line)
		}
		b.mu.Unlock()
	}
}

// Context is the tab's chromedp context, for chromedp.Run and friends without Run's timeout.
func (b *Browser) Context() context.Context { return b.tab }

// Do runs chromedp actions that return nothing in the tab, in order, bounded by
// Options.Timeout.
func (b *Browser) Do(actions ...chromedp.Action[chromedp.Void]) error {
	ctx, cancel := context.WithTimeout(b.tab, b.opts.Timeout)
	defer cancel()
	return chromedp.Do(ctx, actions...)
}

// Run runs one chromedp action that returns a value in b's tab, bounded by Options.Timeout.
func Run[T any](b *Browser, action chromedp.Action[T]) (T, error) {
	ctx, cancel := context.WithTimeout(b.tab, b.opts.Timeout)
	defer cancel()
	return chromedp.Run(ctx, action)
}

// Eval evaluates a JavaScript expression in the page, waiting for it if it is a promise, and
// decodes its result (as JSON) into out, which may be nil.
func (b *Browser) Eval(expr string, out any) error {
	raw, err := Run(b, chromedp.Evaluate[[]byte](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		return fmt.Errorf("eval %s: %w", expr, err)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("eval %s: decoding %s: %w", expr, raw, err)
	}
	return nil
}

// WaitFor polls a JavaScript expression until it is truthy, every 50 ms, for up to d.
func (b *Browser) WaitFor(expr string, d time.Duration) error {
	ctx, cancel := context.WithTimeout(b.tab, d+time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(d)))
	if err != nil {
		return fmt.Errorf("waiting %v for %s: %w", d, expr, err)
	}
	return nil
}

// Screenshot saves a PNG of the whole page to path, making its directory.
func (b *Browser) Screenshot(path string) error {
	png, err := Run(b, chromedp.FullScreenshot(100))
	if err != nil {
		return fmt.Errorf("screenshot: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, png, 0o644)
}

// JSErrors returns the uncaught exceptions and console.error lines the page has produced so far.
func (b *Browser) JSErrors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.errs...)
}

// ConsoleLogs returns every console.* line the page has produced so far, prefixed by its level.
func (b *Browser) ConsoleLogs() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.logs...)
}

// Close ends the tab and the browser process. It is safe to call more than once.
func (b *Browser) Close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed = true
	b.mu.Unlock()
	if b.tabCancel != nil {
		b.tabCancel()
	}
	b.allocCancel()
}
