package job

import (
	"log/slog"
	"os"
)

// logs are the loggers of one process's layers.
type logs struct {
	runtime    *slog.Logger // the runtime and the rendezvous client
	tcp        *slog.Logger // the data-plane transport
	membership *slog.Logger // the Raft membership
}

// newLogs gives every layer the logger given, or, when it is nil, text on
// stderr at the level pgasLog (PGAS_LOG: debug, info, warn, error) names:
//   - the runtime logs at that level, warn when PGAS_LOG is unset or not a
//     level: what a user must see (fencing, cut-offs, lost checkpoints)
//     is a warning or an error, while the routine of a job (views
//     applied, failures detected and recovered, which the launcher and
//     the applications report once for the whole job) is info, shown with
//     PGAS_LOG=info (gaspirun -v);
//   - the transport at warn or above: connections closing at the end of a
//     job are routine, and the runtime reports the ones that matter;
//   - the membership at that level, error when PGAS_LOG is unset or not a
//     level: its events reach the user through the runtime (view applied,
//     spare promoted) and the launcher, and its own log is mostly Raft's
//     dial retries to a process that just died.
func newLogs(given *slog.Logger, pgasLog string) logs {
	if given != nil {
		return logs{runtime: given, tcp: given, membership: given}
	}
	level, set := parseLevel(pgasLog)
	runtime, membership := slog.LevelWarn, slog.LevelError
	if set {
		runtime, membership = level, level
	}
	return logs{
		runtime:    stderrAt(runtime),
		tcp:        stderrAt(max(runtime, slog.LevelWarn)),
		membership: stderrAt(membership),
	}
}

// parseLevel parses PGAS_LOG's value; set is false when it names no level.
func parseLevel(s string) (level slog.Level, set bool) {
	if s == "" || level.UnmarshalText([]byte(s)) != nil {
		return 0, false
	}
	return level, true
}

func stderrAt(l slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}
