package bootstrap

// A process's registration at the server: the handshake's connection
// handed over by the listener, the hello checked, the process registered
// (or a joiner given its id), and the ack, table or refusal written back.

import (
	"fmt"
	"net"
	"time"
)

// handle serves one authenticated connection (listen.Handler): its hello,
// its registration, then its reports.
func (s *Server) handle(c net.Conn, peer uint32) {
	sc := &srvConn{rw: c, remote: c.RemoteAddr().String()}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.Close()
		return
	}
	s.conns[sc] = struct{}{}
	s.mu.Unlock()
	defer func() {
		c.Close()
		s.mu.Lock()
		delete(s.conns, sc)
		s.mu.Unlock()
	}()
	m, err := readMsg(c, MaxClientMessage)
	if err != nil {
		s.nRefused.Add(1)
		s.lis.Refuse(sc.remote, fmt.Errorf("no valid hello: %w", err), "proc", peer)
		return
	}
	if m.Kind != msgHello {
		s.reject(sc, peer, fmt.Sprintf("expected a hello, got message kind %d", m.Kind))
		return
	}
	if m.Hello.Join {
		if reason := s.checkJoinHello(peer, m.Hello); reason != "" {
			s.reject(sc, peer, reason)
			return
		}
		sc.member = m.Hello.Member
		sc.join = true
		if !s.registerJoiner(sc, peer) {
			return
		}
	} else {
		if reason := s.checkHello(peer, m.Hello); reason != "" {
			s.reject(sc, peer, reason)
			return
		}
		sc.proc = peer
		sc.member = m.Hello.Member
		sc.relay = m.Hello.Relay
		if !s.register(sc) {
			return
		}
	}
	c.SetDeadline(time.Time{})
	s.readLoop(sc)
}

func (s *Server) checkHello(peer uint32, h *hello) string {
	n := s.cfg.NumProcs
	switch {
	case h.Version != protoVersion:
		return fmt.Sprintf("speaks rendezvous protocol %d, this rendezvous speaks %d; run the same gaspigo build everywhere", h.Version, protoVersion)
	case h.Member.Proc != peer:
		return fmt.Sprintf("authenticated as process %d but registers process %d", peer, h.Member.Proc)
	case peer == JoinerID:
		return "presented the joiner's id without a join hello; run the same gaspigo build everywhere"
	case int64(peer) >= int64(n):
		return fmt.Sprintf("process id %d is out of range: this job has %d processes (ids 0..%d); check PGAS_PROC and PGAS_NPROCS (a process started after the job formed joins it with PGAS_JOIN=1)", peer, n, n-1)
	case h.NumProcs != n:
		return fmt.Sprintf("process was started for %d processes (PGAS_NPROCS), but this job has %d", h.NumProcs, n)
	case h.NumRanks != s.cfg.NumRanks:
		return fmt.Sprintf("process was started for %d ranks (PGAS_NRANKS), but this job has %d", h.NumRanks, s.cfg.NumRanks)
	case h.JobID != "" && s.cfg.JobID != "" && h.JobID != s.cfg.JobID:
		return fmt.Sprintf("process belongs to job %q, this rendezvous serves job %q", h.JobID, s.cfg.JobID)
	}
	if err := checkMember(h.Member); err != nil {
		return "bad member: " + err.Error()
	}
	return ""
}

func (s *Server) reject(sc *srvConn, proc uint32, reason string) {
	s.nRefused.Add(1)
	s.log.Warn("rendezvous: rejected registration", "proc", proc, "remote", sc.remote, "reason", reason)
	sc.wmu.Lock()
	defer sc.wmu.Unlock()
	sc.rw.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
	writeMsg(sc.rw, &envelope{Kind: msgReject, Reason: reason}, MaxServerMessage)
}

// sameProcess reports whether two registrations come from one process (a
// reconnect), as opposed to two processes started with the same id.
func sameProcess(a, b Member) bool {
	return a.Proc == b.Proc && a.Pid == b.Pid && a.Host == b.Host && a.Addr == b.Addr
}

// register adds sc and answers it: with an ack while others have yet to
// register, with the table once it is complete (the last process's
// registration completes it, and every process gets it then). It returns
// false when sc was rejected or the server is closing.
func (s *Server) register(sc *srvConn) bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	if s.table != nil {
		return s.reconnectLocked(sc)
	}
	old, dup := s.regs[sc.proc]
	if dup && !sameProcess(old.member, sc.member) {
		s.mu.Unlock()
		s.reject(sc, sc.proc, fmt.Sprintf("process %d is already registered by pid %d on host %q (%s); two processes were started with the same id (PGAS_PROC or the launcher's index)",
			sc.proc, old.member.Pid, old.member.Host, old.remote))
		return false
	}
	s.regs[sc.proc] = sc
	if len(s.regs) < s.cfg.NumProcs {
		return s.ackLocked(sc, old)
	}
	return s.completeLocked(old)
}

// reconnectLocked answers a process that registers again once the table
// is complete (it lost its connection) with the table; another process
// with its id is rejected. Called with s.mu held; it unlocks it.
func (s *Server) reconnectLocked(sc *srvConn) bool {
	m := s.table.Members[sc.proc]
	if !sameProcess(m, sc.member) {
		s.mu.Unlock()
		s.reject(sc, sc.proc, fmt.Sprintf("the member table is complete and process %d is pid %d on host %q; another process was started with the same id",
			sc.proc, m.Pid, m.Host))
		return false
	}
	old := s.regs[sc.proc]
	s.regs[sc.proc] = sc
	tbl := cloneTable(*s.table)
	sc.wmu.Lock()
	s.mu.Unlock()
	if old != nil {
		old.rw.Close()
	}
	err := s.writeLocked(sc, &envelope{Kind: msgTable, Table: &tbl})
	sc.wmu.Unlock()
	s.nTables.Add(1)
	s.log.Info("rendezvous: process reconnected after the table was complete", "proc", sc.proc, "remote", sc.remote, "err", err)
	return s.answered(sc, err)
}

// ackLocked acknowledges sc's registration, and closes old, the same
// process's earlier connection, if any. Called with s.mu held; it
// unlocks it.
func (s *Server) ackLocked(sc, old *srvConn) bool {
	n := len(s.regs)
	sc.wmu.Lock()
	s.mu.Unlock()
	if old != nil {
		old.rw.Close()
	}
	err := s.writeLocked(sc, &envelope{Kind: msgAck})
	sc.wmu.Unlock()
	s.log.Debug("rendezvous: registered", "proc", sc.proc, "host", sc.member.Host, "addr", sc.member.Addr,
		"registered", n, "of", s.cfg.NumProcs)
	return s.answered(sc, err)
}

// completeLocked registers the last process: it fixes the table and sends
// it to everyone, and to the joiners that came before it was complete;
// old is the last process's earlier connection, if any. Called with s.mu
// held; it unlocks it.
func (s *Server) completeLocked(old *srvConn) bool {
	t := Table{NumRanks: s.cfg.NumRanks, JobID: s.cfg.JobID, RefillWait: s.cfg.RefillWait, Members: make([]Member, s.cfg.NumProcs)}
	targets := make([]*srvConn, s.cfg.NumProcs)
	for p, r := range s.regs {
		t.Members[p] = r.member
		targets[p] = r
	}
	var joiners []*srvConn
	if !s.finished { // else Finish told them so already
		joiners = s.waitingJoiners()
	}
	s.table = &t
	close(s.complete)
	s.bcast.Add(1)
	s.mu.Unlock()
	defer s.bcast.Done()
	if old != nil {
		old.rw.Close()
	}
	s.log.Info("rendezvous: member table complete", "procs", s.cfg.NumProcs, "ranks", s.cfg.NumRanks, "job", s.cfg.JobID,
		"joiners_waiting", len(joiners))
	return s.deliverTable(t, targets, joiners)
}

// answered finishes a registration whose answer was written with error
// err: a connection that could not take it is closed and unregistered
// (with its KindDisconnected report), as if it had closed, so that
// Connected does not count it; the process registers again.
func (s *Server) answered(sc *srvConn, err error) bool {
	if err == nil {
		return true
	}
	sc.rw.Close()
	s.disconnected(sc, err)
	return false
}

func (s *Server) writeLocked(sc *srvConn, e *envelope) error {
	sc.rw.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
	return writeMsg(sc.rw, e, MaxServerMessage)
}
