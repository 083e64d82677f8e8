package natsserver

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
)

// SlogLogger sends the NATS server's own log to l (Config.Logger), under component=nats-server:
// its warnings and errors (a refused client, a permission violation, a route that cannot
// connect) as warn and error lines; its notices (the start-up banner, JetStream's state) as debug
// lines, seen with --log-level debug.
func SlogLogger(l *slog.Logger) server.Logger { return slogLogger{l.With("component", "nats-server")} }

type slogLogger struct{ l *slog.Logger }

func (s slogLogger) log(level slog.Level, format string, v ...any) {
	if !s.l.Enabled(context.Background(), level) {
		return
	}
	s.l.Log(context.Background(), level, strings.TrimSpace(fmt.Sprintf(format, v...)))
}

func (s slogLogger) Noticef(format string, v ...any) { s.log(slog.LevelDebug, format, v...) }
func (s slogLogger) Warnf(format string, v ...any)   { s.log(slog.LevelWarn, format, v...) }
func (s slogLogger) Fatalf(format string, v ...any)  { s.log(slog.LevelError, format, v...) }
func (s slogLogger) Errorf(format string, v ...any)  { s.log(slog.LevelError, format, v...) }
func (s slogLogger) Debugf(format string, v ...any)  { s.log(slog.LevelDebug, format, v...) }
func (s slogLogger) Tracef(format string, v ...any)  { s.log(slog.LevelDebug, format, v...) }
