package main

import (
	"fmt"
	"strings"

	"github.com/tickfence/tickfence/store"
)

// presentText is the players present in an instance, as instance get prints them.
func presentText(ps []store.Presence) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d:", len(ps))
	for i, p := range ps {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, " %s (since tick %d, last heard at %d)", p.Player, p.Since, p.Seen)
	}
	return b.String()
}

// presentJSON is the players present in an instance, as instance get --json prints them.
func presentJSON(ps []store.Presence) []map[string]any {
	out := make([]map[string]any, 0, len(ps))
	for _, p := range ps {
		out = append(out, map[string]any{"player": p.Player, "since": p.Since, "seen": p.Seen})
	}
	return out
}
