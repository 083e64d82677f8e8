package wire

import "testing"

func TestFrameFilter(t *testing.T) {
	var f FrameFilter
	steps := []struct {
		topic string
		st    FrameStamp
		pass  bool
		why   string
	}{
		{"", FrameStamp{1, 5, 100, 0, 0, 0}, true, "the first frame"},
		{"", FrameStamp{1, 5, 101, 0, 0, 0}, true, "the next tick"},
		{"", FrameStamp{1, 5, 101, 1, 0, 0}, true, "a second frame of the same tick"},
		{"", FrameStamp{1, 5, 101, 1, 0, 0}, false, "the same frame again"},
		{"", FrameStamp{1, 5, 99, 3, 0, 0}, false, "an earlier tick under the same grant"},
		{"hp", FrameStamp{1, 5, 100, 2, 0, 0}, true, "another topic, ordered on its own (it may arrive after the main subject's later tick)"},
		{"hp", FrameStamp{1, 5, 100, 2, 0, 0}, false, "that topic's frame again"},
		{"", FrameStamp{1, 7, 90, 0, 0, 0}, true, "a new owner (higher token) that restarted from an older stored tick"},
		{"hp", FrameStamp{1, 5, 200, 0, 0, 0}, false, "the zombie on another topic, however far its ticks ran ahead"},
		{"", FrameStamp{1, 5, 200, 0, 0, 0}, false, "the zombie on the main subject"},
		{"hp", FrameStamp{1, 7, 80, 0, 0, 0}, true, "the new owner's first frame on the topic"},
		{"", FrameStamp{2, 1, 10, 0, 0, 0}, true, "a restored epoch: its tokens start again"},
		{"", FrameStamp{1, 9, 500, 0, 0, 0}, false, "a node of the old epoch"},
		{"", FrameStamp{2, 1, 11, 0, 0, 0}, true, "the restored owner's next tick"},
	}
	for _, s := range steps {
		if got := f.Pass(s.topic, s.st); got != s.pass {
			t.Fatalf("%s (topic %q, %+v): pass = %v, want %v", s.why, s.topic, s.st, got, s.pass)
		}
	}
}

func TestParseFrameStamp(t *testing.T) {
	h := map[string]string{HeaderEpoch: "2", HeaderToken: "17", HeaderTick: "4096", HeaderFrame: "3"}
	st, err := ParseFrameStamp(func(k string) string { return h[k] })
	if err != nil || st != (FrameStamp{2, 17, 4096, 3, 4096, 0}) {
		t.Fatalf("stamp %+v, %v", st, err)
	}
	delete(h, HeaderFrame)
	if st, err := ParseFrameStamp(func(k string) string { return h[k] }); err != nil || st.Index != 0 {
		t.Fatalf("without %s: %+v, %v; want index 0", HeaderFrame, st, err)
	}
	delete(h, HeaderToken)
	if _, err := ParseFrameStamp(func(k string) string { return h[k] }); err == nil {
		t.Fatal("a frame without a token header was accepted")
	}
}
