package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/tickfence/tickfence/actor"
)

// labelFlag is --label K=V: comma-separated, or repeated; they add up.
type labelFlag struct{ m map[string]string }

func (l *labelFlag) String() string { return formatLabels(l.m) }

func (l *labelFlag) Set(s string) error {
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("label %q: want K=V", kv)
		}
		if err := actor.ValidLabel(k, v); err != nil {
			return err
		}
		if l.m == nil {
			l.m = map[string]string{}
		}
		l.m[k] = v
	}
	if len(l.m) > actor.MaxLabels {
		return fmt.Errorf("%d labels: at most %d", len(l.m), actor.MaxLabels)
	}
	return nil
}

// formatLabels writes labels as k=v,k2=v2 in key order ("-" for none).
func formatLabels(m map[string]string) string {
	if len(m) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k + "=" + m[k])
	}
	return b.String()
}
