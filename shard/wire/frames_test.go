package wire

import "testing"

func TestFrameFilter(t *testing.T) {
	var f FrameFilter
	steps := []struct {
		st   FrameStamp
		pass bool
		why  string
	}{
		{FrameStamp{1, 5, 100}, true, "the first frame"},
		{FrameStamp{1, 5, 101}, true, "the next tick"},
		{FrameStamp{1, 5, 101}, false, "the same tick again"},
		{FrameStamp{1, 5, 99}, false, "an earlier tick under the same grant"},
		{FrameStamp{1, 7, 90}, true, "a new owner (higher token) that restarted from an older stored tick"},
		{FrameStamp{1, 5, 200}, false, "the zombie, however far its ticks ran ahead"},
		{FrameStamp{2, 1, 10}, true, "a restored epoch: its tokens start again"},
		{FrameStamp{1, 9, 500}, false, "a node of the old epoch"},
		{FrameStamp{2, 1, 11}, true, "the restored owner's next tick"},
	}
	for _, s := range steps {
		if got := f.Pass(s.st); got != s.pass {
			t.Fatalf("%s %+v: pass = %v, want %v", s.why, s.st, got, s.pass)
		}
	}
}

func TestParseFrameStamp(t *testing.T) {
	h := map[string]string{HeaderEpoch: "2", HeaderToken: "17", HeaderTick: "4096"}
	st, err := ParseFrameStamp(func(k string) string { return h[k] })
	if err != nil || st != (FrameStamp{2, 17, 4096}) {
		t.Fatalf("stamp %+v, %v", st, err)
	}
	delete(h, HeaderToken)
	if _, err := ParseFrameStamp(func(k string) string { return h[k] }); err == nil {
		t.Fatal("a frame without a token header was accepted")
	}
}
