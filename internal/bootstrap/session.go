package bootstrap

import (
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Session is a process's control connection to the rendezvous, open after
// Register until Close. Losing it never fails the process: reports are then
// dropped, and Lost is closed.
type Session struct {
	cfg  ClientConfig
	log  *slog.Logger
	self Member
	conn net.Conn
	srv  *Server // hosted in this process by Join, or nil
	// relay serves the table to the job's processes for a while after
	// the registration (relay.go); Close stops it. Nil for none.
	relay *relay

	mu      sync.RWMutex // guards closed and the queue's closing
	closed  bool
	queue   chan Report
	lost    chan struct{}
	lostMu  sync.Once
	dropped atomic.Uint64

	writerDone chan struct{}
	wg         sync.WaitGroup // writer and reader
	closeOnce  sync.Once
}

func newSession(cfg ClientConfig, lg *slog.Logger, self Member, c net.Conn) *Session {
	s := &Session{
		cfg:        cfg,
		log:        lg,
		self:       self,
		conn:       c,
		queue:      make(chan Report, cfg.ReportQueue),
		lost:       make(chan struct{}),
		writerDone: make(chan struct{}),
	}
	s.wg.Add(2)
	go s.writer()
	go s.reader()
	return s
}

// Self is the member this process registered.
func (s *Session) Self() Member { return s.self }

// Lost is closed when the control connection is gone (the launcher or the
// hosting process exited, or Close was called).
func (s *Session) Lost() <-chan struct{} { return s.lost }

// Dropped counts reports that were not sent: queue full, connection lost,
// or sent after Close.
func (s *Session) Dropped() uint64 { return s.dropped.Load() }

// Server is the rendezvous this process hosts (Join with
// Env.ServeRendezvous), or nil.
func (s *Session) Server() *Server { return s.srv }

// Report queues r for the rendezvous and returns at once. It is best
// effort: when the queue is full or the connection is gone, r is dropped and
// counted. Proc is set to this process; Text is cut to MaxReportText. Safe
// for concurrent use, also after Close.
func (s *Session) Report(r Report) {
	r.Proc = s.self.Proc
	if len(r.Text) > MaxReportText {
		r.Text = r.Text[:MaxReportText]
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed || s.isLost() {
		s.dropped.Add(1)
		return
	}
	select {
	case s.queue <- r:
	default:
		s.dropped.Add(1)
	}
}

func (s *Session) isLost() bool {
	select {
	case <-s.lost:
		return true
	default:
		return false
	}
}

func (s *Session) markLost(err error) {
	s.lostMu.Do(func() {
		close(s.lost)
		s.mu.RLock()
		closing := s.closed
		s.mu.RUnlock()
		if !closing {
			s.log.Info("bootstrap: lost the connection to the rendezvous; carrying on without it",
				"proc", s.self.Proc, "err", err)
		}
		s.conn.Close()
	})
}

func (s *Session) writer() {
	defer s.wg.Done()
	defer close(s.writerDone)
	for r := range s.queue {
		if s.isLost() {
			s.dropped.Add(1)
			continue
		}
		s.conn.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
		if err := writeMsg(s.conn, &envelope{Kind: msgReport, Report: &r}, MaxClientMessage); err != nil {
			s.dropped.Add(1)
			s.markLost(err)
		}
	}
}

func (s *Session) reader() {
	defer s.wg.Done()
	for {
		// The rendezvous sends nothing after the table today; reading
		// detects its loss, and skips whatever later versions may send.
		if _, err := readMsg(s.conn, MaxServerMessage); err != nil {
			if errors.Is(err, ErrProtocol) {
				continue
			}
			s.markLost(err)
			return
		}
	}
}

// Close sends what is queued (for at most FlushTimeout), closes the
// connection, waits for the session's goroutines and, when this process
// hosts the rendezvous, closes that too. Idempotent.
func (s *Session) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		close(s.queue)
		s.mu.Unlock()
		t := time.AfterFunc(s.cfg.FlushTimeout, func() { s.conn.Close() })
		<-s.writerDone
		t.Stop()
		s.markLost(ErrClosed)
		s.wg.Wait()
		s.relay.close()
		if s.srv != nil {
			s.srv.Close()
		}
	})
	return nil
}
