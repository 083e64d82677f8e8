package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
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

// parseFlags parses args into fs (made with flag.ContinueOnError) the way the peers' CLIs do:
// -h or --help prints the help on stdout and exits 0; a bad flag or value is one line on stderr
// naming the help, and exit 2.
func parseFlags(fs *flag.FlagSet, args []string) {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.SetOutput(os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(os.Stdout)
		fs.Usage()
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v (see %s --help)\n", fs.Name(), err, fs.Name())
		os.Exit(2)
	}
}
