package bootstrap

import (
	"fmt"
	"maps"
	"slices"
)

// This file is the rendezvous's side of joiners: processes started after
// the job formed, to refill its spare pool (docs/design.md §11). A joiner
// sends a hello marked Join, presenting the id the launcher reserved for it
// (Reserve) or JoinerID. The server gives it an id that no process of the
// job ever had, answers with that id and the original table once the table
// is complete, and keeps the connection for reports like any other.

// Reserve returns the next joiner id (NumProcs, NumProcs+1, ...) for a
// launcher that starts a joiner with PGAS_PROC set to it; a join hello
// presenting it gets it, once. Ids are never handed out twice, whether
// reserved or assigned to a joiner that presented JoinerID: the
// membership fences processes by id. It fails when the ids below MaxProcs
// are used up (ErrIDsUsedUp: start no more joiners), after Finish
// (ErrJobFinished: there is no job left to join), and after Close
// (ErrClosed).
func (s *Server) Reserve() (uint32, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return 0, fmt.Errorf("%w: the rendezvous reserves no joiner id after Close", ErrClosed)
	case s.finished:
		return 0, fmt.Errorf("%w: no joiner id reserved", ErrJobFinished)
	}
	id, ok := s.newID()
	if !ok {
		return 0, fmt.Errorf("%w: %s", ErrIDsUsedUp, s.usedUp())
	}
	s.reserved[id] = struct{}{}
	return id, nil
}

// newID hands out the next joiner id, or says that none is left. The
// caller holds s.mu.
func (s *Server) newID() (uint32, bool) {
	if s.nextID >= MaxProcs {
		return 0, false
	}
	id := s.nextID
	s.nextID++
	return id, true
}

// usedUp says that no joiner id is left.
func (s *Server) usedUp() string {
	return fmt.Sprintf("every process id below %d is used (%d by the processes the job was started with, the rest by joiners); no more processes can join this job",
		MaxProcs, s.cfg.NumProcs)
}

// Finish records that the job has ended: from now on a join hello is
// answered with "finished" (the joiner's JoinRunning returns
// ErrJobFinished and it exits 0), and so is every joiner still waiting for
// the table. The processes' connections stay open for their last
// reports. Idempotent; it returns once the waiting joiners were told (each
// write bounded by WriteTimeout).
func (s *Server) Finish() {
	s.mu.Lock()
	if s.finished || s.closed {
		s.finished = true
		s.mu.Unlock()
		return
	}
	s.finished = true
	var waiting []*srvConn
	if s.table == nil { // after it, every joiner has been answered
		waiting = s.waitingJoiners()
	}
	s.bcast.Add(1) // Close lets these writes finish, as the table's
	s.mu.Unlock()
	defer s.bcast.Done()
	if len(waiting) == 0 {
		return
	}
	msg, err := encodeMsg(&envelope{Kind: msgFinished}, MaxServerMessage)
	if err != nil {
		s.log.Error("rendezvous: cannot encode the job's end for waiting joiners", "err", err)
		return
	}
	ds := make([]delivery, len(waiting))
	for i, j := range waiting {
		ds[i] = delivery{j, msg}
	}
	s.broadcast(ds)
	for _, j := range waiting {
		j.rw.Close() // nothing follows; the joiner exits
	}
	s.log.Info("rendezvous: the job finished; told the joiners waiting for the table", "joiners", len(waiting))
}

// Member returns the record of process proc as it registered: a process
// the job was started with (while registered, and for good once the table
// is complete) or a joiner (from its registration on, also after it
// disconnected). False for anything else.
func (s *Server) Member(proc uint32) (Member, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var m Member
	switch {
	case int64(proc) < int64(s.cfg.NumProcs) && s.table != nil:
		m = s.table.Members[proc]
	case int64(proc) < int64(s.cfg.NumProcs):
		r, ok := s.regs[proc]
		if !ok {
			return Member{}, false
		}
		m = r.member
	default:
		j, ok := s.joined[proc]
		if !ok {
			return Member{}, false
		}
		m = j
	}
	m.Extra = maps.Clone(m.Extra)
	return m, true
}

// joinedBefore returns the records of the joiners with ids below id, in
// id order (Table.Joined). The caller holds s.mu.
func (s *Server) joinedBefore(id uint32) []Member {
	var out []Member
	for _, p := range slices.Sorted(maps.Keys(s.joined)) {
		if p < id {
			m := s.joined[p]
			m.Extra = maps.Clone(m.Extra)
			out = append(out, m)
		}
	}
	return out
}

// waitingJoiners returns the joiners' connections in id order. The caller
// holds s.mu.
func (s *Server) waitingJoiners() []*srvConn {
	ids := slices.Sorted(maps.Keys(s.jregs))
	out := make([]*srvConn, len(ids))
	for i, id := range ids {
		out[i] = s.jregs[id]
	}
	return out
}

// checkJoinHello checks a join hello that authenticated as peer: the
// protocol, the job's shape as far as the joiner knows it, and its member.
// The id is registerJoiner's.
func (s *Server) checkJoinHello(peer uint32, h *hello) string {
	switch {
	case h.Version != protoVersion:
		return fmt.Sprintf("speaks rendezvous protocol %d, this rendezvous speaks %d; run the same gaspigo build everywhere", h.Version, protoVersion)
	case h.Member.Proc != peer:
		return fmt.Sprintf("authenticated as %s but joins as %s", procName(peer), procName(h.Member.Proc))
	case h.NumProcs != 0 && h.NumProcs != s.cfg.NumProcs:
		return fmt.Sprintf("joiner was started for a job of %d processes (PGAS_NPROCS), but this job was started with %d; unset PGAS_NPROCS for a joiner, or set it to the job's", h.NumProcs, s.cfg.NumProcs)
	case h.NumRanks != 0 && h.NumRanks != s.cfg.NumRanks:
		return fmt.Sprintf("joiner was started for %d ranks (PGAS_NRANKS or PGAS_SPARES), but this job has %d; unset them for a joiner, or set them to the job's", h.NumRanks, s.cfg.NumRanks)
	case h.JobID != "" && s.cfg.JobID != "" && h.JobID != s.cfg.JobID:
		return fmt.Sprintf("joiner belongs to job %q, this rendezvous serves job %q", h.JobID, s.cfg.JobID)
	}
	if err := checkMember(h.Member); err != nil {
		return "bad member: " + err.Error()
	}
	return ""
}

// registerJoiner gives the joiner sc, which presented id peer, its id,
// records it, and answers it: with the table and its id once the table is
// complete, else with an ack carrying its id (register sends the table
// when it completes). It returns false when sc was rejected or told that
// the job finished, or the server is closing.
func (s *Server) registerJoiner(sc *srvConn, peer uint32) bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	if s.finished {
		s.mu.Unlock()
		s.tellFinished(sc, peer)
		return false
	}
	id, first, reason := s.joinerID(peer, sc.member)
	if reason != "" {
		s.mu.Unlock()
		s.reject(sc, peer, reason)
		return false
	}
	sc.proc = id
	sc.member.Proc = id
	s.joined[id] = sc.member
	old := s.jregs[id]
	s.jregs[id] = sc
	e := &envelope{Kind: msgAck, Proc: id}
	if s.table != nil {
		tbl := cloneTable(*s.table)
		tbl.Joined = s.joinedBefore(id)
		e = &envelope{Kind: msgJoined, Table: &tbl, Proc: id}
	}
	sc.wmu.Lock() // before the table's broadcast can take it: the ack goes first
	s.mu.Unlock()
	if old != nil {
		old.rw.Close()
	}
	err := s.writeLocked(sc, e)
	sc.wmu.Unlock()
	if first {
		s.log.Info("rendezvous: a process joined the running job", "proc", id, "presented", procAttr(peer),
			"host", sc.member.Host, "pid", sc.member.Pid, "addr", sc.member.Addr, "table_sent", e.Kind == msgJoined, "err", err)
		s.deliver(Report{Proc: id, Kind: KindJoined, Rank: -1, Text: fmt.Sprintf("pid %d on %s", sc.member.Pid, sc.member.Host)})
	} else {
		s.log.Info("rendezvous: a joiner reconnected", "proc", id, "remote", sc.remote, "err", err)
	}
	return s.answered(sc, err)
}

// joinerID decides the id of a joiner that presented peer: a new one for
// JoinerID, a reserved one once, or the same one again for the same
// process reconnecting (first false). Otherwise reason says why not. The
// caller holds s.mu.
func (s *Server) joinerID(peer uint32, m Member) (id uint32, first bool, reason string) {
	n := s.cfg.NumProcs
	if peer == JoinerID {
		id, ok := s.newID()
		if !ok {
			return 0, false, s.usedUp()
		}
		return id, true, ""
	}
	if int64(peer) < int64(n) {
		return 0, false, fmt.Sprintf("process id %d belongs to the processes the job was started with (0..%d); a joiner presents the id the launcher reserved for it (PGAS_PROC) or none (unset PGAS_PROC: the rendezvous assigns one)", peer, n-1)
	}
	if _, ok := s.reserved[peer]; ok {
		delete(s.reserved, peer)
		return peer, true, ""
	}
	if had, ok := s.joined[peer]; ok {
		m.Proc = peer
		if !sameProcess(had, m) {
			return 0, false, fmt.Sprintf("joiner id %d is taken by pid %d on host %q; a reserved id admits one process: unset PGAS_PROC so that the rendezvous assigns a new id", peer, had.Pid, had.Host)
		}
		return peer, false, ""
	}
	return 0, false, fmt.Sprintf("process id %d was not reserved for a joiner by this rendezvous (the launcher reserves ids from %d up); unset PGAS_PROC so that the rendezvous assigns a new id", peer, n)
}

// tellFinished answers a join hello after Finish: the joiner exits 0.
func (s *Server) tellFinished(sc *srvConn, peer uint32) {
	s.log.Info("rendezvous: a process came to join after the job finished; told it so", "presented", procAttr(peer), "remote", sc.remote,
		"host", sc.member.Host, "pid", sc.member.Pid)
	sc.wmu.Lock()
	defer sc.wmu.Unlock()
	s.writeLocked(sc, &envelope{Kind: msgFinished})
}

// procName names a process in messages: "process 5", or a joiner that
// presents JoinerID, the rendezvous not having given it an id yet.
func procName(p uint32) string {
	if p == JoinerID {
		return "a joiner without an id yet"
	}
	return fmt.Sprintf("process %d", p)
}

// procAttr is a process id as a log value.
func procAttr(p uint32) any {
	if p == JoinerID {
		return "joiner, no id yet"
	}
	return p
}
