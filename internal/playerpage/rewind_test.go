package playerpage

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/tickfence/tickfence/internal/browser"
	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/shard"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/natskv"
)

// TestPageRewind (issue 35.4: a player saw the boss die, come back at 170 HP and die again): a
// node's publisher sends a dungeon's frames as a failover makes them — owner A shows the boss dead
// at ticks past its stored tick, then owner B, which went on from that stored tick, shows it at
// 170 HP. The page's fast display shows A's dead boss marked speculative, then B's frame and a
// note that frames it showed were undone; its durable display (?durable=1) never shows the dead
// boss, and notes the rewind too.
func TestPageRewind(t *testing.T) {
	b := browser.ForTest(t, browser.Options{Timeout: 30 * time.Second})
	srv, err := natsserver.Start(natsserver.Config{DataDir: t.TempDir(), WebSocket: "127.0.0.1:0", WebSocketOrigins: []string{"*"}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	mux := http.NewServeMux()
	mux.Handle("/demo/", Handler("/demo/", func() Config { return Config{NATS: srv.WebSocketURL(), Shards: 8} }))
	page := httptest.NewServer(mux)
	defer page.Close()
	nc, err := natskv.Connect("", srv.ConnectOption())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	pub := natscmd.NewFramePublisher(nc, 0, nil)
	defer pub.Close()

	for _, mode := range []string{"fast", "durable"} {
		t.Run(mode, func(t *testing.T) {
			id := "raid-" + mode
			s := store.ShardOf(id, 8)
			frame := func(token, tick, stored uint64, hp int) {
				phase := "1"
				if hp == 0 {
					phase = "dead"
				}
				body, _ := msgpack.Marshal(map[string]any{"hp": hp, "max_hp": 1000, "phase": phase, "run": 1, "players": []any{}})
				pub.Publish(shard.Frame{Shard: s, Instance: id, Epoch: 1, Token: token, Tick: tick, Stored: stored, Payload: body})
			}
			notice := func(token, stored uint64) {
				pub.Publish(shard.Frame{Shard: s, Instance: id, Epoch: 1, Token: token, Stored: stored, Notice: true})
			}
			url := page.URL + "/demo/?id=" + id
			if mode == "durable" {
				url += "&durable=1"
			}
			if err := b.Do(chromedp.Navigate(url)); err != nil {
				t.Fatal(err)
			}
			if err := b.WaitFor(`document.getElementById('conn').dataset.state === 'connected'`, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			// A's first frame, stored already, until the page's subscriptions are in place.
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				frame(5, 10, 10, 300)
				var tick string
				_ = b.Eval(`document.getElementById('boss').dataset.tick || ''`, &tick)
				if tick == "10" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the page showed no frame in 10 s")
				}
			}
			frame(5, 11, 10, 170)
			frame(5, 12, 10, 0) // the boss dies: tick 12 is not stored
			frame(5, 13, 11, 0)
			// A fails; B went on from tick 11, the last A stored.
			frame(7, 12, 11, 170)
			frame(7, 13, 12, 100)
			notice(7, 13)
			if err := b.WaitFor(`document.getElementById('boss').dataset.token === '7' && document.getElementById('boss').dataset.tick === '13'`, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			var seen []string
			if err := b.Eval(`window.tickfencePlayer.shown`, &seen); err != nil { // token@tick:hp, ? if speculative
				t.Fatal(err)
			}
			want := []string{"5@10:300", "5@11:170?", "5@12:0?", "5@13:0?", "7@12:170?", "7@13:100?"}
			if mode == "durable" {
				want = []string{"5@10:300", "5@11:170", "7@12:170", "7@13:100"}
			}
			if !slices.Equal(seen, want) {
				t.Fatalf("the page showed %v; want %v", seen, want)
			}
			var rewinds, log string
			if err := b.Eval(`document.getElementById('boss').dataset.rewinds || ''`, &rewinds); err != nil || rewinds != "1" {
				t.Fatalf("rewinds %q, %v; want 1", rewinds, err)
			}
			if err := b.Eval(`document.getElementById('log').textContent`, &log); err != nil || !strings.Contains(log, "rewind") {
				t.Fatalf("the log says %q; want a rewind noted", log)
			}
			var stored string
			_ = b.Eval(`document.getElementById('stored').textContent`, &stored)
			t.Logf("%s display: showed %v; stored: %q", mode, seen, stored)
			if errs := b.JSErrors(); len(errs) > 0 {
				t.Errorf("the page logged errors: %v", errs)
			}
		})
	}
}
