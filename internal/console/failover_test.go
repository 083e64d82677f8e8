package console

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tickfence/tickfence/internal/browser"
	"github.com/tickfence/tickfence/internal/proc"
)

// TestConsoleShowsAFailover runs three real tickd processes on a tickd server, opens the console
// in headless Chromium and freezes n3 (SIGSTOP): the page shows n3 self-fenced once its lease is
// older than the TTL less the margin, then its lease expiring and its shards failing over to n1
// and n2 (the timeline, the grid without n3's colour); thawed (SIGCONT), n3 joins again with a new
// session.
func TestConsoleShowsAFailover(t *testing.T) {
	b := browser.ForTest(t, browser.Options{Width: 1400, Height: 1000, Timeout: 30 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dir := t.TempDir()
	bin, err := proc.Build(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := proc.StartCluster(ctx, proc.ClusterConfig{Bin: bin, DataDir: filepath.Join(dir, "nats"), Shards: 32})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, id := range []string{"n1", "n2", "n3"} {
		p, err := c.StartNode(id)
		if err != nil {
			t.Fatal(err)
		}
		if err := proc.WaitJoined(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	con, err := New(ctx, Config{Store: c.Store, NC: c.NC, LeaseTTL: c.Lease(), Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(con.Handler())
	defer srv.Close()
	defer cancel() // ends the console's event streams before the server closes
	if err := b.Do(chromedp.Navigate(srv.URL)); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitFor(`window.consoleState && consoleState.nodes.length === 3 && consoleState.nodes.every(n => n.shards > 0 && n.state === 'serving')`, 40*time.Second); err != nil {
		t.Fatal(err)
	}
	n3 := c.Node("n3")
	if err := n3.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	if err := b.WaitFor(`(e => e && e.textContent === 'unrenewed')(document.querySelector('tr[data-node="n3"] .state'))`, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("n3 shown unrenewed %v after SIGSTOP", time.Since(frozen).Round(time.Millisecond))
	if err := b.WaitFor(`!consoleState.nodes.some(n => n.id === 'n3') && !consoleState.grid.includes(consoleState.owners.indexOf('n3')) && !consoleState.grid.includes(-1)`, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("n3's shards failed over, on the page %v after SIGSTOP", time.Since(frozen).Round(time.Millisecond))
	counts := drawnOwners(t, b)
	if counts["n3"] != 0 || counts["n1"]+counts["n2"] != 32 {
		t.Fatalf("after the failover the grid draws %v", counts)
	}
	var timeline string
	if err := b.Eval(`document.getElementById('timeline').innerText`, &timeline); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(timeline, "n3's lease expired") || !strings.Contains(timeline, "failover:") || !strings.Contains(timeline, "n3 → n") {
		t.Fatalf("the timeline shows no failover from n3:\n%s", timeline)
	}
	if err := n3.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitFor(`consoleState.nodes.some(n => n.id === 'n3') && document.getElementById('timeline').innerText.includes('n3 joined')`, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if errs := b.JSErrors(); len(errs) > 0 {
		t.Errorf("the page logged errors: %q", errs)
	}
}
