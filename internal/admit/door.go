package admit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// LogConfig bounds the refusal lines of one Door.
type LogConfig struct {
	// Interval is the period of the summary line. Must be > 0.
	Interval time.Duration
	// Burst is how many refusals per interval are logged line by line
	// before the rest only count towards the summary. >= 0.
	Burst int
	// Flood is how many handshakes closed by the other end in one
	// interval make the summary a warning rather than information; below
	// floodClosed (0 included) counts as floodClosed. A listener that
	// thousands of a job's processes may dial sets more: their dials given
	// up as they leave are churn, not a flood.
	Flood int
}

// DefaultLogConfig: five lines, then one summary every 10 s.
func DefaultLogConfig() LogConfig { return LogConfig{Interval: 10 * time.Second, Burst: 5} }

// maxSeenSources bounds the sources remembered for "first refusal from a
// source"; past it a new source is logged only within the burst.
// maxWindowSources bounds the distinct sources counted for a summary.
const (
	maxSeenSources   = 256
	maxWindowSources = 4096
)

// limiter decides which refusals are logged on their own. Pure: the
// caller opens a window (and arms a timer) when note says so, and closes it
// with flush.
type limiter struct {
	burst   int
	open    bool                // a window is running (its timer is armed)
	logged  int                 // lines logged in this window
	count   int                 // refusals counted, not logged, in this window
	closed  int                 // of those, handshakes closed or reset by the other end
	shed    int                 // connections shed in this window (never logged one by one)
	sources map[string]struct{} // distinct sources of those
	seen    map[string]struct{} // sources ever logged
}

func newLimiter(burst int) *limiter {
	return &limiter{burst: burst, sources: map[string]struct{}{}, seen: map[string]struct{}{}}
}

// note records one refusal from src. It reports whether to log it on its
// own, and whether a new window starts (the caller arms the summary timer).
func (l *limiter) note(src string, benign bool) (log, start bool) {
	if !l.open {
		l.open, start = true, true
	}
	_, known := l.seen[src]
	if l.logged < l.burst || (!known && len(l.seen) < maxSeenSources) {
		l.logged++
		if !known && len(l.seen) < maxSeenSources {
			l.seen[src] = struct{}{}
		}
		return true, start
	}
	l.count++
	if benign {
		l.closed++
	}
	if len(l.sources) < maxWindowSources {
		l.sources[src] = struct{}{}
	}
	return false, start
}

// noteShed records one connection from src shed by the gate; it reports
// whether a new window starts.
func (l *limiter) noteShed(src string) (start bool) {
	if !l.open {
		l.open, start = true, true
	}
	l.shed++
	if len(l.sources) < maxWindowSources {
		l.sources[src] = struct{}{}
	}
	return start
}

// window is what a summary line reports.
type window struct {
	refused, shed int  // not logged one by one
	closed        int  // of refused: closed or reset by the other end before the handshake ended
	sources       int  // distinct sources of those
	more          bool // sources is a lower bound
}

// flush ends the window and returns what went unlogged in it.
func (l *limiter) flush() window {
	w := window{refused: l.count, closed: l.closed, shed: l.shed, sources: len(l.sources), more: len(l.sources) >= maxWindowSources}
	l.open, l.logged, l.count, l.closed, l.shed = false, 0, 0, 0, 0
	clear(l.sources)
	return w
}

// Door is one listener's use of a Gate: its counters and its refusal log.
type Door struct {
	g    *Gate
	name string
	log  *slog.Logger
	cfg  LogConfig

	// after arms the summary timer; a field so tests can drive it.
	after func(time.Duration, func()) (stop func() bool)

	accepted, authenticated, shed, refused, timedOut atomic.Uint64
	pending                                          atomic.Int64

	mu     sync.Mutex
	lim    *limiter
	stop   func() bool // the armed summary timer, nil when none
	closed bool
}

// Door opens a door on g for the listener name (a prefix of its log lines,
// e.g. "tcp"). A nil logger discards; a zero LogConfig takes the default.
func (g *Gate) Door(name string, log *slog.Logger, cfg LogConfig) *Door {
	if cfg.Interval <= 0 {
		cfg = LogConfig{Interval: DefaultLogConfig().Interval, Burst: DefaultLogConfig().Burst, Flood: cfg.Flood}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Door{
		g: g, name: name, log: log, cfg: cfg,
		lim: newLimiter(max(cfg.Burst, 0)),
		after: func(d time.Duration, f func()) func() bool {
			return time.AfterFunc(d, f).Stop
		},
	}
}

// Stats returns the door's counters.
func (d *Door) Stats() Stats {
	return Stats{
		Accepted:      d.accepted.Load(),
		Authenticated: d.authenticated.Load(),
		Shed:          d.shed.Load(),
		Refused:       d.refused.Load(),
		TimedOut:      d.timedOut.Load(),
		Pending:       int(d.pending.Load()),
	}
}

// Authenticated counts a connection that passed the handshake.
func (d *Door) Authenticated() { d.authenticated.Add(1) }

// Refuse counts a refused connection from remote ("ip:port") and logs it
// at Warn as "<name>: connection refused" with remote, err and attrs,
// within the bounds of the LogConfig; a handshake that ran into its
// deadline also counts as TimedOut. The caller has closed the connection.
func (d *Door) Refuse(remote string, err error, attrs ...any) {
	d.refused.Add(1)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		d.timedOut.Add(1)
	}
	// A handshake the other end closed or reset: a port probe (a peer
	// checking that a process still listens), a dialer that gave up on a
	// starved host, a process leaving or killed. Nothing was refused on
	// the evidence of a wrong token: logged one by one only for debugging,
	// and a summary of only those is a warning only for a flood of them.
	closedEarly := errors.Is(err, io.EOF)
	reset := errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	log, start := d.lim.note(SourceOf(remote), closedEarly || reset)
	if start {
		d.stop = d.after(d.cfg.Interval, d.summary)
	}
	d.mu.Unlock()
	switch {
	case log && closedEarly:
		d.log.Debug(d.name+": connection closed before its hello", append([]any{"remote", remote, "err", err}, attrs...)...)
	case log && reset:
		d.log.Debug(d.name+": connection reset during its handshake", append([]any{"remote", remote, "err", err}, attrs...)...)
	case log:
		d.log.Warn(d.name+": connection refused", append([]any{"remote", remote, "err", err}, attrs...)...)
	}
}

// noteShed records that the gate shed a pending connection of this door
// from src; sheds appear only in the summary line.
func (d *Door) noteShed(src string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.closed && d.lim.noteShed(src) {
		d.stop = d.after(d.cfg.Interval, d.summary)
	}
}

// summary writes the summary line of the window that ends now.
func (d *Door) summary() {
	d.mu.Lock()
	w := d.lim.flush()
	d.stop = nil
	d.mu.Unlock()
	d.logSummary(w)
}

func (d *Door) logSummary(w window) {
	if w.refused == 0 && w.shed == 0 {
		return
	}
	srcs := fmt.Sprint(w.sources)
	if w.more {
		srcs = "at least " + srcs
	}
	st := d.Stats()
	// Handshakes the other end closed or reset are dialers that gave up
	// or left (a few dozen in 10 s on a host starved by hundreds of
	// processes), unless there are a flood's worth of them.
	level := slog.LevelWarn
	if w.shed == 0 && w.refused == w.closed && w.closed < max(d.cfg.Flood, floodClosed) {
		level = slog.LevelInfo
	}
	d.log.Log(context.Background(), level, summaryLine(d.name, w.refused, w.shed, srcs, d.cfg.Interval),
		"refused_total", st.Refused, "timed_out_total", st.TimedOut, "shed_total", st.Shed)
}

// floodClosed is how many handshakes closed by the other end, in one
// summary window, make the summary a warning.
const floodClosed = 100

// summaryLine is the message of a summary, e.g. "tcp: refused 1200
// connections and shed 300 unauthenticated ones from 1 sources in the last
// 10s (not logged one by one)".
func summaryLine(name string, refused, shed int, sources string, interval time.Duration) string {
	return fmt.Sprintf("%s: refused %d connections and shed %d unauthenticated ones from %s sources in the last %v (not logged one by one)",
		name, refused, shed, sources, interval)
}

// Close stops the summary timer and writes the summary of the refusals not
// logged yet. Later refusals are counted but not logged. Idempotent.
func (d *Door) Close() {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	d.closed = true
	if d.stop != nil {
		d.stop()
		d.stop = nil
	}
	w := d.lim.flush()
	d.mu.Unlock()
	d.logSummary(w)
}
