package main

import (
	"fmt"
	"io"
	"os"
)

// progress is a line of progress on stderr, redrawn in place (\r) and cleared (\x1b[K) when done:
// only when stderr is a terminal and the output is not --json. Captured (a pipe, a file, a CI
// log) it writes nothing: the command's own last line says what was done.
type progress struct {
	w     io.Writer
	on    bool
	shown bool
}

func newProgress(json bool) *progress {
	fi, err := os.Stderr.Stat()
	return &progress{w: os.Stderr, on: !json && err == nil && fi.Mode()&os.ModeCharDevice != 0}
}

// show redraws the line.
func (p *progress) show(format string, args ...any) {
	if !p.on {
		return
	}
	fmt.Fprintf(p.w, "\r"+format+"\x1b[K", args...)
	p.shown = true
}

// clear erases the line, if one was shown.
func (p *progress) clear() {
	if p.shown {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.shown = false
	}
}
