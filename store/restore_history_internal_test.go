package store

import (
	"fmt"
	"strings"
	"testing"
)

// The cluster record keeps the last restoreHistory restores, newest first, each ID once per
// commit, and a retry finds the epoch its ID committed.
func TestRestoredByKeepsTheLastRestores(t *testing.T) {
	h := ""
	for e := uint64(2); e < 2+restoreHistory+5; e++ {
		h = restoredBy([]string{fmt.Sprint("r", e), "", fmt.Sprint("r", e)}, e, h)
	}
	toks := strings.Fields(h)
	if len(toks) != restoreHistory || toks[0] != fmt.Sprintf("r%d@%d", 2+restoreHistory+4, 2+restoreHistory+4) {
		t.Fatalf("history %q: want the last %d, newest first", h, restoreHistory)
	}
	if e, ok := restoredEpoch(h, "r10"); !ok || e != 10 {
		t.Fatalf("r10 = %d, %v; want epoch 10", e, ok)
	}
	if _, ok := restoredEpoch(h, "r2"); ok {
		t.Fatal("r2 is older than the history and still found")
	}
	if _, ok := restoredEpoch(h, ""); ok {
		t.Fatal("the empty ID was found")
	}
	if got := restoredBy([]string{"t", "a", "t"}, 3, "x@2"); got != "t@3 a@3 x@2" {
		t.Fatalf("takeover of its own claim: %q; want each ID once", got)
	}
}
