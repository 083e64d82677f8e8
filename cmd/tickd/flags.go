package main

import (
	"fmt"
	"strconv"
)

// syncFlag is --sync of tickd and tickd server: a boolean that also takes DESIGN.md's spelling,
// --sync always (JetStream's sync_interval: always, the durable single profile): --sync,
// --sync=always, --sync always, --sync=true; --sync=false turns it off.
type syncFlag bool

func (s *syncFlag) IsBoolFlag() bool { return true }

func (s *syncFlag) String() string {
	if s != nil && *s {
		return "always"
	}
	return "false"
}

func (s *syncFlag) Set(v string) error {
	if v == "always" {
		*s = true
		return nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return fmt.Errorf("want --sync (or --sync always), or --sync=false")
	}
	*s = syncFlag(b)
	return nil
}

// syncArgs joins "--sync always" into "--sync=always" (a boolean flag takes no separate value).
func syncArgs(args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		if (a == "--sync" || a == "-sync") && i+1 < len(args) && args[i+1] == "always" {
			a += "=always"
			i++
		}
		out = append(out, a)
	}
	return out
}
