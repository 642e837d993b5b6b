package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/internal/tcpopt"
)

// ClientConfig configures Register and the Session it returns.
type ClientConfig struct {
	// DialTimeout bounds one connection attempt to the rendezvous.
	DialTimeout time.Duration
	// HandshakeTimeout bounds the handshake, the hello and the rendezvous's
	// acknowledgement on one connection. The wait for the table after that
	// is bounded only by the ctx given to Register.
	HandshakeTimeout time.Duration
	// RetryInitial and RetryMax are the first and the largest delay between
	// attempts (exponential backoff with jitter): the rendezvous may not be
	// up yet when a process starts, e.g. under Slurm, where process 0 hosts
	// it.
	RetryInitial, RetryMax time.Duration
	// AuthAttempts is how many handshakes in a row may fail before Register
	// gives up with ErrAuth: a wrong token never gets better, a connection
	// cut during the handshake does.
	AuthAttempts int
	// ReportQueue is how many reports Session.Report buffers; more are
	// dropped and counted, so Report never blocks.
	ReportQueue int
	// WriteTimeout bounds sending one report; a rendezvous that does not
	// take it within this time is considered gone.
	WriteTimeout time.Duration
	// FlushTimeout bounds how long Session.Close spends sending queued
	// reports.
	FlushTimeout time.Duration
	// Timeout bounds the whole registration, from the first dial to the
	// member table (PGAS_RENDEZVOUS_TIMEOUT): a process that cannot reach
	// the rendezvous, or whose job never completes its table, gives up
	// with ErrRendezvousTimeout instead of retrying forever. The bound
	// grows by perProcWait (40 ms) per process of the job: thousands of
	// processes started on a few cores take a minute to register (2,050
	// on 2 cores: more than 60 s), which is no fault. 0: only the ctx
	// given to Register bounds it.
	Timeout time.Duration
	// WarnAfter: while the table has not come after this long, Register
	// logs a warning saying what it waits for and who must serve the
	// rendezvous, and repeats it every WarnAfter*3. 0: never. Once this
	// process is registered, the wait is for the others, and the first
	// warning comes perProcWait (40 ms) per process of the job later
	// (20 s more at 514): hundreds of processes started on a few cores
	// take seconds to register, which is no fault.
	WarnAfter time.Duration
	// Logger receives retries (Debug), the warnings above (Warn) and the
	// loss of the rendezvous (Info). Nil discards.
	Logger *slog.Logger
}

// DefaultRendezvousTimeout is ClientConfig.Timeout unless
// PGAS_RENDEZVOUS_TIMEOUT says otherwise: long enough for the processes
// of a batch job to start everywhere, short enough that a job started
// without anybody serving the rendezvous ends within a minute.
const DefaultRendezvousTimeout = 60 * time.Second

// DefaultClientConfig returns settings for a real job.
func DefaultClientConfig() ClientConfig {
	return ClientConfig{
		DialTimeout:      5 * time.Second,
		HandshakeTimeout: 10 * time.Second,
		RetryInitial:     50 * time.Millisecond,
		RetryMax:         time.Second,
		AuthAttempts:     3,
		ReportQueue:      256,
		WriteTimeout:     2 * time.Second,
		FlushTimeout:     time.Second,
		Timeout:          DefaultRendezvousTimeout,
		WarnAfter:        5 * time.Second,
	}
}

// LocalClientConfig is DefaultClientConfig with shorter delays, for loopback
// jobs and tests.
func LocalClientConfig() ClientConfig {
	c := DefaultClientConfig()
	c.DialTimeout = time.Second
	c.HandshakeTimeout = 3 * time.Second
	c.RetryInitial = 10 * time.Millisecond
	c.RetryMax = 200 * time.Millisecond
	c.WriteTimeout = time.Second
	c.FlushTimeout = 500 * time.Millisecond
	return c
}

// Validate checks c without changing it.
func (c ClientConfig) Validate() error {
	switch {
	case c.DialTimeout <= 0:
		return fmt.Errorf("%w: ClientConfig.DialTimeout=%v, want > 0", ErrConfig, c.DialTimeout)
	case c.HandshakeTimeout <= 0:
		return fmt.Errorf("%w: ClientConfig.HandshakeTimeout=%v, want > 0", ErrConfig, c.HandshakeTimeout)
	case c.RetryInitial <= 0 || c.RetryMax < c.RetryInitial:
		return fmt.Errorf("%w: ClientConfig.RetryInitial=%v RetryMax=%v, want 0 < RetryInitial <= RetryMax", ErrConfig, c.RetryInitial, c.RetryMax)
	case c.AuthAttempts < 1:
		return fmt.Errorf("%w: ClientConfig.AuthAttempts=%d, want >= 1", ErrConfig, c.AuthAttempts)
	case c.ReportQueue < 1:
		return fmt.Errorf("%w: ClientConfig.ReportQueue=%d, want >= 1", ErrConfig, c.ReportQueue)
	case c.WriteTimeout <= 0:
		return fmt.Errorf("%w: ClientConfig.WriteTimeout=%v, want > 0", ErrConfig, c.WriteTimeout)
	case c.FlushTimeout <= 0:
		return fmt.Errorf("%w: ClientConfig.FlushTimeout=%v, want > 0", ErrConfig, c.FlushTimeout)
	case c.Timeout < 0 || c.WarnAfter < 0:
		return fmt.Errorf("%w: ClientConfig.Timeout=%v WarnAfter=%v, want >= 0 (0: none)", ErrConfig, c.Timeout, c.WarnAfter)
	}
	return nil
}

// Register registers self with the rendezvous named by env and returns
// once every process has registered, with the member table. It uses
// DefaultClientConfig; see RegisterWith.
func Register(ctx context.Context, env Env, self Member) (*Session, Table, error) {
	return RegisterWith(ctx, DefaultClientConfig(), env, self)
}

// RegisterWith is Register with explicit settings. It dials env.Rendezvous
// with retries until ctx ends, authenticates with env.Token, sends self and
// waits for the table. self.Proc must be env.Proc; an empty self.Host is
// env.Host and a zero self.Pid is os.Getpid(). A connection lost while
// waiting is redialled (the registration is repeated). Errors are
// *RegisterError values wrapping ErrRendezvous (ctx ended; the text names
// the last failure), ErrRejected, ErrAuth or ErrProtocol; bad arguments
// return ErrEnv or ErrConfig at once. A joiner (env.Join) uses JoinRunning.
func RegisterWith(ctx context.Context, cfg ClientConfig, env Env, self Member) (*Session, Table, error) {
	if err := cfg.Validate(); err != nil {
		return nil, Table{}, err
	}
	if env.Join {
		return nil, Table{}, fmt.Errorf("%w: the environment is a joiner's (PGAS_JOIN=1), which registers with JoinRunning", ErrConfig)
	}
	if err := env.Validate(); err != nil {
		return nil, Table{}, err
	}
	if self.Proc != env.Proc {
		return nil, Table{}, fmt.Errorf("%w: Member.Proc=%d but the environment says process %d", ErrConfig, self.Proc, env.Proc)
	}
	r, err := newRegistrar(cfg, env, self, false)
	if err != nil {
		return nil, Table{}, err
	}
	r.relay = startRelay(env, r.self, r.relayTry(), r.log)
	if err := r.present(env.Proc); err != nil {
		r.relay.close()
		return nil, Table{}, err
	}
	res, err := r.run(ctx)
	if err != nil {
		r.relay.close()
		return nil, Table{}, err
	}
	r.relay.hand(res.frame, max(r.timeout(), relaySources*r.relayTry()+r.cfg.HandshakeTimeout))
	sess := newSession(cfg, r.log, r.self, res.conn)
	sess.relay = r.relay
	return sess, res.table, nil
}

// JoinRunning registers a joiner (env.Join, PGAS_JOIN=1): a process
// started after the job formed, to refill its spare pool. It presents the
// id the launcher reserved for it (env.Proc) or JoinerID, retries like
// RegisterWith within cfg.Timeout, and returns the session, the job's
// original member table (ids 0..NumProcs-1, with RefillWait) and the id
// the rendezvous gave it, which no process of the job ever had. A joiner
// that arrives before the job formed waits for it like any process.
// self.Proc is ignored (the id is the rendezvous's); an empty self.Host
// is env.Host and a zero self.Pid is os.Getpid(). The Session behaves as
// Register's. Errors are *RegisterError values wrapping ErrJobFinished
// (the job has ended: exit 0), ErrRejected with the rendezvous's reason,
// ErrAuth (a wrong PGAS_TOKEN), ErrRendezvousTimeout (with what it
// tried), ErrRendezvous or ErrProtocol; an environment that is not a
// joiner's, or that also serves the rendezvous, is ErrConfig at once.
func JoinRunning(ctx context.Context, cfg ClientConfig, env Env, self Member) (*Session, Table, uint32, error) {
	if err := cfg.Validate(); err != nil {
		return nil, Table{}, 0, err
	}
	if !env.Join {
		return nil, Table{}, 0, fmt.Errorf("%w: JoinRunning is for a process started after the job formed (PGAS_JOIN=1); a process the job was started with registers with Join or RegisterWith", ErrConfig)
	}
	if env.ServeRendezvous {
		// Validate says so too; this names the call as well.
		return nil, Table{}, 0, fmt.Errorf("%w: JoinRunning: %w", ErrConfig, errJoinerServes)
	}
	if err := env.Validate(); err != nil {
		return nil, Table{}, 0, err
	}
	self.Proc = env.Proc
	r, err := newRegistrar(cfg, env, self, true)
	if err != nil {
		return nil, Table{}, 0, err
	}
	res, err := r.run(ctx)
	if err != nil {
		return nil, Table{}, 0, err
	}
	self = r.self
	self.Proc = res.id
	return newSession(cfg, r.log, self, res.conn), res.table, res.id, nil
}

type attemptResult struct {
	conn  net.Conn
	table Table
	id    uint32 // this process's id: env.Proc, or a joiner's as given
	frame []byte // the table's message as the rendezvous encoded it, for the relay
}

// registrar holds the state of one Register or JoinRunning call across
// attempts.
type registrar struct {
	cfg       ClientConfig
	env       Env
	self      Member
	join      bool // a joiner's registration (JoinRunning)
	log       *slog.Logger
	attempts  int
	authFails int
	relay     *relay // this process's table relay, nil for none (a joiner's)

	mu      sync.Mutex // the fields below, also read by the warning timer
	id      uint32     // the id presented: env.Proc, or the one a joiner was given
	hello   []byte     // the encoded hello, presenting id
	acked   bool       // some attempt was acknowledged
	reached bool       // some attempt connected: the rendezvous is up, if busy
	last    error      // the last attempt's failure
}

// newRegistrar checks self against env and prepares the hello.
func newRegistrar(cfg ClientConfig, env Env, self Member, join bool) (*registrar, error) {
	if self.Host == "" {
		self.Host = env.Host
	}
	if self.Pid == 0 {
		self.Pid = os.Getpid()
	}
	if err := checkMember(self); err != nil {
		return nil, fmt.Errorf("%w: own member: %v", ErrConfig, err)
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	r := &registrar{cfg: cfg, env: env, self: self, join: join, log: lg}
	if err := r.present(env.Proc); err != nil {
		return nil, err
	}
	return r, nil
}

// present makes the hello present id: env.Proc at first, and for a
// joiner the id the rendezvous gave it, so that a joiner that lost its
// connection comes back as itself rather than take another id.
func (r *registrar) present(id uint32) error {
	self := r.self
	self.Proc = id
	h := &envelope{Kind: msgHello, Hello: &hello{Version: protoVersion, NumProcs: r.env.NumProcs, NumRanks: r.env.NumRanks,
		JobID: r.env.JobID, Member: self, Join: r.join, Relay: r.relay.address()}}
	msg, err := encodeMsg(h, MaxClientMessage)
	if err != nil {
		return fmt.Errorf("%w: own member does not fit a message (Extra too large?): %v", ErrConfig, err)
	}
	r.mu.Lock()
	r.id, r.hello = id, msg
	r.mu.Unlock()
	return nil
}

// run makes attempts until one gets the table, within cfg.Timeout and ctx.
func (r *registrar) run(ctx context.Context) (attemptResult, error) {
	if r.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, r.timeout(), errGaveUp)
		defer cancel()
	}
	if r.cfg.WarnAfter > 0 {
		stop := r.warnWhileWaiting(r.cfg.WarnAfter)
		defer stop()
	}
	b := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(r.cfg.RetryInitial),
		backoff.WithMaxInterval(r.cfg.RetryMax),
		backoff.WithMaxElapsedTime(0))
	res, err := backoff.RetryNotifyWithData(func() (attemptResult, error) { return r.attempt(ctx) },
		backoff.WithContext(b, ctx),
		func(err error, d time.Duration) {
			r.log.Debug("bootstrap: rendezvous attempt failed; retrying", "proc", procAttr(r.presented()), "addr", r.env.Rendezvous, "attempt", r.attempts, "err", err, "in", d)
		})
	if err == nil {
		return res, nil
	}
	if ctx.Err() != nil {
		acked, lastErr := r.status()
		what := "the rendezvous was not reached"
		switch {
		case acked && r.join:
			what = "joined, but the job has not formed: not all of its processes registered in time"
		case acked:
			what = fmt.Sprintf("registered, but not all %d processes registered in time", r.env.NumProcs)
		}
		last := ""
		if lastErr != nil {
			last = "; last attempt: " + lastErr.Error()
		}
		if errors.Is(context.Cause(ctx), errGaveUp) {
			err = fmt.Errorf("%w after %v (PGAS_RENDEZVOUS_TIMEOUT and 40ms per process): %w: %s%s; %s", ErrRendezvousTimeout, r.timeout(), ErrRendezvous, what, last, whoServes(acked, r.env))
		} else {
			err = fmt.Errorf("%w: %s (%w)%s; is the launcher (or process 0) running, and PGAS_RENDEZVOUS right?", ErrRendezvous, what, ctx.Err(), last)
		}
	}
	return res, &RegisterError{Proc: r.presented(), Addr: r.env.Rendezvous, Attempts: r.attempts, Err: err}
}

// errGaveUp is the cause of the registration's own deadline
// (ClientConfig.Timeout), to tell it from the end of the caller's ctx.
var errGaveUp = errors.New("rendezvous timeout")

func (r *registrar) status() (acked bool, last error) {
	acked, _, last = r.progress()
	return acked, last
}

// progress is status and whether some attempt connected.
func (r *registrar) progress() (acked, reached bool, last error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.acked, r.reached, r.last
}

// presented is the id the next attempt presents.
func (r *registrar) presented() uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.id
}

// whoServes says what a process waiting for the rendezvous waits for.
func whoServes(acked bool, env Env) string {
	switch {
	case acked && env.Join:
		return "the rendezvous is up but the job this process came to join has not formed yet: one of its processes did not start, failed before registering, or was given another PGAS_RENDEZVOUS or PGAS_NPROCS"
	case env.Join:
		return fmt.Sprintf("the rendezvous at %s (PGAS_RENDEZVOUS) is served by the running job's launcher (gaspirun), or by its process started with PGAS_SERVE_RENDEZVOUS=1: check that the job is still running and that PGAS_RENDEZVOUS is its rendezvous", env.Rendezvous)
	case acked:
		return fmt.Sprintf("the rendezvous is up but still waits for some of the %d processes: one did not start, failed before registering, or was given another PGAS_RENDEZVOUS or PGAS_NPROCS", env.NumProcs)
	}
	return fmt.Sprintf("the rendezvous at %s (PGAS_RENDEZVOUS) is served by gaspirun, or by the process started with PGAS_SERVE_RENDEZVOUS=1 "+
		"(process 0 by default under srun, mpirun and Kubernetes; nobody by default when PGAS_PROC is set by hand): start that process, or check PGAS_RENDEZVOUS", env.Rendezvous)
}

// timeout is the bound on the registration: Timeout, and perProcWait per
// process of the job.
func (r *registrar) timeout() time.Duration {
	return r.cfg.Timeout + time.Duration(r.env.NumProcs)*perProcWait
}

// perProcWait is how much longer a registered process waits, per process
// of the job, before it warns that the table has not come.
const perProcWait = 40 * time.Millisecond

// warnWhileWaiting logs, after first and then every 3*first, that the
// table has not come yet, until the returned stop is called; once this
// process is registered, the first warning waits perProcWait more per
// process of the job.
func (r *registrar) warnWhileWaiting(first time.Duration) (stop func()) {
	start := time.Now()
	var mu sync.Mutex
	stopped := false
	var t *time.Timer
	var warn func()
	warn = func() {
		acked, reached, last := r.progress()
		if left := first + time.Duration(r.env.NumProcs)*perProcWait - time.Since(start); (acked || reached) && left > 0 {
			mu.Lock()
			if !stopped {
				t.Reset(left)
			}
			mu.Unlock()
			return
		}
		args := []any{"proc", procAttr(r.presented()), "rendezvous", r.env.Rendezvous, "waited", time.Since(start).Round(time.Second)}
		if r.cfg.Timeout > 0 {
			args = append(args, "gives_up_after", r.timeout())
		}
		if last != nil {
			args = append(args, "last_attempt", last.Error())
		}
		msg := "bootstrap: still waiting for the rendezvous; " + whoServes(acked, r.env)
		if reached && !acked {
			msg = fmt.Sprintf("bootstrap: connected to the rendezvous, which has not answered this process's registration yet (it registers %d processes); %s", r.env.NumProcs, whoServes(acked, r.env))
		}
		if acked {
			msg = "bootstrap: registered; still waiting for the member table; " + whoServes(acked, r.env)
		}
		r.log.Warn(msg, args...)
		mu.Lock()
		if !stopped {
			t.Reset(3 * first)
		}
		mu.Unlock()
	}
	mu.Lock()
	t = time.AfterFunc(first, warn)
	mu.Unlock()
	return func() {
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
	}
}

// ended reports whether ctx has ended or its deadline has passed: a dial
// bounded by that deadline fails with an i/o timeout on a timer of its
// own, which can fire before ctx reports the end.
func ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// aLongTimeAgo is a deadline in the past: it makes blocked I/O return.
var aLongTimeAgo = time.Unix(1, 0)

// attempt is one try at the registration: connect, prove the token and
// present this process, then wait for the table.
func (r *registrar) attempt(ctx context.Context) (res attemptResult, err error) {
	r.attempts++
	defer func() {
		// An attempt cut short by ctx says nothing new; keep the one before.
		if err != nil && !ended(ctx) {
			r.mu.Lock()
			r.last = err
			r.mu.Unlock()
		}
	}()
	d := net.Dialer{Timeout: r.cfg.DialTimeout, Control: tcpopt.Control}
	c, err := d.DialContext(ctx, "tcp", r.env.Rendezvous)
	if err != nil {
		return res, fmt.Errorf("dial: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(aLongTimeAgo) })
	ok := false
	defer func() {
		if !ok {
			stop()
			c.Close()
		}
	}()
	r.mu.Lock()
	r.reached = true
	r.mu.Unlock()
	rw, id, err := r.handshake(ctx, c)
	if err != nil {
		return res, err
	}
	res, err = r.awaitTable(ctx, c, rw, id)
	if err != nil {
		return res, err
	}
	// The table is in: the connection stays, for the reports, unless ctx
	// ended meanwhile.
	if !stop() {
		return attemptResult{}, ctx.Err()
	}
	c.SetDeadline(time.Time{})
	ok = true
	return res, nil
}

// handshake proves the token to the rendezvous over c and sends the
// hello; it returns the connection the registration goes on over, and
// the id presented.
func (r *registrar) handshake(ctx context.Context, c net.Conn) (net.Conn, uint32, error) {
	// The rendezvous answers registrations in parallel, but a job of
	// thousands of processes on a few cores registers them at once: the
	// handshake and the answer get perProcWait more per process.
	c.SetDeadline(time.Now().Add(r.cfg.HandshakeTimeout + time.Duration(r.env.NumProcs)*perProcWait))
	r.mu.Lock()
	id, helloMsg := r.id, r.hello
	r.mu.Unlock()
	rw, peer, err := auth.Dial(c, r.env.Token, auth.PurposeRendezvous, id, r.env.TLS)
	if err != nil {
		if ctx.Err() != nil {
			return nil, 0, ctx.Err()
		}
		if errors.Is(err, auth.ErrAuth) {
			r.authFails++
			if r.authFails >= r.cfg.AuthAttempts {
				fix := "PGAS_TOKEN must be the same as the launcher's, and PGAS_RENDEZVOUS must point at this job's rendezvous"
				if errors.Is(err, auth.ErrTLS) {
					fix = "and PGAS_RENDEZVOUS must point at this job's rendezvous" // err names PGAS_TLS
				}
				return nil, 0, backoff.Permanent(fmt.Errorf("%w (%d times in a row): %w; %s", ErrAuth, r.authFails, err, fix))
			}
		}
		return nil, 0, fmt.Errorf("handshake: %w", err)
	}
	r.authFails = 0
	if peer != ServerID {
		return nil, 0, backoff.Permanent(fmt.Errorf("%w: the peer at %s presented id %d, not the rendezvous's; PGAS_RENDEZVOUS points at something else", ErrProtocol, r.env.Rendezvous, peer))
	}
	if _, err := rw.Write(helloMsg); err != nil {
		return nil, 0, fmt.Errorf("send hello: %w", err)
	}
	return rw, id, nil
}

// awaitTable reads the rendezvous's answers on rw (over c) until the
// table: an ack first while the others register, or a relay notice that
// sends this process to an ancestor for it. Anything else ends the
// attempt (answer.go).
func (r *registrar) awaitTable(ctx context.Context, c, rw net.Conn, id uint32) (attemptResult, error) {
	for {
		body, m, err := r.nextMessage(ctx, rw)
		if err != nil {
			return attemptResult{}, err
		}
		switch m.Kind {
		case msgAck:
			if err := r.onAck(ctx, c, m); err != nil {
				return attemptResult{}, err
			}
		case msgRelay:
			if r.join {
				return attemptResult{}, backoff.Permanent(fmt.Errorf("%w: the rendezvous sent a joiner a relay notice; run the same gaspigo build everywhere", ErrProtocol))
			}
			if body, m, err = r.relayed(ctx, rw, m.Relay); err != nil {
				return attemptResult{}, err
			}
			if m == nil {
				continue // asked the rendezvous for it
			}
			return r.onTable(rw, body, m)
		case msgTable, msgJoined:
			return r.onTable(rw, body, m)
		default:
			return attemptResult{}, backoff.Permanent(r.refusal(m, id))
		}
	}
}

// nextMessage reads the rendezvous's next message from rw. A connection
// lost is worth another attempt; bytes that are not a message are not.
func (r *registrar) nextMessage(ctx context.Context, rw net.Conn) ([]byte, *envelope, error) {
	body, err := readFrame(rw, MaxServerMessage)
	var m *envelope
	if err == nil {
		m, err = decodeBody(body)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		if errors.Is(err, ErrProtocol) || errors.Is(err, ErrTooLarge) {
			return nil, nil, backoff.Permanent(err)
		}
		return nil, nil, fmt.Errorf("connection to the rendezvous lost while waiting for the table: %w", err)
	}
	return body, m, nil
}
