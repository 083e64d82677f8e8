package playerpage

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tickfence/tickfence/internal/browser"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
)

// TestWireJS runs the page's wire.js in headless Chromium against the Go code it mirrors: the
// shard of 500 instance IDs (store.ShardOf) for three shard counts, and the watcher's rule on
// 3 000 random frames (wire.FrameFilter: grants going up and down as zombies' and new owners'
// frames interleave, two topics, repeated and out-of-order ticks) — the same verdict for each.
func TestWireJS(t *testing.T) {
	b := browser.ForTest(t, browser.Options{Timeout: 30 * time.Second})
	mux := http.NewServeMux()
	mux.Handle("/demo/", Handler("/demo/", func() Config { return Config{} }))
	mux.HandleFunc("/blank", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<!doctype html><title>wire.js</title><link rel=icon href=\"data:,\">")
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	if err := b.Do(chromedp.Navigate(srv.URL + "/blank")); err != nil {
		t.Fatal(err)
	}

	rng := rand.New(rand.NewPCG(15, 2))
	const chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
	ids := []string{"demo-0", "demo-7", "raid-1", "a", "Z_-9"}
	for len(ids) < 500 {
		id := make([]byte, 1+rng.IntN(64))
		for i := range id {
			id[i] = chars[rng.IntN(len(chars))]
		}
		ids = append(ids, string(id))
	}
	for _, shards := range []uint32{1, 7, 256} {
		var want []uint32
		for _, id := range ids {
			want = append(want, store.ShardOf(id, shards))
		}
		js, _ := json.Marshal(ids)
		var got []uint32
		if err := b.Eval(fmt.Sprintf(`import('/demo/wire.js').then(m => %s.map(id => m.fnv1a32(id) %% %d))`, js, shards), &got); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("shards of %d: the page and store.ShardOf differ\npage %v\nGo   %v", shards, got, want)
		}
	}

	type frame struct {
		Topic                     string
		Epoch, Token, Tick, Index uint64
		At                        int64 // ms since the first frame
	}
	// A walk like a real instance's: its owner's grant rises now and then (a move, a rotation, a
	// restore's new epoch), ticks mostly advance with a few frames each, and frames of older grants
	// (zombies) and late or repeated ones are mixed in.
	var frames []frame
	epoch, token, tick := uint64(1), uint64(5), uint64(100)
	for range 3000 {
		switch r := rng.IntN(100); {
		case r < 2:
			token += 1 + uint64(rng.IntN(3))
		case r == 2 && rng.IntN(4) == 0:
			epoch, token = epoch+1, 1+uint64(rng.IntN(3)) // a new epoch's tokens start low again
		}
		fr := frame{Topic: []string{"", "", "loot"}[rng.IntN(3)], Epoch: epoch, Token: token, Tick: tick, Index: uint64(rng.IntN(3))}
		switch r := rng.IntN(100); {
		case r < 15: // a zombie's frame: an older grant
			if fr.Token > 1 && rng.IntN(3) > 0 {
				fr.Token -= 1 + uint64(rng.IntN(int(fr.Token-1)))
			} else if fr.Epoch > 1 {
				fr.Epoch--
				fr.Token += uint64(rng.IntN(20)) // a higher token of an older epoch is still older
			}
		case r < 25: // late, or a repeat
			fr.Tick -= uint64(rng.IntN(3))
		default:
			tick += uint64(rng.IntN(2))
		}
		frames = append(frames, fr)
	}
	// Frames arrive 0-600 ms apart: now and then the followed grant falls silent for longer than
	// DefaultFrameStale, and another grant's frame is followed (the rule against a forged one).
	var f wire.FrameFilter
	var want []bool
	passed := 0
	t0 := time.Unix(0, 0)
	for i := range frames {
		frames[i].At += rng.Int64N(600)
		if i > 0 {
			frames[i].At += frames[i-1].At
		}
	}
	for _, fr := range frames {
		p := f.PassAt(fr.Topic, wire.FrameStamp{Epoch: fr.Epoch, Token: fr.Token, Tick: fr.Tick, Index: fr.Index}, t0.Add(time.Duration(fr.At)*time.Millisecond))
		want = append(want, p)
		if p {
			passed++
		}
	}
	js, _ := json.Marshal(frames)
	var got []bool
	if err := b.Eval(fmt.Sprintf(`import('/demo/wire.js').then(m => { const f = new m.FrameFilter();
		return %s.map(x => f.pass(x.Topic, {epoch: BigInt(x.Epoch), token: BigInt(x.Token), tick: BigInt(x.Tick), index: BigInt(x.Index)}, x.At)); })`, js), &got); err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if i >= len(got) || got[i] != want[i] {
			t.Fatalf("frame %d %+v: the page says pass=%v, wire.FrameFilter %v (%d verdicts)", i, frames[i], i < len(got) && got[i], want[i], len(got))
		}
	}
	if passed < len(frames)/4 || passed > len(frames)*9/10 {
		t.Fatalf("%d of %d frames passed: the sequence tests nothing", passed, len(frames))
	}
	t.Logf("%d ids × 3 shard counts, %d frames (%d passed): the page and the Go code agree", len(ids), len(frames), passed)
	if errs := b.JSErrors(); len(errs) > 0 {
		t.Errorf("the page logged errors: %v", errs)
	}
}
