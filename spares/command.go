package spares

import (
	"fmt"
	"slices"
)

// commandKind numbers the commands; the values are part of the log format.
type commandKind uint8

// The command kinds.
const (
	kindDeclareFailed commandKind = 1
	kindAddSpare      commandKind = 2
	// Kind 3 is retired (it recorded a checkpoint id; package ckpt's
	// agreement is the job's one record of the last checkpoint) and is not
	// reused: a log holding it is refused as an unknown kind.
	kindFinish    commandKind = 4
	kindSetVoters commandKind = 5
	kindEndWait   commandKind = 6
)

func (k commandKind) String() string {
	switch k {
	case kindDeclareFailed:
		return "DeclareFailed"
	case kindAddSpare:
		return "AddSpare"
	case kindFinish:
		return "Finish"
	case kindSetVoters:
		return "SetVoters"
	case kindEndWait:
		return "EndWait"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// command is one entry of the replicated log. The set is closed: the
// implementations are the value types below (pass values, not pointers).
type command interface {
	Kind() commandKind
	isCommand()
}

// declareFailed declares Proc failed. Reporter is the process that
// confirmed the failure (noProc: the launcher or an operator), Epoch the
// epoch of the view in which it did (0: unknown, not checked).
//
// Applied to a rank holder it is one log entry doing the whole recovery
// step: the epoch goes up, Proc moves to state.Failed and a spare of the pool
// takes the rank (the first on another host than Proc, else the first).
// With no spare left and state.RefillWait set, the rank awaits a joiner:
// Proc keeps it, failed, until an addSpare gives it to a joiner or the
// leader's endWait gives up on it. Otherwise (or then) the rank becomes
// vacant and the job fails with reasonSparesExhausted, or the rank stays
// vacant when shrinking. Applied to a spare it removes the spare from
// the pool (the epoch goes up too, since the view changed). It is a
// no-op when Proc is already failed, when Reporter was itself declared
// failed (a replaced, fenced process cannot evict live ones), or when the
// job is no longer running. An Epoch newer than the view is rejected with
// errBadCommand.
//
// The report's Epoch does not make a report about a live process stale: a
// process seen dead while it was a spare is still dead after a promotion
// committed meanwhile, so the next spare takes its rank in a later epoch.
type declareFailed struct {
	Proc     uint32
	Reporter uint32
	Epoch    uint64
}

// addSpare adds a new process to the job (a joiner: Config.Join). The
// epoch goes up. While ranks await a joiner it takes the lowest of them at
// once and holds it; otherwise it joins the spare pool (refilling it).
// Adding a process that is already in the job with the same Info is a
// no-op; with another Info, or after it failed, it is errBadCommand (a
// replacement process needs a new id).
type addSpare struct {
	Proc uint32
	Info procInfo
}

// endWait ends the wait of Rank for a joiner that started in epoch Since
// (state.Awaiting): the leader proposes it once the rank has waited
// state.RefillWait on its clock. The rank then goes the way of a rank
// lost with an empty pool: vacant with Shrink, else the job fails with
// reasonSparesExhausted. The epoch goes up. It is a no-op when Rank does
// not await since Since (a joiner took it, or this wait already ended) or
// the job is no longer running; a Rank out of range or a Since newer than
// the view is errBadCommand.
type endWait struct {
	Rank  int
	Since uint64
}

// finish marks the job finished. Idempotent; a no-op on a failed job.
type finish struct{}

// setVoters records the Raft voter set. The leader proposes it after it has
// changed the Raft configuration; it does not change the epoch. Every voter
// must be a known process that has not failed, at most voterCap of them,
// without repeats.
type setVoters struct {
	Voters []uint32
}

func (declareFailed) Kind() commandKind { return kindDeclareFailed }
func (addSpare) Kind() commandKind      { return kindAddSpare }
func (finish) Kind() commandKind        { return kindFinish }
func (setVoters) Kind() commandKind     { return kindSetVoters }
func (endWait) Kind() commandKind       { return kindEndWait }
func (declareFailed) isCommand()        {}
func (addSpare) isCommand()             {}
func (finish) isCommand()               {}
func (setVoters) isCommand()            {}
func (endWait) isCommand()              {}

// result says what a command did.
type result struct {
	// Changed is false for a no-op (see Note for why).
	Changed bool
	// Epoch is the epoch after the command.
	Epoch uint64
	// Rank is the rank the failed process held (declareFailed), the rank
	// whose wait ended (endWait) or the awaiting rank a joiner took
	// (addSpare); else -1.
	Rank int
	// Promoted is the spare or joiner that took Rank, noProc if none.
	Promoted uint32
	// Status is the job status after the command.
	Status jobStatus
	// Note is a short human-readable account, e.g. "already failed in epoch 3".
	Note string
}

func noop(s *state, format string, a ...any) result {
	return result{Epoch: s.Epoch, Rank: -1, Promoted: noProc, Status: s.Status, Note: fmt.Sprintf(format, a...)}
}

func badCmd(format string, a ...any) error {
	return fmt.Errorf("%w: %s", errBadCommand, fmt.Sprintf(format, a...))
}

// Apply applies cmd to s. It is deterministic and does no I/O: the same
// state and command give the same result on every process, which is what
// the Raft FSM relies on. An error means the command was rejected and s is
// unchanged; errors wrap errBadCommand or errUnknownProc. Apply is
// idempotent for every command: applying it again is a no-op, so a
// proposal retried across a leader change is harmless.
func (s *state) apply(cmd command) (result, error) {
	if s.Failed == nil {
		s.Failed = map[uint32]uint64{}
	}
	switch c := cmd.(type) {
	case declareFailed:
		return s.applyDeclareFailed(c)
	case addSpare:
		return s.applyAddSpare(c)
	case finish:
		if s.Status != statusRunning {
			return noop(s, "job is already %s", s.Status), nil
		}
		s.Status = statusFinished
		r := noop(s, "job finished")
		r.Changed = true
		return r, nil
	case setVoters:
		return s.applySetVoters(c)
	case endWait:
		return s.applyEndWait(c)
	case nil:
		return result{}, badCmd("nil command")
	}
	return result{}, badCmd("unknown command type %T (pass one of the command values)", cmd)
}

func (s *state) applyDeclareFailed(c declareFailed) (result, error) {
	if c.Epoch > s.Epoch {
		return result{}, badCmd("DeclareFailed of proc %d reported in epoch %d, but the view is only at epoch %d", c.Proc, c.Epoch, s.Epoch)
	}
	if !s.Procs.has(c.Proc) {
		return result{}, fmt.Errorf("%w: DeclareFailed names proc %d", errUnknownProc, c.Proc)
	}
	if !s.Procs.has(c.Reporter) && c.Reporter != noProc {
		return result{}, fmt.Errorf("%w: DeclareFailed reported by proc %d", errUnknownProc, c.Reporter)
	}
	if s.Status != statusRunning {
		return noop(s, "job is %s", s.Status), nil
	}
	if e, ok := s.Failed[c.Proc]; ok {
		return noop(s, "proc %d already failed in epoch %d", c.Proc, e), nil
	}
	if e, ok := s.Failed[c.Reporter]; ok {
		return noop(s, "reporter %d was itself declared failed in epoch %d", c.Reporter, e), nil
	}
	s.Epoch++
	s.Failed[c.Proc] = s.Epoch
	s.Voters = slices.DeleteFunc(s.Voters, func(v uint32) bool { return v == c.Proc })
	res := result{Changed: true, Epoch: s.Epoch, Rank: -1, Promoted: noProc}
	if i := slices.Index(s.Spares, c.Proc); i >= 0 {
		s.Spares = slices.Delete(s.Spares, i, i+1)
		res.Note = fmt.Sprintf("spare %d removed from the pool", c.Proc)
	} else if r, ok := s.RankOf(c.Proc); ok {
		res.Rank = r
		switch {
		case len(s.Spares) > 0:
			i := s.spareFor(c.Proc)
			res.Promoted = s.Spares[i]
			s.Ranks = s.Ranks.with(r, s.Spares[i])
			s.Spares = slices.Delete(s.Spares, i, i+1)
			res.Note = fmt.Sprintf("spare %d takes rank %d", res.Promoted, r)
		case s.RefillWait > 0:
			// c.Proc keeps the rank, failed: the runtime sees it lost and
			// not yet replaced, and survivors wait for a joiner.
			i, _ := s.awaitIndex(r)
			s.Awaiting = slices.Insert(s.Awaiting, i, awaiting{Rank: r, Since: s.Epoch})
			res.Note = fmt.Sprintf("no spare left: rank %d awaits a joiner for %v", r, s.RefillWait)
		default:
			res.Note = s.loseRank(r)
		}
	} else {
		res.Note = fmt.Sprintf("proc %d held no rank", c.Proc)
	}
	res.Status = s.Status
	return res, nil
}

// loseRank gives up on rank r, which no process will take: it becomes
// vacant, and the job fails unless it shrinks and a live rank is left.
// It returns the note of the result.
func (s *state) loseRank(r int) string {
	s.Ranks = s.Ranks.with(r, noProc)
	switch {
	case !s.Shrink:
		s.Status, s.StatusReason = statusFailed, reasonSparesExhausted
		return fmt.Sprintf("no spare left for rank %d: job failed (%s)", r, reasonSparesExhausted)
	case s.LiveRanks() == 0:
		s.Status, s.StatusReason = statusFailed, reasonAllRanksLost
		return fmt.Sprintf("rank %d was the last live rank: job failed (%s)", r, reasonAllRanksLost)
	}
	return fmt.Sprintf("no spare left: rank %d is vacant (shrink)", r)
}

// spareFor is the index in the pool of the spare that takes the rank of
// the failed process: the first spare on another host than it, or the
// first spare when all are on its host. A process often fails with its
// host (a crash, a cut link): a spare there would be lost too, and its
// loss found only one detection later, after the rank had waited for it.
func (s *state) spareFor(failed uint32) int {
	host := s.Procs.info(failed).Host
	if i := slices.IndexFunc(s.Spares, func(p uint32) bool { return s.Procs.info(p).Host != host }); i >= 0 {
		return i
	}
	return 0
}

func (s *state) applyAddSpare(c addSpare) (result, error) {
	if c.Proc == noProc {
		return result{}, badCmd("AddSpare of proc %d (NoProc is reserved)", c.Proc)
	}
	if err := c.Info.validate(); err != nil {
		return result{}, badCmd("AddSpare of proc %d: %v", c.Proc, err)
	}
	if e, ok := s.Failed[c.Proc]; ok {
		return result{}, badCmd("AddSpare of proc %d, which was declared failed in epoch %d: give the replacement a new process id", c.Proc, e)
	}
	if info, ok := s.Procs.get(c.Proc); ok {
		if info != c.Info {
			return result{}, badCmd("AddSpare of proc %d, which is already in the job with other addresses (%+v)", c.Proc, info)
		}
		return noop(s, "proc %d is already in the job", c.Proc), nil
	}
	if s.Status != statusRunning {
		return noop(s, "job is %s", s.Status), nil
	}
	if s.Procs.len() >= maxProcs {
		return result{}, badCmd("AddSpare of proc %d: the job already has %d procs (max %d)", c.Proc, s.Procs.len(), maxProcs)
	}
	s.Procs.set(c.Proc, c.Info)
	if len(s.Awaiting) > 0 {
		// A rank changes holder: a new epoch fences the old one.
		s.Epoch++
		a := s.Awaiting[0]
		s.Awaiting = slices.Delete(s.Awaiting, 0, 1)
		s.Ranks = s.Ranks.with(a.Rank, c.Proc)
		r := noop(s, "joiner %d takes rank %d, which awaited a joiner since epoch %d", c.Proc, a.Rank, a.Since)
		r.Changed, r.Rank, r.Promoted = true, a.Rank, c.Proc
		return r, nil
	}
	// Into the pool: no rank changes holder, so the epoch stays. The ranks
	// go on with what they were doing (a new epoch would cut every
	// operation in flight short and send the job back to its checkpoint);
	// the view that lists the joiner reaches them by the state's version.
	s.Spares = append(s.Spares, c.Proc)
	r := noop(s, "spare %d added to the pool (%d spares)", c.Proc, len(s.Spares))
	r.Changed = true
	return r, nil
}

func (s *state) applyEndWait(c endWait) (result, error) {
	if c.Rank < 0 || c.Rank >= s.Ranks.len() {
		return result{}, badCmd("EndWait of rank %d, but the job has ranks 0..%d", c.Rank, s.Ranks.len()-1)
	}
	if c.Since > s.Epoch {
		return result{}, badCmd("EndWait of rank %d waiting since epoch %d, but the view is only at epoch %d", c.Rank, c.Since, s.Epoch)
	}
	if s.Status != statusRunning {
		return noop(s, "job is %s", s.Status), nil
	}
	i, ok := s.awaitIndex(c.Rank)
	if !ok || s.Awaiting[i].Since != c.Since {
		return noop(s, "rank %d does not await a joiner since epoch %d", c.Rank, c.Since), nil
	}
	s.Awaiting = slices.Delete(s.Awaiting, i, i+1)
	s.Epoch++
	res := result{Changed: true, Epoch: s.Epoch, Rank: c.Rank, Promoted: noProc}
	res.Note = fmt.Sprintf("no joiner came for rank %d within %v: %s", c.Rank, s.RefillWait, s.loseRank(c.Rank))
	res.Status = s.Status
	return res, nil
}

func (s *state) applySetVoters(c setVoters) (result, error) {
	if len(c.Voters) > voterCap {
		return result{}, badCmd("SetVoters with %d voters, max %d", len(c.Voters), voterCap)
	}
	for i, v := range c.Voters {
		if !s.Procs.has(v) {
			return result{}, fmt.Errorf("%w: SetVoters names proc %d", errUnknownProc, v)
		}
		if e, ok := s.Failed[v]; ok {
			return result{}, badCmd("SetVoters names proc %d, declared failed in epoch %d", v, e)
		}
		if slices.Contains(c.Voters[:i], v) {
			return result{}, badCmd("SetVoters names proc %d twice", v)
		}
	}
	if slices.Equal(s.Voters, c.Voters) {
		return noop(s, "voters unchanged"), nil
	}
	s.Voters = slices.Clone(c.Voters)
	r := noop(s, "voters %v", s.Voters)
	r.Changed = true
	return r, nil
}
