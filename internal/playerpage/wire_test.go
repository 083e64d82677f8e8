package playerpage

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
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
// 3 000 random frames (wire.FrameFilter: grants and reverts going up and down as zombies' and new
// owners' frames interleave, two topics, repeated and out-of-order ticks), with what the page
// does with their stored ticks (wire.Rewinds, wire.Holdback, stored notices mixed in) — the same
// verdict for each.
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
		Topic                                      string
		Epoch, Token, Tick, Index, Stored, Reverts uint64
		At                                         int64 // ms since the first frame
		Notice                                     bool  // a stored notice (Tick and Index unused)
	}
	// A walk like a real instance's: its owner's grant rises now and then (a move, a rotation, a
	// restore's new epoch), and under a grant the owner goes back to its stored state now and then
	// (reverts); ticks mostly advance with a few frames each, each saying a stored tick a little
	// behind, and frames of older grants or reverts (zombies) and late or repeated ones are mixed
	// in, with stored notices.
	var frames []frame
	epoch, token, reverts, tick := uint64(1), uint64(5), uint64(0), uint64(100)
	for range 3000 {
		switch r := rng.IntN(100); {
		case r < 2:
			token, reverts = token+1+uint64(rng.IntN(3)), 0
		case r == 2 && rng.IntN(4) == 0:
			epoch, token, reverts = epoch+1, 1+uint64(rng.IntN(3)), 0 // a new epoch's tokens start low again
		case r == 3:
			reverts++
		}
		stored := tick - min(tick, uint64(rng.IntN(8)))
		fr := frame{Topic: []string{"", "", "loot"}[rng.IntN(3)], Epoch: epoch, Token: token, Reverts: reverts, Tick: tick,
			Index: uint64(rng.IntN(3)), Stored: stored}
		switch r := rng.IntN(100); {
		case r < 15: // a zombie's frame: an older grant, or an undone history under this one
			if fr.Reverts > 0 && rng.IntN(3) == 0 {
				fr.Reverts -= 1 + uint64(rng.IntN(int(fr.Reverts)))
			} else if fr.Token > 1 && rng.IntN(3) > 0 {
				fr.Token -= 1 + uint64(rng.IntN(int(fr.Token-1)))
			} else if fr.Epoch > 1 {
				fr.Epoch--
				fr.Token += uint64(rng.IntN(20)) // a higher token of an older epoch is still older
			}
		case r < 25: // late, or a repeat
			fr.Tick -= uint64(rng.IntN(3))
		case r < 33: // a stored notice of the owner
			fr.Notice, fr.Topic = true, "~stored"
		default:
			tick += uint64(rng.IntN(3))
		}
		frames = append(frames, fr)
	}
	// Frames arrive 0-600 ms apart: now and then the followed grant falls silent for longer than
	// DefaultFrameStale, and another grant's frame is followed (the rule against a forged one).
	// What passes is shown (Rewinds) and held until stored (Holdback), as the page does in its two
	// modes: a verdict per message.
	type verdict struct {
		Pass, Rewound bool
		Released      []int // held frames released, by their index in frames
		HeldRewound   bool
	}
	var f wire.FrameFilter
	var rw wire.Rewinds
	hold := wire.Holdback[int]{Max: 64}
	var want []verdict
	passed, released, rewinds := 0, 0, 0
	t0 := time.Unix(0, 0)
	for i := range frames {
		frames[i].At += rng.Int64N(600)
		if i > 0 {
			frames[i].At += frames[i-1].At
		}
	}
	for i, fr := range frames {
		var v verdict
		if fr.Notice {
			v.Released, v.HeldRewound = hold.Notice(wire.StoredNotice{Line: wire.Line{Epoch: fr.Epoch, Token: fr.Token, Reverts: fr.Reverts}, Stored: fr.Stored})
		} else {
			st := wire.FrameStamp{Epoch: fr.Epoch, Token: fr.Token, Tick: fr.Tick, Index: fr.Index, Stored: fr.Stored, Reverts: fr.Reverts}
			v.Pass = f.PassAt(fr.Topic, st, t0.Add(time.Duration(fr.At)*time.Millisecond))
			if v.Pass {
				passed++
				v.Rewound = rw.Shown(st)
				v.Released, v.HeldRewound = hold.Frame(st, i)
			}
		}
		if v.Released == nil {
			v.Released = []int{}
		}
		released += len(v.Released)
		if v.Rewound {
			rewinds++
		}
		want = append(want, v)
	}
	js, _ := json.Marshal(frames)
	var got []verdict
	if err := b.Eval(fmt.Sprintf(`import('/demo/wire.js').then(m => { const f = new m.FrameFilter(), rw = new m.Rewinds(), hold = new m.Holdback(64);
		return %s.map((x, i) => {
			const st = {epoch: BigInt(x.Epoch), token: BigInt(x.Token), tick: BigInt(x.Tick), index: BigInt(x.Index), stored: BigInt(x.Stored), reverts: BigInt(x.Reverts)};
			const v = {Pass: false, Rewound: false, Released: [], HeldRewound: false};
			let h = null;
			if (x.Notice) h = hold.notice(st);
			else if ((v.Pass = f.pass(x.Topic, st, x.At))) { v.Rewound = rw.shown(st); h = hold.frame(st, i); }
			if (h) { v.Released = h.released; v.HeldRewound = h.rewound; }
			return v;
		}); })`, js), &got); err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if i >= len(got) || !reflect.DeepEqual(got[i], want[i]) {
			var g any
			if i < len(got) {
				g = got[i]
			}
			t.Fatalf("message %d %+v: the page says %+v, the Go code %+v (%d verdicts)", i, frames[i], g, want[i], len(got))
		}
	}
	if passed < len(frames)/4 || passed > len(frames)*9/10 || released < passed/4 || rewinds < 5 || hold.Unconfirmed() == 0 {
		t.Fatalf("%d of %d frames passed, %d released by Holdback (%d unconfirmed), %d rewinds: the sequence tests nothing",
			passed, len(frames), released, hold.Unconfirmed(), rewinds)
	}
	t.Logf("%d frames passed, %d rewinds, %d released by Holdback (%d unconfirmed, %d overflowed)",
		passed, rewinds, released, hold.Unconfirmed(), hold.Overflowed())
	t.Logf("%d ids × 3 shard counts, %d messages: the page and the Go code agree", len(ids), len(frames))
	if errs := b.JSErrors(); len(errs) > 0 {
		t.Errorf("the page logged errors: %v", errs)
	}
}
