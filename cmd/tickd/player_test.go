package main_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tickfence/tickfence/auth"
	"github.com/tickfence/tickfence/coordinator"
	"github.com/tickfence/tickfence/internal/browser"
	"github.com/tickfence/tickfence/internal/proc"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/store"
)

// TestPlayerPageFailover opens the player demo page in headless Chromium, the way README "Player
// demo page" sets it up: `tickd server --websocket` and two nodes, the page served by the node
// that runs the dungeon and connected to the server over WebSocket. It joins and attacks a boss
// with the page's buttons and sees its HP drop in the frames; then kills -9 that node and attacks
// again: the page retries with the same request ID until the shard's new owner answers, and the
// HP drops again in frames of the new grant. Then the server restarts: the page reconnects,
// subscribes again and its next attack is answered. The screenshot goes to docs/img/player.png with
// TICKFENCE_SCREENSHOTS=1 (how the docs' one was made), else to the test's temporary directory.
func TestPlayerPageFailover(t *testing.T) {
	b := browser.ForTest(t, browser.Options{Width: 1100, Height: 760, Timeout: 30 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dir := t.TempDir()
	bin, err := proc.Build(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	ports := freePorts(t, 3)
	ws, m1, m2 := ports[0], ports[1], ports[2]
	origin := func(p int) string { return fmt.Sprintf("http://127.0.0.1:%d", p) }
	c, err := proc.StartCluster(ctx, proc.ClusterConfig{Bin: bin, DataDir: filepath.Join(dir, "nats"), Shards: 8,
		ServerArgs: []string{"--websocket", fmt.Sprintf("127.0.0.1:%d", ws), "--websocket-origin", origin(m1) + "," + origin(m2)}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	wsURL := fmt.Sprintf("ws://127.0.0.1:%d", ws)
	metrics := map[string]int{"n1": m1, "n2": m2}
	for _, id := range []string{"n1", "n2"} {
		args := []string{"--metrics", fmt.Sprintf("127.0.0.1:%d", metrics[id]), "--demo-page-nats", wsURL, "--demo-frame-every", "2"}
		if id == "n1" {
			args = append(args, "--demo", "3", "--demo-rate", "0.5") // other dungeons, played by simulated players
		}
		p, err := c.StartNode(id, args...)
		if err != nil {
			t.Fatal(err)
		}
		if err := proc.WaitJoined(ctx, p); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
	const id = "raid-1"
	shard := store.ShardOf(id, 8)
	owner := func(s *coordinator.State) string { return s.Shards[shard].Owner.Owner }
	// The placement settled: both nodes own shards and nothing has moved for 3 s. (Once n2 owns a
	// shard the rebalancer may still move more, one at a time, and a move of the dungeon's shard
	// right after the page opened would make its first command wait out a hand-off.)
	var placed string
	var since time.Time
	if _, err := c.WaitState(ctx, "every shard owned, by both nodes, and no move for 3 s", func(s *coordinator.State) bool {
		n := map[string]int{}
		var sig strings.Builder
		for _, sh := range s.Shards {
			n[sh.Owner.Owner]++
			sig.WriteString(sh.Owner.Owner + "/" + sh.Owner.Session + " ")
		}
		if !proc.AllOwnedLive(s) || n["n1"] == 0 || n["n2"] == 0 {
			placed = ""
			return false
		}
		if sig.String() != placed {
			placed, since = sig.String(), time.Now()
		}
		return time.Since(since) >= 3*time.Second
	}); err != nil {
		t.Fatal(err)
	}
	client := natscmd.NewClient(c.NC, 8)
	if r, err := client.SendMap(ctx, id, "create-raid-1", map[string]any{"type": "create", "kind": "dungeon", "boss_hp": 1000}); err != nil || !r.OK {
		t.Fatalf("create %s: %+v, %v", id, r, err)
	}
	s, err := c.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first := owner(s)
	page := fmt.Sprintf("http://127.0.0.1:%d/demo/?id=%s&player=ada", metrics[first], id)
	if err := b.Do(chromedp.Navigate(page)); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitFor(`document.getElementById('conn').dataset.state === 'connected' && document.getElementById('boss').dataset.hp !== undefined`, 15*time.Second); err != nil {
		t.Fatalf("no frame of %s on the page (served by %s): %v; console: %v", id, first, err, b.ConsoleLogs())
	}
	listed := 0
	if err := b.Eval(fmt.Sprintf(`document.querySelectorAll('#list button[data-id=%q]').length`, id), &listed); err != nil || listed != 1 {
		t.Errorf("%s in the dungeon list: %d, %v", id, listed, err)
	}

	click(t, b, "join", 1, 10*time.Second)
	hp0 := bossNumber(t, b, "hp")
	token0 := bossNumber(t, b, "token")
	click(t, b, "attack", 1, 10*time.Second)
	waitBelow(t, b, hp0, 10*time.Second)
	hp1 := bossNumber(t, b, "hp")
	t.Logf("before the kill: %s runs %s (token %d); the attack took its HP %d → %d", first, id, token0, hp0, hp1)

	// Kill the node that runs it (it also served the page: the page needs nothing more from it).
	if s, err = c.State(ctx); err != nil {
		t.Fatal(err)
	}
	victim := owner(s)
	c.Node(victim).Kill()
	killed := time.Now()
	click(t, b, "attack", 2, 20*time.Second)
	answered := time.Since(killed)
	var attempts string
	_ = b.Eval(`document.querySelector('#log li[data-type=attack]').dataset.attempts`, &attempts)
	waitBelow(t, b, hp1, 10*time.Second)
	hp2, token2 := bossNumber(t, b, "hp"), bossNumber(t, b, "token")
	if token2 == token0 {
		t.Errorf("frames still under token %d after the failover", token0)
	}
	s, err = c.WaitState(ctx, "the shard owned by the survivor", func(s *coordinator.State) bool { return owner(s) != victim && owner(s) != "" })
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("killed %s; the page's attack was answered by %s %.2f s later after %s attempts with one request ID; HP %d → %d under token %d",
		victim, owner(s), answered.Seconds(), attempts, hp1, hp2, token2)
	var note string
	if err := b.Eval(`document.querySelector('#log li.note') ? document.querySelector('#log li.note').textContent : ''`, &note); err != nil || note == "" {
		t.Errorf("the page did not note the grant change: %q, %v", note, err)
	}

	// The server goes down and comes back: the page tries to reconnect while it is down (the
	// browser logs each refused attempt as an error of its own), then reconnects by itself,
	// subscribes again, and plays on. Waiting for a refused attempt makes every run take that
	// path: a quick restart on a quiet machine could otherwise come back before the first attempt.
	c.Server.Kill()
	if err := b.WaitFor(`(window.tickfencePlayer.conn.lastError || '').startsWith('cannot open')`, 20*time.Second); err != nil {
		t.Fatalf("the page made no reconnect attempt while the server was down: %v", err)
	}
	if err := c.RestartServer(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitFor(`window.tickfencePlayer.conn.reconnects >= 1 && document.getElementById('conn').dataset.state === 'connected'`, 20*time.Second); err != nil {
		t.Fatalf("the page did not reconnect to the restarted server: %v", err)
	}
	tick := bossNumber(t, b, "tick")
	if err := b.WaitFor(fmt.Sprintf(`Number(document.getElementById('boss').dataset.tick) > %d`, tick), 20*time.Second); err != nil {
		t.Fatalf("no new frame after the server's restart: %v", err)
	}
	click(t, b, "attack", 3, 30*time.Second)
	waitBelow(t, b, hp2, 10*time.Second)

	shot := filepath.Join(dir, "player.png")
	if os.Getenv("TICKFENCE_SCREENSHOTS") == "1" {
		shot = filepath.Join("..", "..", "docs", "img", "player.png")
	}
	if err := b.Screenshot(shot); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(shot); err != nil || fi.Size() < 10_000 {
		t.Errorf("screenshot %s: %v, %v", shot, fi, err)
	}
	// The browser's own message for each attempt refused while the server was down is expected;
	// any other error is the page's.
	refused := fmt.Sprintf("error: WebSocket connection to '%s/' failed: ", wsURL)
	var others []string
	refusedN := 0
	for _, e := range b.JSErrors() {
		if strings.HasPrefix(e, refused) {
			refusedN++
		} else {
			others = append(others, e)
		}
	}
	if len(others) > 0 {
		t.Errorf("the page logged errors: %v", others)
	}
	if refusedN == 0 {
		t.Errorf("no refused attempt to reconnect logged while the server was down: %v", b.ConsoleLogs())
	}
}

// click presses a command button and waits until the n-th command of that type (newest first in
// the log) is answered ok.
func click(t *testing.T, b *browser.Browser, button string, n int, within time.Duration) {
	t.Helper()
	sel := fmt.Sprintf(`document.querySelectorAll('#log li[data-type=%s]')`, button)
	if err := b.Do(chromedp.Click(chromedp.CSS("#" + button))); err != nil { // a mouse click on the button
		t.Fatal(err)
	}
	// A mouse click lands where the button was when its position was read: a layout shift in
	// between (the dungeon list filling in) makes it miss, and the page sends nothing (CI, loaded,
	// twice). Then the button is clicked from the page's script.
	if err := b.WaitFor(fmt.Sprintf(`%s.length >= %d`, sel, n), 3*time.Second); err != nil {
		t.Logf("the mouse click on #%s sent no command within 3 s; clicking it from the page's script", button)
		if err := b.Eval(fmt.Sprintf(`document.getElementById(%q).click(), true`, button), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.WaitFor(fmt.Sprintf(`%s.length >= %d && %s[0].dataset.state !== 'pending'`, sel, n, sel), within); err != nil {
		var text, attempts, conn string
		_ = b.Eval(`(`+sel+`[0] || {}).textContent || ''`, &text)
		_ = b.Eval(`(`+sel+`[0] || {dataset: {}}).dataset.attempts || ''`, &attempts)
		_ = b.Eval(`document.getElementById('conn').textContent`, &conn)
		t.Fatalf("%s: %v; the log's entry %q after %s attempts; connection %q; console: %v", button, err, text, attempts, conn, b.ConsoleLogs())
	}
	var state, text string
	_ = b.Eval(sel+`[0].dataset.state`, &state)
	_ = b.Eval(sel+`[0].textContent`, &text)
	if state != "ok" {
		t.Fatalf("%s: %s", button, text)
	}
}

// bossNumber reads a number the page shows for the boss (a data attribute of #boss).
func bossNumber(t *testing.T, b *browser.Browser, attr string) int64 {
	t.Helper()
	var v string
	if err := b.Eval(fmt.Sprintf(`document.getElementById('boss').dataset[%q] || ''`, attr), &v); err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("boss %s on the page: %q", attr, v)
	}
	return n
}

// waitBelow waits until the page's frames show the boss's HP below hp.
func waitBelow(t *testing.T, b *browser.Browser, hp int64, within time.Duration) {
	t.Helper()
	if err := b.WaitFor(fmt.Sprintf(`Number(document.getElementById('boss').dataset.hp) < %d`, hp), within); err != nil {
		t.Fatalf("the boss's HP on the page did not drop below %d: %v", hp, err)
	}
}

// TestPlayerPageAuth: with --auth, the page served by a tickd with everything embedded
// (--nats-websocket on a free port, announced in config.json) is refused until it is given a
// player's credential (tickctl auth user DIR gateway NAME: the players' account, untrusted); then
// it signs the server's nonce in the browser, receives its replies under its own inbox, plays as
// that player only, shows a boss's frames and its join and attack are answered.
func TestPlayerPageAuth(t *testing.T) {
	b := browser.ForTest(t, browser.Options{Width: 1100, Height: 760, Timeout: 30 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dir := t.TempDir()
	bin, err := proc.Build(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	authDir := filepath.Join(dir, "auth")
	if _, err := auth.Init(authDir); err != nil {
		t.Fatal(err)
	}
	credsFile, err := auth.NewUser(authDir, auth.Gateway, "ada-browser")
	if err != nil {
		t.Fatal(err)
	}
	creds, err := os.ReadFile(credsFile)
	if err != nil {
		t.Fatal(err)
	}
	port := freePorts(t, 1)[0]
	p, err := proc.Start(bin, "tickd", nil, "--data", filepath.Join(dir, "data"), "--auth", authDir, "--nats-websocket", "127.0.0.1:0",
		"--metrics", fmt.Sprintf("127.0.0.1:%d", port), "--shards", "8", "--demo", "2", "--demo-players", "1", "--demo-rate", "0.01",
		"--demo-frame-every", "2", "--log-json")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	if err := proc.WaitJoined(ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := b.Do(chromedp.Navigate(fmt.Sprintf("http://127.0.0.1:%d/demo/?id=demo-1&player=ada", port))); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitFor(`document.getElementById('conn').dataset.state === 'refused' && !document.getElementById('auth').hidden`, 10*time.Second); err != nil {
		var s string
		_ = b.Eval(`document.getElementById('conn').textContent`, &s)
		t.Fatalf("the page without credentials: %v (%q)", err, s)
	}
	// Paste the credentials and connect (the page reloads with them in its session storage).
	if err := b.Do(chromedp.SetValue(chromedp.CSS("#creds"), string(creds)), chromedp.Click(chromedp.CSS("#creds-connect"))); err != nil {
		t.Fatal(err)
	}
	connected := `document.getElementById('conn').dataset.state === 'connected' && document.getElementById('boss').dataset.hp !== undefined`
	// A poll that began before the reload dies with its page (DevTools error -32000): poll again.
	for i := 0; i < 5; i++ {
		if err = b.WaitFor(connected, 15*time.Second); err == nil || !strings.Contains(err.Error(), "-32000") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		var s string
		_ = b.Eval(`document.getElementById('conn').textContent`, &s)
		t.Fatalf("the page with a gateway's credentials: %v (%q); console: %v", err, s, b.ConsoleLogs())
	}
	// A player's credential (the players' account, untrusted) is its player: the page plays as
	// ada-browser whatever ?player= says, and the nodes would refuse anyone else.
	var who string
	if err := b.Eval(`document.getElementById('player').value + (document.getElementById('player').readOnly ? ' (read-only)' : '')`, &who); err != nil {
		t.Fatal(err)
	}
	if who != "ada-browser (read-only)" {
		t.Errorf("the page plays as %q, want the credential's player ada-browser (read-only)", who)
	}
	click(t, b, "join", 1, 10*time.Second)
	hp0 := bossNumber(t, b, "hp")
	click(t, b, "attack", 1, 10*time.Second)
	waitBelow(t, b, hp0, 10*time.Second)
	if errs := b.JSErrors(); len(errs) > 0 {
		t.Errorf("the page logged errors: %v", errs)
	}
	for _, l := range b.ConsoleLogs() {
		if strings.Contains(strings.ToLower(l), "violation") {
			t.Errorf("the page was refused something: %s", l)
		}
	}
}
