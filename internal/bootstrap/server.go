package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gaspigo/gaspigo/internal/admit"
	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/internal/listen"
)

// ServerConfig configures the rendezvous server.
type ServerConfig struct {
	// Listener is where processes connect. The Server owns it from
	// NewServer on and closes it on Close.
	Listener net.Listener
	// Token is the job token every process must prove it knows.
	Token []byte
	// TLS runs mutual TLS over every connection once its token handshake
	// succeeds (PGAS_TLS; see internal/auth). Every process must agree.
	TLS bool
	// NumProcs is the number of processes that must register (ranks plus
	// spares) before the table is sent.
	NumProcs int
	// NumRanks is the number of ranks, 1..NumProcs.
	NumRanks int
	// JobID names the job; a process that says it belongs to another
	// (non-empty) job id is rejected. May be empty.
	JobID string
	// Logger receives refusals (Warn), completion (Info) and per-process
	// detail (Debug). Nil discards.
	Logger *slog.Logger
	// HandshakeTimeout bounds the handshake and hello of one connection, so
	// a stray or stuck client cannot hold a slot. Zero: the default (5 s).
	// The server adds perProcWait (40 ms) per process of the job, as the
	// processes do: thousands of them register at once on a few cores.
	HandshakeTimeout time.Duration
	// WriteTimeout bounds one write to a process (ack, table, reject). Zero:
	// the default (10 s).
	WriteTimeout time.Duration
	// ReportBuffer is the capacity of the Reports channel; reports beyond it
	// are dropped and counted, never waited for. Zero: the default (1024).
	ReportBuffer int
	// RefillWait is put into the member table every process receives
	// (Table.RefillWait): how long the membership waits for a replacement
	// process to join. It travels in the table so that every process,
	// joiners included, uses the same value. Zero: the membership's
	// default.
	RefillWait time.Duration
}

// DefaultServerConfig returns the timeouts and buffer sizes for a real job;
// the caller fills in Listener, Token, NumProcs, NumRanks, JobID and Logger.
func DefaultServerConfig() ServerConfig {
	return ServerConfig{HandshakeTimeout: 5 * time.Second, WriteTimeout: 10 * time.Second, ReportBuffer: 1024}
}

// LocalServerConfig is DefaultServerConfig with shorter timeouts, for
// loopback jobs and tests.
func LocalServerConfig() ServerConfig {
	return ServerConfig{HandshakeTimeout: 3 * time.Second, WriteTimeout: 3 * time.Second, ReportBuffer: 1024}
}

// Validate checks c without changing it. Zero timeouts and buffer are valid
// (they mean the default).
func (c ServerConfig) Validate() error {
	switch {
	case c.Listener == nil:
		return fmt.Errorf("%w: ServerConfig.Listener is nil; listen first (e.g. net.Listen(\"tcp\", \"127.0.0.1:0\"))", ErrConfig)
	case auth.TokenWeakness(c.Token) != "":
		return fmt.Errorf("%w: ServerConfig.Token is weak: %s (%s)", ErrConfig, auth.TokenWeakness(c.Token), auth.TokenAdvice)
	case c.NumProcs < 1 || c.NumProcs > MaxProcs:
		return fmt.Errorf("%w: ServerConfig.NumProcs=%d, want 1..%d", ErrConfig, c.NumProcs, MaxProcs)
	case c.NumRanks < 1 || c.NumRanks > c.NumProcs:
		return fmt.Errorf("%w: ServerConfig.NumRanks=%d, want 1..NumProcs (%d)", ErrConfig, c.NumRanks, c.NumProcs)
	case c.HandshakeTimeout < 0:
		return fmt.Errorf("%w: ServerConfig.HandshakeTimeout=%v is negative", ErrConfig, c.HandshakeTimeout)
	case c.WriteTimeout < 0:
		return fmt.Errorf("%w: ServerConfig.WriteTimeout=%v is negative", ErrConfig, c.WriteTimeout)
	case c.ReportBuffer < 0:
		return fmt.Errorf("%w: ServerConfig.ReportBuffer=%d is negative", ErrConfig, c.ReportBuffer)
	case c.RefillWait < 0:
		return fmt.Errorf("%w: ServerConfig.RefillWait=%v is negative; 0 means the membership's default", ErrConfig, c.RefillWait)
	}
	return nil
}

// ServerStats are the Server's counters.
type ServerStats struct {
	Registered  int    // processes the job was started with registered so far (NumProcs once complete)
	Joiners     int    // joiners registered so far (ids NumProcs and up), connected or not
	Connected   int    // open control connections of registered processes, joiners included
	Refused     uint64 // connections that failed the handshake (timeouts included) or sent no valid hello, or registrations rejected
	TimedOut    uint64 // of the connections refused: those whose handshake ran out of time
	Shed        uint64 // connections closed unauthenticated by the admission gate to make room for newer ones
	Accepted    uint64 // connections accepted (each enters the admission gate)
	Reports     uint64 // reports delivered on Reports()
	Dropped     uint64 // reports dropped because Reports() was full
	BadMessages uint64 // malformed or unexpected messages from authenticated processes
	Tables      uint64 // whole member tables written to processes (the rest fetched it from relays)
	Asked       uint64 // of those, tables a process asked for because no relay gave it
}

// Server is the rendezvous: it collects one Member per process, sends the
// complete table to all of them, then keeps each control connection open to
// receive Reports. It also admits joiners, processes started after the job
// formed: each gets a new id and the table, and keeps its connection for
// reports like the others. See the package documentation for the rules.
type Server struct {
	cfg      ServerConfig
	log      *slog.Logger
	reports  chan Report
	complete chan struct{}
	done     chan struct{} // closed when the serving goroutine has finished

	// mu guards the fields below. Lock order: Server.mu before srvConn.wmu.
	mu      sync.Mutex
	regs    map[uint32]*srvConn // current control connection per process
	table   *Table              // nil until complete
	tmsg    []byte              // the table's message, encoded once it is complete
	conns   map[*srvConn]struct{}
	closed  bool
	serving bool

	// Joiners. An id is never handed out twice: the membership fences
	// processes by id, so a new process under an old id would be fenced
	// or would take a dead one's place.
	nextID   uint32              // the next joiner id (Reserve, or a join hello presenting JoinerID)
	reserved map[uint32]struct{} // ids Reserve handed out that no joiner registered yet
	joined   map[uint32]Member   // registered joiners by id, kept after they disconnect
	jregs    map[uint32]*srvConn // joiners' current control connections
	finished bool                // Finish was called: join hellos get msgFinished

	bcast   sync.WaitGroup // table broadcasts in progress; Close lets them finish
	stopped chan struct{}  // closed by stop
	lis     *listen.Listener

	nRefused, nReports, nDropped, nBad, nTables, nAsked atomic.Uint64
}

type srvConn struct {
	rw     net.Conn // the stream: the socket, or TLS over it (ServerConfig.TLS)
	remote string
	wmu    sync.Mutex // serialises writes
	proc   uint32
	member Member
	join   bool   // a joiner's connection: in Server.jregs, not regs
	relay  string // the process's table relay (hello.Relay), "" without one
}

// NewServer makes a Server; Serve runs it. Zero timeouts and buffer take
// DefaultServerConfig's values. A config that fails Validate makes Serve
// return the error.
func NewServer(cfg ServerConfig) *Server {
	def := DefaultServerConfig()
	if cfg.HandshakeTimeout == 0 {
		cfg.HandshakeTimeout = def.HandshakeTimeout
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = def.WriteTimeout
	}
	if cfg.ReportBuffer == 0 {
		cfg.ReportBuffer = def.ReportBuffer
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	rb := max(cfg.ReportBuffer, 0)
	return &Server{
		cfg:      cfg,
		log:      lg,
		reports:  make(chan Report, rb),
		complete: make(chan struct{}),
		done:     make(chan struct{}),
		regs:     make(map[uint32]*srvConn),
		conns:    make(map[*srvConn]struct{}),
		stopped:  make(chan struct{}),
		nextID:   uint32(max(cfg.NumProcs, 0)),
		reserved: make(map[uint32]struct{}),
		joined:   make(map[uint32]Member),
		jregs:    make(map[uint32]*srvConn),
	}
}

// Addr is the listener's address, or nil without a listener.
func (s *Server) Addr() net.Addr {
	if s.cfg.Listener == nil {
		return nil
	}
	return s.cfg.Listener.Addr()
}

// Reports delivers the processes' reports, a KindDisconnected report
// when a registered process's connection closes, and a KindJoined report
// when a joiner registers.
// The server never waits for the reader: when the channel is full, reports
// are dropped and counted (Stats().Dropped). It is closed when Serve returns.
func (s *Server) Reports() <-chan Report { return s.reports }

// Complete is closed when every process has registered and the table is
// fixed.
func (s *Server) Complete() <-chan struct{} { return s.complete }

// Table returns a copy of the member table, and false while it is not
// complete.
func (s *Server) Table() (Table, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.table == nil {
		return Table{}, false
	}
	return cloneTable(*s.table), true
}

// Connected reports whether process proc has a registered control
// connection open right now. Once it turns false for a process that had
// one, every report that came over it has been delivered (or dropped), and
// a KindDisconnected report follows them.
func (s *Server) Connected(proc uint32) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.regs[proc]
	_, jok := s.jregs[proc]
	return ok || jok
}

// Stats returns the counters.
func (s *Server) Stats() ServerStats {
	s.mu.Lock()
	st := ServerStats{Registered: len(s.regs), Joiners: len(s.joined), Connected: len(s.regs) + len(s.jregs)}
	if s.table != nil {
		st.Registered = len(s.table.Members)
	}
	lis := s.lis
	s.mu.Unlock()
	st.Refused = s.nRefused.Load()
	var ad admit.Stats
	if lis != nil {
		ad = lis.Stats()
	}
	st.TimedOut, st.Shed, st.Accepted = ad.TimedOut, ad.Shed, ad.Accepted
	st.Reports = s.nReports.Load()
	st.Dropped = s.nDropped.Load()
	st.BadMessages = s.nBad.Load()
	st.Tables, st.Asked = s.nTables.Load(), s.nAsked.Load()
	return st
}

// Serve accepts connections until ctx ends or Close is called, then closes
// every connection, waits for its goroutines and returns nil. It returns an
// error for an invalid config, a second call, a Server already closed
// (ErrClosed), or a listener that fails for good.
func (s *Server) Serve(ctx context.Context) error {
	if err := s.begin(); err != nil {
		return err
	}
	return s.run(ctx)
}

// begin marks the server as serving, so Close waits for run.
func (s *Server) begin() error {
	if err := s.cfg.Validate(); err != nil {
		s.Close()
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.serving {
		return fmt.Errorf("%w: Serve called twice", ErrConfig)
	}
	s.serving = true
	return nil
}

func (s *Server) run(ctx context.Context) error {
	defer close(s.done)
	defer close(s.reports)
	lis, err := listen.New(s.cfg.Listener, listen.Config{
		Name: "rendezvous", Purpose: auth.PurposeRendezvous, Token: s.cfg.Token, Self: ServerID, TLS: s.cfg.TLS,
		HandshakeTimeout: s.cfg.HandshakeTimeout + time.Duration(s.cfg.NumProcs)*perProcWait, Gate: admit.For(s.cfg.NumProcs), Log: s.log,
		Refused: s.refused,
	}, s.handle)
	if err != nil {
		s.stop()
		s.cfg.Listener.Close()
		return err
	}
	s.mu.Lock()
	s.lis = lis
	s.mu.Unlock()
	stopWatch := context.AfterFunc(ctx, s.stop)
	defer stopWatch()
	lis.Start()
	select {
	case <-s.stopped:
	case <-lis.Failed():
		err = fmt.Errorf("bootstrap: %w", lis.Err())
	}
	s.stop()
	lis.Close() // cuts the handshakes and waits for the handlers
	return err
}

// refused counts and logs a connection whose token handshake failed.
func (s *Server) refused(_ net.Conn, remote string, err error) {
	s.nRefused.Add(1)
	s.mu.Lock()
	lis := s.lis
	s.mu.Unlock()
	lis.Refuse(remote, fmt.Errorf("job-token handshake failed: %w", err))
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// stop stops accepting, lets a table broadcast in progress finish, and
// closes every connection. Idempotent; does not wait for the handlers.
func (s *Server) stop() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	close(s.stopped)
	s.mu.Unlock()
	s.bcast.Wait()
	s.mu.Lock()
	conns := make([]*srvConn, 0, len(s.conns))
	for sc := range s.conns {
		conns = append(conns, sc)
	}
	s.mu.Unlock()
	for _, sc := range conns {
		sc.rw.Close()
	}
}

// Close stops the server and waits for Serve to return. Idempotent.
func (s *Server) Close() error {
	s.stop()
	s.mu.Lock()
	serving := s.serving
	s.mu.Unlock()
	if serving {
		<-s.done
	} else if s.cfg.Listener != nil {
		s.cfg.Listener.Close()
	}
	return nil
}

func (s *Server) readLoop(sc *srvConn) {
	for {
		m, err := readMsg(sc.rw, MaxClientMessage)
		if err != nil {
			if errors.Is(err, ErrProtocol) || errors.Is(err, ErrTooLarge) {
				s.nBad.Add(1)
				s.log.Warn("rendezvous: bad message; closing the connection", "proc", sc.proc, "remote", sc.remote, "err", err)
			}
			s.disconnected(sc, err)
			return
		}
		if m.Kind == msgTableAsk && !sc.join {
			s.sendTable(sc)
			continue
		}
		if m.Kind != msgReport || !validKind(m.Report.Kind) {
			s.nBad.Add(1)
			kind := ""
			if m.Report != nil {
				kind = m.Report.Kind
			}
			s.log.Debug("rendezvous: ignored unexpected message", "proc", sc.proc, "msg", m.Kind, "report_kind", kind)
			continue
		}
		r := *m.Report
		r.Proc = sc.proc
		if len(r.Text) > MaxReportText {
			r.Text = r.Text[:MaxReportText]
		}
		s.deliver(r)
	}
}

func (s *Server) deliver(r Report) {
	select {
	case s.reports <- r:
		s.nReports.Add(1)
	default:
		s.nDropped.Add(1)
	}
}

func (s *Server) disconnected(sc *srvConn, err error) {
	s.mu.Lock()
	regs := s.regs
	if sc.join {
		regs = s.jregs
	}
	current := regs[sc.proc] == sc
	if current {
		delete(regs, sc.proc)
	}
	complete := s.table != nil
	closing := s.closed
	s.mu.Unlock()
	if !current || closing {
		return
	}
	if !complete && !sc.join {
		s.log.Info("rendezvous: process disconnected before the table was complete; it must register again",
			"proc", sc.proc, "remote", sc.remote, "err", err)
	} else {
		s.log.Debug("rendezvous: control connection closed", "proc", sc.proc, "err", err)
	}
	s.deliver(Report{Proc: sc.proc, Kind: KindDisconnected, Rank: -1})
}
