// Package watch keeps a store watch open: the node's control watches and the host's assignment
// watch reopen the same way after a watch fails or ends.
package watch

import (
	"context"
	"log/slog"
	"time"
)

// Keep feeds every event of a watch to handle until ctx ends or handle returns true. A
// watch that fails to start or ends is logged and opened again after a backoff that grows while
// watches keep failing quickly (reset once one lived 10 s); ended runs after each watch that ended.
func Keep[T any](ctx context.Context, log *slog.Logger, what string, open func() (<-chan T, error),
	handle func(T) bool, ended func()) {
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		opened := time.Now()
		ch, err := open()
		if err != nil {
			log.Warn("cannot open the "+what+"; retrying", "err", err, "backoff", backoff)
		} else {
			for ev := range ch {
				if handle(ev) {
					return
				}
			}
			if ctx.Err() != nil {
				return
			}
			log.Warn("the "+what+" ended; reopening it", "backoff", backoff)
			if ended != nil {
				ended()
			}
			if time.Since(opened) > 10*time.Second {
				backoff = 50 * time.Millisecond // it worked for a while: reopen at once
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}
