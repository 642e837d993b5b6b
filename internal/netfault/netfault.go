// Package netfault injects network faults into one process's connections,
// for the chaos suite (test/chaos) and for anyone who wants to see how a
// job behaves on a bad network without root or kernel support.
//
// A process started with PGAS_NETFAULTS=DIR wraps every connection it
// accepts or dials (data plane, membership, control) in a faulty
// connection, and a watcher re-reads DIR/rules every PollInterval. A rule
// applies to a connection when it names this process; the other end of the
// connection sees the consequences (stalls, silence) through TCP, as it
// would on a real network. Without PGAS_NETFAULTS nothing is wrapped and
// nothing is read: the cost is one environment lookup at start.
//
// The rules file has one rule per line, blank lines and #-comments
// ignored:
//
//	proc=2 partition          # nothing in or out of process 2
//	proc=1 delay=20ms         # every read and write of process 1 waits 20ms
//	proc=3 loss=0.05          # 5% of process 3's writes are "lost": each
//	                          # costs a retransmission timeout (200ms,
//	                          # doubling while losses follow each other), as
//	                          # a lost TCP segment does
//	proc=0 rate=1000000       # process 0 sends at most 1,000,000 bytes/s
//	proc=* delay=5ms          # every process
//
// Several settings may share a line (proc=1 delay=5ms loss=0.01). A rules
// file that does not parse leaves the previous rules in force and is
// logged once per change. The loss model keeps TCP's contract (bytes are
// never dropped from the stream, only late), so the runtime above sees what
// a lossy link does to it: latency spikes, not corruption.
package netfault

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// EnvVar names the directory whose rules file a process obeys.
const EnvVar = "PGAS_NETFAULTS"

// RulesFile is the file in that directory the watcher reads.
const RulesFile = "rules"

// PollInterval is how often the rules file is re-read.
const PollInterval = 20 * time.Millisecond

// baseRTO is the cost of one lost segment: Linux's minimum retransmission
// timeout.
const baseRTO = 200 * time.Millisecond

// Rule is the fault set in force for one process.
type Rule struct {
	Partition bool          // no byte in or out
	Delay     time.Duration // added to every read and write
	Loss      float64       // probability that a write costs a retransmission timeout
	Rate      int64         // bytes per second a write may send; 0: unlimited
}

// IsZero reports whether r injects nothing.
func (r Rule) IsZero() bool { return r == Rule{} }

func (r Rule) String() string {
	var parts []string
	if r.Partition {
		parts = append(parts, "partition")
	}
	if r.Delay > 0 {
		parts = append(parts, "delay="+r.Delay.String())
	}
	if r.Loss > 0 {
		parts = append(parts, "loss="+strconv.FormatFloat(r.Loss, 'g', -1, 64))
	}
	if r.Rate > 0 {
		parts = append(parts, "rate="+strconv.FormatInt(r.Rate, 10))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

// Parse reads a rules file and returns the rule for process self (the
// settings of every line naming self or *, merged in order).
func Parse(text string, self uint32) (Rule, error) {
	var r Rule
	for n, line := range strings.Split(text, "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		who, ok := strings.CutPrefix(fields[0], "proc=")
		if !ok {
			return Rule{}, fmt.Errorf("netfault: line %d: %q does not start with proc=N or proc=*", n+1, line)
		}
		match := who == "*"
		if !match {
			p, err := strconv.ParseUint(who, 10, 32)
			if err != nil {
				return Rule{}, fmt.Errorf("netfault: line %d: proc=%s is neither a process number nor *", n+1, who)
			}
			match = uint32(p) == self
		}
		var lr Rule
		for _, f := range fields[1:] {
			k, v, _ := strings.Cut(f, "=")
			var err error
			switch k {
			case "partition":
				lr.Partition = true
			case "delay":
				lr.Delay, err = time.ParseDuration(v)
				if err == nil && lr.Delay < 0 {
					err = errors.New("negative")
				}
			case "loss":
				lr.Loss, err = strconv.ParseFloat(v, 64)
				if err == nil && (lr.Loss < 0 || lr.Loss > 1) {
					err = errors.New("not in [0, 1]")
				}
			case "rate":
				lr.Rate, err = strconv.ParseInt(v, 10, 64)
				if err == nil && lr.Rate < 0 {
					err = errors.New("negative")
				}
			default:
				err = errors.New("unknown setting; use partition, delay=D, loss=P or rate=BYTES_PER_S")
			}
			if err != nil {
				return Rule{}, fmt.Errorf("netfault: line %d: %s: %v", n+1, f, err)
			}
		}
		if match {
			r.Partition = r.Partition || lr.Partition
			r.Delay = max(r.Delay, lr.Delay)
			r.Loss = max(r.Loss, lr.Loss)
			if lr.Rate > 0 && (r.Rate == 0 || lr.Rate < r.Rate) {
				r.Rate = lr.Rate
			}
		}
	}
	return r, nil
}

// Injector holds the rule in force for this process and wraps connections.
type Injector struct {
	self uint32
	path string
	log  *slog.Logger
	rule atomic.Pointer[Rule]

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every rule change
	lastErr string

	stop chan struct{}
	once sync.Once
	wg   sync.WaitGroup
}

// FromEnv starts an injector for process self when PGAS_NETFAULTS is set,
// and returns nil (wrap nothing) otherwise. The caller owns it: its
// watcher runs until Close (package job closes it with the runtime). It
// logs rule changes to stderr.
func FromEnv(self uint32) *Injector {
	dir := os.Getenv(EnvVar)
	if dir == "" {
		return nil
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("proc", int(self))
	return New(dir, self, log)
}

// New starts an injector that obeys dir/rules for process self. Close stops
// its watcher.
func New(dir string, self uint32, log *slog.Logger) *Injector {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	in := &Injector{self: self, path: filepath.Join(dir, RulesFile), log: log.With("layer", "netfault"),
		changed: make(chan struct{}), stop: make(chan struct{})}
	in.rule.Store(&Rule{})
	in.reload()
	in.wg.Add(1)
	go in.watch()
	return in
}

// Close stops the watcher; connections keep the last rule. A nil
// injector has nothing to stop.
func (in *Injector) Close() {
	if in == nil {
		return
	}
	in.once.Do(func() { close(in.stop) })
	in.wg.Wait()
}

// Rule returns the rule in force.
func (in *Injector) Rule() Rule { return *in.rule.Load() }

func (in *Injector) watch() {
	defer in.wg.Done()
	t := time.NewTicker(PollInterval)
	defer t.Stop()
	for {
		select {
		case <-in.stop:
			return
		case <-t.C:
			in.reload()
		}
	}
}

func (in *Injector) reload() {
	b, err := os.ReadFile(in.path)
	if errors.Is(err, os.ErrNotExist) {
		b, err = nil, nil
	}
	var r Rule
	if err == nil {
		r, err = Parse(string(b), in.self)
	}
	if err != nil {
		if msg := err.Error(); msg != in.lastErr {
			in.lastErr = msg
			in.log.Error("netfault: rules not applied; the previous rules stay in force", "file", in.path, "err", err)
		}
		return
	}
	in.lastErr = ""
	if old := in.rule.Load(); *old != r {
		in.rule.Store(&r)
		in.log.Warn("netfault: rule in force", "rule", r.String())
		in.mu.Lock()
		close(in.changed)
		in.changed = make(chan struct{})
		in.mu.Unlock()
	}
}

func (in *Injector) changes() <-chan struct{} {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.changed
}

// Hold applies this process's rule to a transfer that goes through no
// connection (the shared-memory transport's rings, transport/shm's
// Faults): a send of n bytes waits for the delay, a loss's retransmission
// timeout and the rate, and every transfer waits while the process is
// partitioned, before and after. It returns ctx's error if ctx ends
// first.
func (in *Injector) Hold(ctx context.Context, n int, send bool) error {
	if err := in.wait(ctx, -1); err != nil {
		return err
	}
	r := in.Rule()
	wait := r.Delay
	if send && r.Loss > 0 && rand.Float64() < r.Loss {
		wait += baseRTO
	}
	if send && r.Rate > 0 {
		wait += time.Duration(float64(n) / float64(r.Rate) * float64(time.Second))
	}
	if wait <= 0 {
		return nil
	}
	if err := in.wait(ctx, wait); err != nil {
		return err
	}
	return in.wait(ctx, -1)
}

// wait waits d, or while the process is partitioned when d < 0, or until
// ctx ends.
func (in *Injector) wait(ctx context.Context, d time.Duration) error {
	until := time.Now().Add(d)
	for {
		if d < 0 && !in.Rule().Partition {
			return nil
		}
		wait := time.Hour
		if d >= 0 {
			wait = time.Until(until)
			if wait <= 0 {
				return nil
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-in.changes():
		case <-t.C:
		}
		t.Stop()
	}
}

// Wrap returns c with this process's faults applied; a nil injector returns
// c itself.
func (in *Injector) Wrap(c net.Conn) net.Conn {
	if in == nil {
		return c
	}
	return &conn{Conn: c, in: in, closed: make(chan struct{})}
}

// Listener returns ln whose accepted connections are wrapped; a nil
// injector returns ln itself.
func (in *Injector) Listener(ln net.Listener) net.Listener {
	if in == nil {
		return ln
	}
	return &listener{Listener: ln, in: in}
}

type listener struct {
	net.Listener
	in *Injector
}

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.in.Wrap(c), nil
}

// conn applies the rule in force to every Read and Write.
type conn struct {
	net.Conn
	in        *Injector
	closeOnce sync.Once
	closed    chan struct{}
	rdl, wdl  atomic.Int64 // deadlines, UnixNano; 0: none
	losses    atomic.Int32 // consecutive lost writes
}

// NetConn returns the wrapped connection, for socket options.
func (c *conn) NetConn() net.Conn { return c.Conn }

func (c *conn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

func (c *conn) SetDeadline(t time.Time) error {
	c.rdl.Store(nanos(t))
	c.wdl.Store(nanos(t))
	return c.Conn.SetDeadline(t)
}

func (c *conn) SetReadDeadline(t time.Time) error {
	c.rdl.Store(nanos(t))
	return c.Conn.SetReadDeadline(t)
}

func (c *conn) SetWriteDeadline(t time.Time) error {
	c.wdl.Store(nanos(t))
	return c.Conn.SetWriteDeadline(t)
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// errTimeout is what a fault-blocked call returns at its deadline: a
// net.Error with Timeout, wrapping os.ErrDeadlineExceeded like a real one.
type errTimeout struct{}

func (errTimeout) Error() string {
	return "netfault: i/o timeout (" + os.ErrDeadlineExceeded.Error() + ")"
}
func (errTimeout) Timeout() bool   { return true }
func (errTimeout) Temporary() bool { return true }
func (errTimeout) Unwrap() error   { return os.ErrDeadlineExceeded }

// hold waits d, or while the process is partitioned when d < 0; it returns
// early with an error on Close or at the deadline dl.
func (c *conn) hold(d time.Duration, dl *atomic.Int64) error {
	var until time.Time
	if d >= 0 {
		until = time.Now().Add(d)
	}
	for {
		if d < 0 && !c.in.Rule().Partition {
			return nil
		}
		now := time.Now()
		if d >= 0 && !now.Before(until) {
			return nil
		}
		wait := time.Duration(1<<63 - 1)
		if d >= 0 {
			wait = until.Sub(now)
		}
		if ns := dl.Load(); ns != 0 {
			left := time.Until(time.Unix(0, ns))
			if left <= 0 {
				return errTimeout{}
			}
			wait = min(wait, left)
		}
		t := time.NewTimer(wait)
		select {
		case <-c.closed:
			t.Stop()
			return net.ErrClosed
		case <-c.in.changes():
		case <-t.C:
		}
		t.Stop()
	}
}

func (c *conn) Read(b []byte) (int, error) {
	if err := c.hold(-1, &c.rdl); err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(b)
	if n > 0 {
		r := c.in.Rule()
		if r.Delay > 0 {
			if herr := c.hold(r.Delay, &c.rdl); herr != nil && err == nil {
				err = herr
			}
		}
		// Bytes that arrived during a partition are not handed over until
		// it heals: the partition cuts both ways.
		if herr := c.hold(-1, &c.rdl); herr != nil && err == nil {
			err = herr
		}
	}
	return n, err
}

func (c *conn) Write(b []byte) (int, error) {
	if err := c.hold(-1, &c.wdl); err != nil {
		return 0, err
	}
	r := c.in.Rule()
	wait := r.Delay
	if r.Loss > 0 && rand.Float64() < r.Loss {
		wait += baseRTO << min(c.losses.Add(1)-1, 5)
	} else {
		c.losses.Store(0)
	}
	if r.Rate > 0 {
		wait += time.Duration(float64(len(b)) / float64(r.Rate) * float64(time.Second))
	}
	if wait > 0 {
		if err := c.hold(wait, &c.wdl); err != nil {
			return 0, err
		}
		if err := c.hold(-1, &c.wdl); err != nil {
			return 0, err
		}
	}
	return c.Conn.Write(b)
}
