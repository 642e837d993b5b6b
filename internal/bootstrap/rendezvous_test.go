package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/auth"
)

// testDeadline bounds every real-socket wait; the machine may be busy.
const testDeadline = 10 * time.Second

// logRecorder is a slog.Handler that keeps every record as one line and
// lets a test wait for a line.
type logRecorder struct {
	mu      sync.Mutex
	lines   []string
	changed chan struct{}
}

func newLogRecorder() *logRecorder { return &logRecorder{changed: make(chan struct{})} }

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecorder) WithGroup(string) slog.Handler            { return l }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Level.String() + " " + r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	l.mu.Lock()
	l.lines = append(l.lines, b.String())
	close(l.changed)
	l.changed = make(chan struct{})
	l.mu.Unlock()
	return nil
}

// wait returns the first line containing every substring, failing the test
// after testDeadline.
func (l *logRecorder) wait(t *testing.T, subs ...string) string {
	t.Helper()
	deadline := time.After(testDeadline)
	for {
		l.mu.Lock()
		for _, line := range l.lines {
			all := true
			for _, s := range subs {
				all = all && strings.Contains(line, s)
			}
			if all {
				l.mu.Unlock()
				return line
			}
		}
		ch := l.changed
		l.mu.Unlock()
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("no log line with %q; have:\n%s", subs, strings.Join(l.lines, "\n"))
		}
	}
}

type testJob struct {
	srv *Server
	env Env // for proc 0; copy and set Proc
	log *logRecorder
	// deadline bounds each registration (testDeadline when 0): a job of
	// hundreds of processes registered by goroutines of one test binary,
	// under the race detector on a busy machine, needs longer.
	deadline time.Duration
}

// manyDeadline is testJob.deadline for jobs of hundreds of processes.
const manyDeadline = 60 * time.Second

func startServer(t *testing.T, nprocs, nranks int, mut ...func(*ServerConfig)) *testJob {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rec := newLogRecorder()
	cfg := LocalServerConfig()
	cfg.Listener = l
	cfg.Token = auth.NewToken()
	cfg.TLS = os.Getenv("PGAS_TLS") == "1" // PGAS_TLS=1 runs the tests under TLS
	cfg.NumProcs = nprocs
	cfg.NumRanks = nranks
	cfg.JobID = "job"
	cfg.Logger = slog.New(rec)
	for _, m := range mut {
		m(&cfg)
	}
	srv := NewServer(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(testDeadline):
			t.Errorf("Serve did not return after cancel")
		}
	})
	env := Env{NumProcs: nprocs, NumRanks: nranks, Rendezvous: l.Addr().String(), Token: cfg.Token, Host: "h0", JobID: "job", Launcher: LauncherPGAS, TLS: cfg.TLS}
	return &testJob{srv: srv, env: env, log: rec}
}

func (j *testJob) envFor(p uint32) Env {
	e := j.env
	e.Proc = p
	e.Host = fmt.Sprintf("h%d", p%2)
	return e
}

func memberFor(p uint32) Member {
	return Member{Proc: p, Addr: fmt.Sprintf("127.0.0.1:%d", 20000+p), Extra: map[string]string{"raft": fmt.Sprintf("127.0.0.1:%d", 30000+p)}}
}

type regResult struct {
	sess  *Session
	table Table
	err   error
}

// registerAsync registers proc p in a goroutine; the session is closed at
// the end of the test.
func (j *testJob) registerAsync(t *testing.T, p uint32, mut ...func(*Env, *Member, *ClientConfig)) <-chan regResult {
	ch := make(chan regResult, 1)
	env, self, cfg := j.envFor(p), memberFor(p), LocalClientConfig()
	for _, m := range mut {
		m(&env, &self, &cfg)
	}
	go func() {
		d := testDeadline
		if j.deadline > 0 {
			d = j.deadline
		}
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		s, tb, err := RegisterWith(ctx, cfg, env, self)
		ch <- regResult{s, tb, err}
	}()
	return ch
}

func recv(t *testing.T, ch <-chan regResult) regResult {
	t.Helper()
	select {
	case r := <-ch:
		if r.sess != nil {
			t.Cleanup(func() { r.sess.Close() })
		}
		return r
	case <-time.After(2 * manyDeadline): // past every registration's own deadline
		t.Fatal("registration did not finish")
		return regResult{}
	}
}

func TestRendezvousCompleteTable(t *testing.T) {
	const n, k = 3, 2
	j := startServer(t, n+k, n)
	var chans []<-chan regResult
	for p := uint32(0); p < n+k; p++ {
		chans = append(chans, j.registerAsync(t, p))
	}
	var tables []Table
	for p, ch := range chans {
		r := recv(t, ch)
		if r.err != nil {
			t.Fatalf("proc %d: %v", p, r.err)
		}
		tables = append(tables, r.table)
	}
	want, ok := j.srv.Table()
	if !ok {
		t.Fatal("server table not complete")
	}
	select {
	case <-j.srv.Complete():
	default:
		t.Fatal("Complete not closed")
	}
	if want.NumRanks != n || want.NumProcs() != n+k || want.JobID != "job" {
		t.Fatalf("table shape: %+v", want)
	}
	for p, m := range want.Members {
		exp := memberFor(uint32(p))
		if m.Proc != uint32(p) || m.Addr != exp.Addr || m.Extra["raft"] != exp.Extra["raft"] || m.Host != fmt.Sprintf("h%d", p%2) || m.Pid == 0 {
			t.Errorf("member %d = %+v", p, m)
		}
	}
	for p, tb := range tables {
		if !reflect.DeepEqual(tb, want) {
			t.Errorf("proc %d table differs:\n%+v\nwant\n%+v", p, tb, want)
		}
	}
	if st := j.srv.Stats(); st.Registered != n+k || st.Connected != n+k || st.Refused != 0 {
		t.Errorf("stats = %+v", st)
	}
	j.log.wait(t, "member table complete")
}

func TestRendezvousRefusesWrongTokenAndStrays(t *testing.T) {
	j := startServer(t, 2, 2)
	// An intruder with another job's token, trying while the real ones
	// register.
	bad := j.registerAsync(t, 0, func(e *Env, _ *Member, c *ClientConfig) {
		e.Token = auth.NewToken()
		c.AuthAttempts = 2
	})
	// A stray client that does not speak the protocol.
	stray, err := net.Dial("tcp", j.env.Rendezvous)
	if err != nil {
		t.Fatal(err)
	}
	stray.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n" + strings.Repeat(".", 64)))
	defer stray.Close()

	r := recv(t, bad)
	if !errors.Is(r.err, ErrAuth) {
		t.Fatalf("wrong token: %v, want ErrAuth", r.err)
	}
	var re *RegisterError
	if !errors.As(r.err, &re) || re.Attempts != 2 || !strings.Contains(r.err.Error(), "PGAS_TOKEN") {
		t.Fatalf("wrong token error %q: want a RegisterError after 2 attempts that names PGAS_TOKEN", r.err)
	}
	a, b := j.registerAsync(t, 0), j.registerAsync(t, 1)
	if r := recv(t, a); r.err != nil {
		t.Fatal(r.err)
	}
	if r := recv(t, b); r.err != nil {
		t.Fatal(r.err)
	}
	j.log.wait(t, "connection refused", "wrong job token")
	j.log.wait(t, "connection refused", "not a gaspigo peer")
	// The client can see its second handshake fail before the server has
	// counted it: wait for the count, bounded.
	deadline := time.Now().Add(testDeadline)
	for {
		st := j.srv.Stats()
		if st.Refused >= 3 && st.Registered == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats = %+v, want >= 3 refused (2 wrong-token attempts, 1 stray) and 2 registered", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A process whose PGAS_TLS differs from the rendezvous's gives up after
// AuthAttempts with an error naming PGAS_TLS, and the rendezvous says why
// it refused.
func TestRendezvousRefusesTLSMismatch(t *testing.T) {
	for _, serverTLS := range []bool{false, true} {
		j := startServer(t, 1, 1, func(c *ServerConfig) { c.TLS = serverTLS })
		bad := j.registerAsync(t, 0, func(e *Env, _ *Member, c *ClientConfig) {
			e.TLS = !serverTLS
			c.AuthAttempts = 2
		})
		r := recv(t, bad)
		if !errors.Is(r.err, ErrAuth) || !errors.Is(r.err, auth.ErrTLS) || !strings.Contains(r.err.Error(), "must have the same PGAS_TLS") {
			t.Fatalf("server TLS %v: %v, want ErrAuth and ErrTLS naming PGAS_TLS", serverTLS, r.err)
		}
		j.log.wait(t, "connection refused", "PGAS_TLS")
	}
}

func TestRendezvousRejects(t *testing.T) {
	j := startServer(t, 2, 1)
	first := j.registerAsync(t, 0)
	j.log.wait(t, "registered", "proc=0")

	cases := []struct {
		name string
		mut  func(*Env, *Member, *ClientConfig)
		want string
	}{
		{"duplicate", func(e *Env, m *Member, _ *ClientConfig) { m.Pid = 1 }, "already registered by pid"},
		{"out of range", func(e *Env, m *Member, _ *ClientConfig) { e.NumProcs = 8; e.Proc = 5; m.Proc = 5 }, "process id 5 is out of range: this job has 2 processes"},
		{"other shape", func(e *Env, m *Member, _ *ClientConfig) { e.NumProcs = 3 }, "started for 3 processes"},
		{"other ranks", func(e *Env, m *Member, _ *ClientConfig) { e.NumRanks = 2 }, "started for 2 ranks"},
		{"other job", func(e *Env, m *Member, _ *ClientConfig) { e.JobID = "other" }, `belongs to job "other"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			proc := uint32(1)
			if c.name == "duplicate" {
				proc = 0
			}
			r := recv(t, j.registerAsync(t, proc, c.mut))
			var rej *RejectedError
			if !errors.As(r.err, &rej) || !errors.Is(r.err, ErrRejected) || !strings.Contains(rej.Reason, c.want) {
				t.Fatalf("got %v, want a rejection saying %q", r.err, c.want)
			}
			j.log.wait(t, "rejected registration", c.want)
		})
	}
	// The legitimate registration still completes.
	second := j.registerAsync(t, 1)
	if r := recv(t, first); r.err != nil {
		t.Fatal(r.err)
	}
	if r := recv(t, second); r.err != nil {
		t.Fatal(r.err)
	}
	// After completion, a different process with a taken id is refused,
	// and the same process reconnecting gets the table again.
	r := recv(t, j.registerAsync(t, 1, func(_ *Env, m *Member, _ *ClientConfig) { m.Pid = 12345 }))
	if !errors.Is(r.err, ErrRejected) || !strings.Contains(r.err.Error(), "table is complete") {
		t.Fatalf("late duplicate: %v", r.err)
	}
	r = recv(t, j.registerAsync(t, 1))
	if r.err != nil || r.table.NumProcs() != 2 {
		t.Fatalf("reconnect after completion: %v %+v", r.err, r.table)
	}
}

func TestReportsDelivered(t *testing.T) {
	j := startServer(t, 2, 1)
	a, b := j.registerAsync(t, 0), j.registerAsync(t, 1)
	ra, rb := recv(t, a), recv(t, b)
	if ra.err != nil || rb.err != nil {
		t.Fatal(ra.err, rb.err)
	}
	rb.sess.Report(Report{Proc: 77, Kind: KindRole, Rank: 0, Epoch: 3})
	rb.sess.Report(Report{Kind: "bogus"})
	rb.sess.Report(Report{Kind: KindEvent, Rank: 0, Text: strings.Repeat("x", MaxReportText+10)})
	rb.sess.Close()
	rb.sess.Close() // idempotent
	want := []Report{
		{Proc: 1, Kind: KindRole, Rank: 0, Epoch: 3},
		{Proc: 1, Kind: KindEvent, Rank: 0, Text: strings.Repeat("x", MaxReportText)},
		{Proc: 1, Kind: KindDisconnected, Rank: -1},
	}
	for i, w := range want {
		select {
		case got := <-j.srv.Reports():
			if !reflect.DeepEqual(got, w) {
				t.Fatalf("report %d = %+v, want %+v", i, got, w)
			}
		case <-time.After(testDeadline):
			t.Fatalf("report %d not delivered", i)
		}
	}
	if st := j.srv.Stats(); st.BadMessages != 1 || st.Connected != 1 {
		t.Fatalf("stats = %+v, want the bogus kind counted and one connection left", st)
	}
}

func TestReportsDroppedNotBlocking(t *testing.T) {
	j := startServer(t, 1, 1, func(c *ServerConfig) { c.ReportBuffer = 2 })
	r := recv(t, j.registerAsync(t, 0))
	if r.err != nil {
		t.Fatal(r.err)
	}
	for i := 0; i < 10; i++ {
		r.sess.Report(Report{Kind: KindEvent, Text: fmt.Sprint(i)})
	}
	r.sess.Close()
	deadline := time.Now().Add(testDeadline)
	for {
		st := j.srv.Stats()
		// 10 reports plus the disconnection notice.
		if st.Reports+st.Dropped == 11 {
			if st.Reports != 2 {
				t.Fatalf("stats = %+v, want 2 delivered", st)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats = %+v, want 11 reports handled", st)
		}
		time.Sleep(5 * time.Millisecond) // real sockets: poll with a deadline
	}
	if r.sess.Dropped() != 0 {
		t.Fatalf("session dropped %d, want 0 (the queue holds 10)", r.sess.Dropped())
	}
}

func TestSessionSurvivesRendezvousLoss(t *testing.T) {
	j := startServer(t, 1, 1)
	rec := newLogRecorder()
	r := recv(t, j.registerAsync(t, 0, func(_ *Env, _ *Member, c *ClientConfig) { c.Logger = slog.New(rec) }))
	if r.err != nil {
		t.Fatal(r.err)
	}
	j.srv.Close()
	select {
	case <-r.sess.Lost():
	case <-time.After(testDeadline):
		t.Fatal("Lost not closed after the rendezvous went away")
	}
	rec.wait(t, "lost the connection to the rendezvous")
	for i := 0; i < 1000; i++ {
		r.sess.Report(Report{Kind: KindEvent})
	}
	if r.sess.Dropped() != 1000 {
		t.Fatalf("dropped %d, want 1000", r.sess.Dropped())
	}
	start := time.Now()
	r.sess.Close()
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Close took %v", d)
	}
	r.sess.Report(Report{Kind: KindEvent}) // after Close: dropped, no panic
}

// freePort reserves a loopback port and frees it: nothing listens there.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func TestRegisterRetriesUntilRendezvousUp(t *testing.T) {
	addr := freePort(t) // the first attempts are refused
	rec := newLogRecorder()
	tok := auth.NewToken()
	env := Env{Proc: 0, NumProcs: 1, NumRanks: 1, Rendezvous: addr, Token: tok, Host: "h", Launcher: LauncherPGAS}
	cfg := LocalClientConfig()
	cfg.Logger = slog.New(rec)
	ch := make(chan regResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
		defer cancel()
		s, tb, err := RegisterWith(ctx, cfg, env, memberFor(0))
		ch <- regResult{s, tb, err}
	}()
	rec.wait(t, "retrying", "refused")
	env.ServeRendezvous = true
	srv, err := ServeInProcess(context.Background(), env, nil)
	if err != nil {
		t.Skipf("the reserved port was taken meanwhile: %v", err)
	}
	defer srv.Close()
	r := recv(t, ch)
	if r.err != nil || r.table.NumProcs() != 1 {
		t.Fatalf("register after retries: %v", r.err)
	}
}

func TestRegisterTimesOutWaitingForOthers(t *testing.T) {
	j := startServer(t, 3, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, _, err := RegisterWith(ctx, LocalClientConfig(), j.envFor(0), memberFor(0))
	if !errors.Is(err, ErrRendezvous) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want ErrRendezvous and DeadlineExceeded", err)
	}
	if !strings.Contains(err.Error(), "not all 3 processes registered") {
		t.Fatalf("error %q does not say the others are missing", err)
	}
	// The process is unregistered when it gives up.
	j.log.wait(t, "disconnected before the table was complete", "proc=0")
}

func TestRegisterUnreachable(t *testing.T) {
	addr := freePort(t)
	env := Env{Proc: 0, NumProcs: 1, NumRanks: 1, Rendezvous: addr, Token: auth.NewToken(), Host: "h"}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, _, err := RegisterWith(ctx, LocalClientConfig(), env, memberFor(0))
	// The last attempt's cause is named: the refused dial, or on a starved
	// machine a dial that ran out of its DialTimeout before the refusal.
	if !errors.Is(err, ErrRendezvous) || !strings.Contains(err.Error(), "was not reached") || !strings.Contains(err.Error(), "last attempt: dial: ") {
		t.Fatalf("got %v", err)
	}
}

func TestRegisterBadArguments(t *testing.T) {
	env := Env{Proc: 0, NumProcs: 1, NumRanks: 1, Rendezvous: "127.0.0.1:1", Token: auth.NewToken(), Host: "h"}
	ctx := context.Background()
	if _, _, err := Register(ctx, env, Member{Proc: 1, Addr: "a:1"}); !errors.Is(err, ErrConfig) {
		t.Errorf("wrong proc: %v", err)
	}
	if _, _, err := Register(ctx, env, Member{Proc: 0, Addr: "nope"}); !errors.Is(err, ErrConfig) {
		t.Errorf("bad addr: %v", err)
	}
	big := Member{Proc: 0, Addr: "a:1", Extra: map[string]string{"x": strings.Repeat("y", MaxClientMessage)}}
	if _, _, err := Register(ctx, env, big); !errors.Is(err, ErrConfig) {
		t.Errorf("huge extra: %v", err)
	}
	bad := env
	bad.NumRanks = 0
	if _, _, err := Register(ctx, bad, Member{Proc: 0, Addr: "a:1"}); !errors.Is(err, ErrEnv) {
		t.Errorf("bad env: %v", err)
	}
	c := LocalClientConfig()
	c.RetryMax = 0
	if _, _, err := RegisterWith(ctx, c, env, Member{Proc: 0, Addr: "a:1"}); !errors.Is(err, ErrConfig) {
		t.Errorf("bad config: %v", err)
	}
}

func TestServerConfigValidate(t *testing.T) {
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	defer l.Close()
	good := ServerConfig{Listener: l, Token: auth.NewToken(), NumProcs: 2, NumRanks: 1}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*ServerConfig){
		"listener": func(c *ServerConfig) { c.Listener = nil },
		"token":    func(c *ServerConfig) { c.Token = nil },
		"nprocs":   func(c *ServerConfig) { c.NumProcs = 0 },
		"nranks":   func(c *ServerConfig) { c.NumRanks = 3 },
		"timeout":  func(c *ServerConfig) { c.HandshakeTimeout = -1 },
		"buffer":   func(c *ServerConfig) { c.ReportBuffer = -1 },
		"refill":   func(c *ServerConfig) { c.RefillWait = -time.Second },
	} {
		c := good
		mut(&c)
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
	// Serve reports an invalid config; Close before Serve makes Serve fail.
	bad := good
	bad.NumProcs = 0
	if err := NewServer(bad).Serve(context.Background()); !errors.Is(err, ErrConfig) {
		t.Errorf("Serve with bad config: %v", err)
	}
	l2, _ := net.Listen("tcp", "127.0.0.1:0")
	good.Listener = l2
	s := NewServer(good)
	s.Close()
	if err := s.Serve(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Serve after Close: %v", err)
	}
}

// Rule: a process that cannot reach the rendezvous gives up after
// ClientConfig.Timeout (PGAS_RENDEZVOUS_TIMEOUT) with ErrRendezvousTimeout,
// and warns before that, at Warn level, saying who must serve it.
func TestRegisterGivesUpWhenNobodyServes(t *testing.T) {
	addr := freePort(t)
	rec := newLogRecorder()
	env := Env{Proc: 1, NumProcs: 2, NumRanks: 2, Rendezvous: addr, Token: auth.NewToken(), Host: "h", Launcher: LauncherPGAS}
	cfg := LocalClientConfig()
	cfg.Timeout, cfg.WarnAfter, cfg.Logger = 400*time.Millisecond, 50*time.Millisecond, slog.New(rec)
	start := time.Now()
	_, _, err := RegisterWith(context.Background(), cfg, env, memberFor(1))
	if !errors.Is(err, ErrRendezvousTimeout) || !errors.Is(err, ErrRendezvous) {
		t.Fatalf("got %v, want ErrRendezvousTimeout and ErrRendezvous", err)
	}
	if d := time.Since(start); d > testDeadline {
		t.Fatalf("gave up after %v, want about %v", d, cfg.Timeout)
	}
	for _, w := range []string{"PGAS_RENDEZVOUS_TIMEOUT", "PGAS_SERVE_RENDEZVOUS=1", "was not reached", addr, "refused"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not mention %q", err, w)
		}
	}
	rec.wait(t, "WARN bootstrap: still waiting for the rendezvous", "PGAS_SERVE_RENDEZVOUS=1")
}

// Rule: a registered process waiting for the others warns perProcWait per
// process of the job later than one that cannot reach the rendezvous (a
// large job's processes take seconds to register on a few cores), and
// says then that the rendezvous is up but some process is missing.
func TestRegisteredWaitsLongerBeforeWarning(t *testing.T) {
	j := startServer(t, 3, 3)
	rec := newLogRecorder()
	cfg := LocalClientConfig()
	cfg.Timeout, cfg.WarnAfter, cfg.Logger = 0, 20*time.Millisecond, slog.New(rec)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	go RegisterWith(ctx, cfg, j.envFor(0), memberFor(0))
	line := rec.wait(t, "WARN bootstrap: registered; still waiting for the member table", "did not start")
	if d, want := time.Since(start), cfg.WarnAfter+3*perProcWait; d < want {
		t.Fatalf("warned after %v, want no earlier than %v: %s", d, want, line)
	}
}

// Rule: the bound covers the wait for the other processes too, and the
// message then says that the rendezvous is up but some process is missing.
func TestRegisterGivesUpWaitingForOthers(t *testing.T) {
	j := startServer(t, 3, 3)
	cfg := LocalClientConfig()
	cfg.Timeout, cfg.WarnAfter = 300*time.Millisecond, 0
	_, _, err := RegisterWith(context.Background(), cfg, j.envFor(0), memberFor(0))
	if !errors.Is(err, ErrRendezvousTimeout) || !strings.Contains(err.Error(), "not all 3 processes registered") ||
		!strings.Contains(err.Error(), "did not start") {
		t.Fatalf("got %v, want ErrRendezvousTimeout saying the others are missing", err)
	}
}
