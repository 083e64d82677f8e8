package playerpage

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tickfence/tickfence/internal/browser"
	"github.com/tickfence/tickfence/internal/natsserver"
)

// TestPageRefusedOrigin: a server whose WebSocket listener does not accept the page's origin
// refuses the handshake, and the page says what to check instead of only "code 1006".
func TestPageRefusedOrigin(t *testing.T) {
	b := browser.ForTest(t, browser.Options{Timeout: 30 * time.Second})
	srv, err := natsserver.Start(natsserver.Config{DataDir: t.TempDir(), WebSocket: "127.0.0.1:0", WebSocketOrigins: []string{"http://other.example:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	mux := http.NewServeMux()
	mux.Handle("/demo/", Handler("/demo/", func() Config { return Config{NATS: srv.WebSocketURL(), Shards: 8} }))
	page := httptest.NewServer(mux)
	defer page.Close()
	if err := b.Do(chromedp.Navigate(page.URL + "/demo/")); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitFor(`document.getElementById('conn').textContent.includes('does it accept pages from')`, 10*time.Second); err != nil {
		var s string
		_ = b.Eval(`document.getElementById('conn').textContent`, &s)
		t.Fatalf("%v: the page says %q", err, s)
	}
	var s string
	if err := b.Eval(`document.getElementById('conn').textContent`, &s); err != nil || !strings.Contains(s, page.URL) {
		t.Errorf("the page does not name its origin %s: %q, %v", page.URL, s, err)
	}
}
