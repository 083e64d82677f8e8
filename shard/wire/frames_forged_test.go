package wire_test

import (
	"errors"
	"testing"
	"time"

	"github.com/tickfence/tickfence/shard/wire"
)

// TestForgedFrameBlindsForStaleOnly: one frame stamped with a grant nobody holds (token 2^62)
// hides the real owner's frames for Stale at most; then they are shown again. A watcher that can
// read the store (Verify) never follows the forgery at all.
func TestForgedFrameBlindsForStaleOnly(t *testing.T) {
	t0 := time.Unix(1000, 0)
	real := func(tick uint64) wire.FrameStamp { return wire.FrameStamp{Epoch: 1, Token: 7, Tick: tick} }
	forged := wire.FrameStamp{Epoch: 1, Token: 1 << 62, Tick: 1}

	var f wire.FrameFilter
	if !f.PassAt("", real(1), t0) {
		t.Fatal("the owner's first frame")
	}
	if !f.PassAt("", forged, t0.Add(10*time.Millisecond)) {
		t.Fatal("without Verify, a newer grant is followed at first")
	}
	shownAt := time.Time{}
	for i := uint64(2); i < 200; i++ {
		now := t0.Add(time.Duration(i) * 50 * time.Millisecond)
		if f.PassAt("", real(i), now) {
			shownAt = now
			break
		}
	}
	if shownAt.IsZero() {
		t.Fatal("the real owner's frames were never shown again after one forged frame")
	}
	if d := shownAt.Sub(t0.Add(10 * time.Millisecond)); d > wire.DefaultFrameStale+100*time.Millisecond {
		t.Errorf("the real owner's frames came back %v after the forgery, want within %v", d, wire.DefaultFrameStale)
	}
	// The owner's frames keep passing, and a zombie's older one is still dropped.
	if !f.PassAt("", real(300), shownAt.Add(50*time.Millisecond)) {
		t.Error("the owner's next frame")
	}
	if f.PassAt("", wire.FrameStamp{Epoch: 1, Token: 3, Tick: 900}, shownAt.Add(60*time.Millisecond)) {
		t.Error("a zombie's frame (older grant) passed while the owner sends")
	}

	// With Verify, the forged grant is never followed.
	v := wire.FrameFilter{Verify: func() (uint64, uint64, error) { return 1, 7, nil }}
	if !v.PassAt("", real(1), t0) || v.PassAt("", forged, t0.Add(time.Millisecond)) || !v.PassAt("", real(2), t0.Add(2*time.Millisecond)) {
		t.Error("with Verify: want the owner's frames shown and the forged one dropped")
	}
	// A Verify that fails judges without it.
	e := wire.FrameFilter{Verify: func() (uint64, uint64, error) { return 0, 0, errors.New("store unreachable") }}
	if !e.PassAt("", real(1), t0) {
		t.Error("with a failing Verify: the owner's frame")
	}
}

// TestJSONTrailingDataRefused: a JSON command followed by anything but white space is
// bad_request, a stray } or ] included (encoding/json's More does not see those).
func TestJSONTrailingDataRefused(t *testing.T) {
	subj := wire.Subject(0, "a")
	for _, body := range []string{`{"type":"x"}}`, `{"type":"x"}]`, `{"type":"x"} {}`, `{"type":"x"},`} {
		_, err := wire.DecodeRequest(subj, "r1", wire.ContentJSON, []byte(body), 1)
		var werr *wire.Error
		if !errors.As(err, &werr) || werr.Code != wire.CodeBadRequest {
			t.Errorf("%s: %v, want bad_request", body, err)
		}
	}
	if _, err := wire.DecodeRequest(subj, "r1", wire.ContentJSON, []byte("{\"type\":\"x\"} \n"), 1); err != nil {
		t.Errorf("trailing white space: %v", err)
	}
}

// TestForgedTickUnderCurrentGrant: one frame stamped with the owner's own grant (its epoch and
// token are in every frame a watcher sees) and a huge tick hides the owner's next frames for
// Stale at most, with or without Verify. (From the review of issue 33.)
func TestForgedTickUnderCurrentGrant(t *testing.T) {
	t0 := time.Unix(1000, 0)
	real := func(tick uint64) wire.FrameStamp { return wire.FrameStamp{Epoch: 1, Token: 7, Tick: tick} }
	forged := wire.FrameStamp{Epoch: 1, Token: 7, Tick: 1 << 62}
	for _, verify := range []bool{false, true} {
		f := wire.FrameFilter{}
		if verify {
			f.Verify = func() (uint64, uint64, error) { return 1, 7, nil }
		}
		if !f.PassAt("", real(1), t0) {
			t.Fatal("the owner's first frame")
		}
		f.PassAt("", forged, t0.Add(10*time.Millisecond))
		var back time.Time
		for i := uint64(2); i < 400; i++ { // 20 s of the owner's frames, every 50 ms
			now := t0.Add(time.Duration(i) * 50 * time.Millisecond)
			if f.PassAt("", real(i), now) && back.IsZero() {
				back = now
			}
		}
		if back.IsZero() || back.Sub(t0) > wire.DefaultFrameStale+200*time.Millisecond {
			t.Errorf("verify=%v: after a forged tick 2^62 under the owner's grant, its frames came back at %v (want within %v)", verify, back.Sub(t0), wire.DefaultFrameStale)
		}
	}
}

// TestVerifiedWatcherFollowsNoOlderGrant: a watcher that reads the store follows only the
// shard's current grant: when the owner falls silent, a zombie's older grant is not followed.
// (From the review of issue 33.)
func TestVerifiedWatcherFollowsNoOlderGrant(t *testing.T) {
	t0 := time.Unix(1000, 0)
	f := wire.FrameFilter{Verify: func() (uint64, uint64, error) { return 1, 7, nil }}
	if !f.PassAt("", wire.FrameStamp{Epoch: 1, Token: 7, Tick: 10}, t0) {
		t.Fatal("the owner's frame")
	}
	if f.PassAt("", wire.FrameStamp{Epoch: 1, Token: 3, Tick: 99}, t0.Add(3*time.Second)) {
		t.Error("a verified watcher showed a frame of grant (1,3) while the shard's grant is (1,7)")
	}
	if !f.PassAt("", wire.FrameStamp{Epoch: 1, Token: 7, Tick: 11}, t0.Add(3100*time.Millisecond)) {
		t.Error("the owner's next frame")
	}
}
