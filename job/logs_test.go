package job

import (
	"context"
	"log/slog"
	"testing"
)

// Rule: PGAS_LOG is read once and gives each layer its level: the runtime
// warn by default, the transport never below warn, the membership error
// by default (see newLogs).
func TestLogLevels(t *testing.T) {
	cases := []struct {
		pgasLog                  string
		runtime, tcp, membership slog.Level
	}{
		{"", slog.LevelWarn, slog.LevelWarn, slog.LevelError},
		{"nonsense", slog.LevelWarn, slog.LevelWarn, slog.LevelError},
		{"debug", slog.LevelDebug, slog.LevelWarn, slog.LevelDebug},
		{"info", slog.LevelInfo, slog.LevelWarn, slog.LevelInfo},
		{"warn", slog.LevelWarn, slog.LevelWarn, slog.LevelWarn},
		{"error", slog.LevelError, slog.LevelError, slog.LevelError},
	}
	lowest := func(l *slog.Logger) slog.Level {
		for _, lv := range []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError} {
			if l.Enabled(context.Background(), lv) {
				return lv
			}
		}
		return slog.LevelError + 4
	}
	for _, c := range cases {
		l := newLogs(nil, c.pgasLog)
		if got := lowest(l.runtime); got != c.runtime {
			t.Errorf("PGAS_LOG=%q: runtime logs from %v, want %v", c.pgasLog, got, c.runtime)
		}
		if got := lowest(l.tcp); got != c.tcp {
			t.Errorf("PGAS_LOG=%q: transport logs from %v, want %v", c.pgasLog, got, c.tcp)
		}
		if got := lowest(l.membership); got != c.membership {
			t.Errorf("PGAS_LOG=%q: membership logs from %v, want %v", c.pgasLog, got, c.membership)
		}
	}
	given := slog.New(slog.DiscardHandler)
	if l := newLogs(given, "debug"); l.runtime != given || l.tcp != given || l.membership != given {
		t.Error("a logger given in Options is not used by every layer")
	}
}
