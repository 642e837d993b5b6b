package admit

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// closer records whether the gate closed it.
type closer struct{ closed bool }

func (c *closer) Close() error { c.closed = true; return nil }

func newTestGate(t *testing.T, total, perSource int) *Gate {
	t.Helper()
	g, err := NewGate(Limits{MaxPending: total, MaxPerSource: perSource})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// fakeTimer replaces the summary timer: the test fires it.
type fakeTimer struct {
	armed []func()
}

func (f *fakeTimer) after(_ time.Duration, fn func()) func() bool {
	f.armed = append(f.armed, fn)
	i := len(f.armed) - 1
	return func() bool { stopped := f.armed[i] != nil; f.armed[i] = nil; return stopped }
}

func (f *fakeTimer) fire(t *testing.T) {
	t.Helper()
	for i, fn := range f.armed {
		if fn != nil {
			f.armed[i] = nil
			fn()
			return
		}
	}
	t.Fatal("no summary timer armed")
}

func (f *fakeTimer) live() int {
	n := 0
	for _, fn := range f.armed {
		if fn != nil {
			n++
		}
	}
	return n
}

type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }
func (l *logBuf) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := strings.TrimSpace(l.b.String())
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func newTestDoor(g *Gate, name string, burst int) (*Door, *fakeTimer, *logBuf) {
	lb := &logBuf{}
	d := g.Door(name, slog.New(slog.NewTextHandler(lb, nil)), LogConfig{Interval: 10 * time.Second, Burst: burst})
	ft := &fakeTimer{}
	d.after = ft.after
	return d, ft, lb
}

// Rule: a new connection is always admitted; when the total bound is
// reached the oldest pending connection is shed, so held connections
// cannot starve a newcomer.
func TestShedsOldestWhenFull(t *testing.T) {
	g := newTestGate(t, 3, 3)
	d, _, _ := newTestDoor(g, "test", 5)
	var cs []*closer
	var ps []*Pending
	for i := 0; i < 3; i++ {
		c := &closer{}
		cs, ps = append(cs, c), append(ps, d.admit("10.0.0.1", c))
	}
	if g.Pending() != 3 {
		t.Fatalf("pending %d, want 3", g.Pending())
	}
	peer := &closer{}
	pp := d.admit("10.0.0.1", peer)
	if !cs[0].closed || cs[1].closed || cs[2].closed || peer.closed {
		t.Fatalf("closed %v %v %v newcomer %v; want only the oldest", cs[0].closed, cs[1].closed, cs[2].closed, peer.closed)
	}
	if !ps[0].Done() {
		t.Error("Done of the shed connection reports it was not shed")
	}
	if pp.Done() {
		t.Error("Done of the newcomer reports it shed")
	}
	d.Authenticated()
	st := d.Stats()
	if st.Accepted != 4 || st.Shed != 1 || st.Authenticated != 1 || st.Pending != 2 {
		t.Errorf("stats %+v; want 4 accepted, 1 shed, 1 authenticated, 2 pending", st)
	}
	// Done is idempotent and never sheds.
	if pp.Done() || g.Pending() != 2 {
		t.Errorf("second Done changed the state: pending %d", g.Pending())
	}
}

// Rule: one source holds at most MaxPerSource; a flooding source sheds
// its own oldest connection, not another source's.
func TestPerSourceBound(t *testing.T) {
	g := newTestGate(t, 4, 2)
	d, _, _ := newTestDoor(g, "test", 5)
	other := &closer{}
	d.admit("10.0.0.2", other)
	var flood []*closer
	for i := 0; i < 10; i++ {
		c := &closer{}
		flood = append(flood, c)
		d.admit("10.0.0.1", c)
	}
	if other.closed {
		t.Error("the flood shed another source's connection")
	}
	open := 0
	for i, c := range flood {
		if !c.closed {
			open++
			if i < len(flood)-2 {
				t.Errorf("flood connection %d still open; only the newest two may be", i)
			}
		}
	}
	if open != 2 || g.Pending() != 3 {
		t.Errorf("%d flood connections open, %d pending; want 2 and 3", open, g.Pending())
	}
	if st := d.Stats(); st.Shed != 8 {
		t.Errorf("shed %d, want 8", st.Shed)
	}
}

// Rule: the bound is per gate, over all its doors; a shed is counted on
// the door of the connection shed.
func TestDoorsShareTheBound(t *testing.T) {
	g := newTestGate(t, 2, 2)
	a, _, _ := newTestDoor(g, "a", 5)
	b, _, _ := newTestDoor(g, "b", 5)
	ca := &closer{}
	pa := a.admit("h", ca)
	b.admit("h", &closer{})
	b.admit("h", &closer{})
	if !ca.closed || !pa.Done() {
		t.Fatal("door a's oldest connection was not shed by door b's arrivals")
	}
	if sa, sb := a.Stats(), b.Stats(); sa.Shed != 1 || sb.Shed != 0 || sa.Pending != 0 || sb.Pending != 2 {
		t.Errorf("a %+v b %+v", sa, sb)
	}
}

// Rule: a handshake that a real peer completes between floods of
// arrivals is never shed while fewer than MaxPending newer connections
// arrived during it. A differential check against a naive model: a slice
// in admission order.
func TestShedOrderMatchesModel(t *testing.T) {
	g := newTestGate(t, 5, 3)
	d, _, _ := newTestDoor(g, "test", 0)
	type conn struct {
		src  string
		c    *closer
		p    *Pending
		want bool // the model expects it shed
	}
	var model []*conn // pending, oldest first
	var all []*conn
	seed := uint64(7)
	next := func(n int) int { seed = seed*6364136223846793005 + 1442695040888963407; return int(seed>>33) % n }
	for step := 0; step < 2000; step++ {
		if len(model) > 0 && next(3) == 0 {
			i := next(len(model))
			x := model[i]
			model = append(model[:i], model[i+1:]...)
			if x.p.Done() {
				t.Fatalf("step %d: Done reports a shed for a connection the model holds", step)
			}
			continue
		}
		x := &conn{src: fmt.Sprint(next(3)), c: &closer{}}
		n := 0
		for _, y := range model {
			if y.src == x.src {
				n++
			}
		}
		if n >= 3 {
			for i, y := range model {
				if y.src == x.src {
					model = append(model[:i], model[i+1:]...)
					y.want = true
					break
				}
			}
		}
		for len(model) >= 5 {
			model[0].want = true
			model = model[1:]
		}
		x.p = d.admit(x.src, x.c)
		model = append(model, x)
		all = append(all, x)
		for _, y := range all {
			if y.c.closed != y.want {
				t.Fatalf("step %d: the gate and the model disagree on a connection from %s", step, y.src)
			}
		}
		if g.Pending() != len(model) {
			t.Fatalf("step %d: pending %d, model %d", step, g.Pending(), len(model))
		}
	}
}

func TestLimitsValidate(t *testing.T) {
	for _, l := range []Limits{{0, 0}, {4, 0}, {4, 5}, {-1, 1}} {
		if _, err := NewGate(l); err == nil {
			t.Errorf("limits %+v accepted", l)
		}
	}
	if err := DefaultLimits().Validate(); err != nil {
		t.Error(err)
	}
}

// Rule: refusals are counted always, logged one by one within the burst
// and for a new source, and otherwise summarised once per interval.
func TestRefusalLogIsBounded(t *testing.T) {
	g := newTestGate(t, 8, 8)
	d, ft, lb := newTestDoor(g, "tcp", 2)
	for i := 0; i < 1000; i++ {
		d.Refuse(fmt.Sprintf("127.0.0.1:%d", 1000+i), fmt.Errorf("bad magic"))
	}
	d.Refuse("10.1.1.1:5", os.ErrDeadlineExceeded) // a new source: logged
	if n := len(lb.lines()); n != 3 {
		t.Fatalf("%d lines logged for 1001 refusals before the summary, want 3:\n%s", n, strings.Join(lb.lines(), "\n"))
	}
	if ft.live() != 1 {
		t.Fatalf("%d summary timers armed, want 1", ft.live())
	}
	// A shed from the gate is counted in the same window.
	g2, _, _ := newTestDoor(g, "other", 2)
	for i := 0; i < 9; i++ {
		g2.admit("127.0.0.1", &closer{})
	}
	d.admit("127.0.0.1", &closer{})
	ft.fire(t)
	lines := lb.lines()
	if len(lines) != 4 || !strings.Contains(lines[3], "tcp: refused 998 connections and shed 0 unauthenticated ones from 1 sources in the last 10s") {
		t.Fatalf("summary: %q", lines[len(lines)-1])
	}
	st := d.Stats()
	if st.Refused != 1001 || st.TimedOut != 1 {
		t.Errorf("stats %+v; want 1001 refused, 1 timed out", st)
	}
	// The next window starts with a fresh burst; known sources are not
	// logged again beyond it.
	for i := 0; i < 3; i++ {
		d.Refuse("127.0.0.1:1", fmt.Errorf("x"))
	}
	if n := len(lb.lines()); n != 6 {
		t.Errorf("%d lines after the second window's burst, want 6", n)
	}
	d.Close()
	lines = lb.lines()
	if !strings.Contains(lines[len(lines)-1], "refused 1 connections") {
		t.Errorf("Close did not flush the summary: %q", lines[len(lines)-1])
	}
	d.Refuse("127.0.0.1:1", fmt.Errorf("after close"))
	if len(lb.lines()) != len(lines) || d.Stats().Refused != 1005 {
		t.Errorf("a refusal after Close was logged or not counted")
	}
	if ft.live() != 0 {
		t.Error("Close left a summary timer armed")
	}
}

// Rule: sheds are never logged one by one; they appear in the summary.
func TestShedsOnlyInSummary(t *testing.T) {
	g := newTestGate(t, 2, 2)
	d, ft, lb := newTestDoor(g, "raft", 5)
	for i := 0; i < 100; i++ {
		d.admit("127.0.0.1", &closer{})
	}
	if n := len(lb.lines()); n != 0 {
		t.Fatalf("%d lines for sheds before the summary", n)
	}
	ft.fire(t)
	lines := lb.lines()
	if len(lines) != 1 || !strings.Contains(lines[0], "raft: refused 0 connections and shed 98 unauthenticated ones from 1 sources") {
		t.Fatalf("summary %q", lines)
	}
}

func TestSourceOf(t *testing.T) {
	for in, want := range map[string]string{"127.0.0.1:80": "127.0.0.1", "[::1]:9": "::1", "junk": "junk"} {
		if got := SourceOf(in); got != want {
			t.Errorf("SourceOf(%q) = %q, want %q", in, got, want)
		}
	}
}

// Rule: a connection that sent a valid hello (a real peer does so at
// once) is shed only after every silent one: a flood of idle connections,
// however fast, cannot displace a peer's handshake. Among greeted ones the
// oldest goes first.
func TestGreetedOutlastSilent(t *testing.T) {
	g := newTestGate(t, 4, 3)
	d, _, _ := newTestDoor(g, "test", 0)
	peer := &closer{}
	pp := d.admit("127.0.0.1", peer)
	pp.Greeted()
	for i := 0; i < 1000; i++ {
		d.admit("127.0.0.1", &closer{})
	}
	if peer.closed || pp.Admit() != nil {
		t.Fatal("a flood of silent connections shed a greeted peer")
	}
	// A source with only greeted connections at its bound loses its
	// oldest greeted one (the silent ones of other sources go first for the
	// total bound).
	var cs []*closer
	for i := 0; i < 4; i++ {
		c := &closer{}
		cs = append(cs, c)
		d.admit("10.0.0.1", c).Greeted()
	}
	if !cs[0].closed || cs[1].closed || cs[2].closed || cs[3].closed {
		t.Errorf("closed %v %v %v %v; want only the oldest greeted", cs[0].closed, cs[1].closed, cs[2].closed, cs[3].closed)
	}
	p := d.admit("10.0.0.2", &closer{})
	if g.Pending() > 4 {
		t.Errorf("pending %d over the bound", g.Pending())
	}
	if p.Done() {
		t.Error("the newcomer was shed")
	}
}

// Rule: a handshake the other end closed or reset (a process leaving at
// the end of a job, or killed, a dialer that gave up) is counted but not
// logged as a warning: nothing was refused on the evidence of a wrong
// token.
func TestPeerGoneIsNoWarning(t *testing.T) {
	g := newTestGate(t, 8, 8)
	d, _, lb := newTestDoor(g, "tcp", 5)
	d.Refuse("127.0.0.1:1", fmt.Errorf("auth: reading hello: %w", io.EOF))
	d.Refuse("127.0.0.1:2", fmt.Errorf("auth: reading hello: read tcp: %w", syscall.ECONNRESET))
	d.Refuse("127.0.0.1:3", fmt.Errorf("auth: send proof: write tcp: %w", syscall.EPIPE))
	if lines := lb.lines(); len(lines) != 0 {
		t.Fatalf("logged at the default level:\n%s", strings.Join(lines, "\n"))
	}
	if d.Stats().Refused != 3 {
		t.Fatalf("%d refusals counted, want 3", d.Stats().Refused)
	}
	d.Refuse("127.0.0.1:4", fmt.Errorf("auth: bad proof"))
	if lines := lb.lines(); len(lines) != 1 || !strings.Contains(lines[0], "level=WARN") {
		t.Fatalf("a wrong proof was not a warning: %q", lines)
	}
}

// Rule: a summary of only handshakes closed by the other end is a warning
// for a flood of them (floodClosed in a window), information below that (a
// few dozen dialers giving up on a starved host); one refusal of another
// kind makes it a warning. A door for many peers (LogConfig.Flood) takes
// more of them for churn; a Flood below floodClosed counts as floodClosed.
func TestClosedEarlySummaryLevel(t *testing.T) {
	for _, c := range []struct {
		closed, bad, flood int
		warn               bool
	}{{floodClosed - 1, 0, 0, false}, {floodClosed, 0, 0, true}, {10, 1, 0, true},
		{floodClosed - 1, 0, 10, false}, {floodClosed, 0, 10, true}, {255, 0, 256, false}, {256, 0, 256, true}} {
		g := newTestGate(t, 8, 8)
		d, _, lb := newTestDoor(g, "ctl", 1)
		d.cfg.Flood = c.flood
		d.Refuse("127.0.0.1:1", fmt.Errorf("auth: reading hello: %w", io.EOF)) // the burst: logged at debug
		for i := range c.closed {
			d.Refuse(fmt.Sprintf("127.0.0.1:%d", 2+i), fmt.Errorf("auth: reading hello: %w", io.EOF))
		}
		for i := range c.bad {
			d.Refuse(fmt.Sprintf("127.0.0.1:%d", 1000+i), fmt.Errorf("auth: bad proof"))
		}
		d.summary()
		lines := lb.lines()
		if len(lines) != 1 || !strings.Contains(lines[0], "unauthenticated ones from") {
			t.Fatalf("%d closed, %d bad, flood %d: want one summary line, got %q", c.closed, c.bad, c.flood, lines)
		}
		if warn := strings.Contains(lines[0], "level=WARN"); warn != c.warn {
			t.Errorf("%d closed, %d bad, flood %d: summary %q, want a warning: %v", c.closed, c.bad, c.flood, lines[0], c.warn)
		}
	}
}
