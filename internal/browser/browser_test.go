package browser

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

func TestFindHonoursCHROME(t *testing.T) {
	t.Setenv("CHROME", filepath.Join(t.TempDir(), "no-such-browser"))
	_, err := Find()
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("Find with a $CHROME that does not exist: %v, want ErrNotFound", err)
	}
	sh, err := os.Executable() // any executable stands for a browser here
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("CHROME", sh)
	p, err := Find()
	if err != nil || p != sh {
		t.Fatalf("Find with $CHROME=%s: %q, %v", sh, p, err)
	}
}

// TestPage drives a real headless browser: a page that builds a list with a script, a click that
// changes it, an exception it throws, and a screenshot.
func TestPage(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Write([]byte(`<!doctype html><title>t</title><ul id=l></ul><button id=b>add</button>
<script>
const l = document.getElementById('l');
for (let i = 0; i < 3; i++) { const li = document.createElement('li'); li.textContent = 'item ' + i; l.appendChild(li); }
document.getElementById('b').onclick = () => { const li = document.createElement('li'); li.textContent = 'added'; l.appendChild(li); };
console.log('ready');
setTimeout(() => { throw new Error('boom'); }, 0);
</script>`))
	}))
	defer srv.Close()
	b := ForTest(t, Options{Width: 400, Height: 300, Timeout: 20 * time.Second})
	if err := b.Do(chromedp.Navigate(srv.URL), chromedp.WaitVisible(chromedp.CSS("#b"))); err != nil {
		t.Fatal(err)
	}
	title, err := Run(b, chromedp.Title())
	if err != nil {
		t.Fatal(err)
	}
	if title != "t" {
		t.Errorf("title %q", title)
	}
	var n int
	if err := b.Eval(`document.querySelectorAll('#l li').length`, &n); err != nil || n != 3 {
		t.Fatalf("items before the click: %d, %v", n, err)
	}
	if err := b.Do(chromedp.Click(chromedp.CSS("#b"))); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitFor(`document.querySelectorAll('#l li').length === 4`, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitFor(`true`, time.Second); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(t.TempDir(), "d", "p.png")
	if err := b.Screenshot(shot); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(shot); err != nil || len(data) < 100 || string(data[1:4]) != "PNG" {
		t.Fatalf("screenshot: %d bytes, %v", len(data), err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(b.JSErrors()) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if errs := b.JSErrors(); len(errs) != 1 {
		t.Errorf("JSErrors %q, want the one thrown", errs)
	}
	logs := b.ConsoleLogs()
	if len(logs) == 0 || logs[0] != "log: ready" {
		t.Errorf("ConsoleLogs %q", logs)
	}
	b.Close()
	b.Close()
}
