package spares

import (
	"fmt"
	"slices"
)

// CommandKind numbers the commands; the values are part of the log format.
type CommandKind uint8

// Command kinds.
const (
	KindDeclareFailed CommandKind = 1
	KindAddSpare      CommandKind = 2
	// Kind 3 is retired (it recorded a checkpoint id; package ckpt's
	// agreement is the job's one record of the last checkpoint) and is not
	// reused: a log holding it is refused as an unknown kind.
	KindFinish    CommandKind = 4
	KindSetVoters CommandKind = 5
	KindEndWait   CommandKind = 6
)

func (k CommandKind) String() string {
	switch k {
	case KindDeclareFailed:
		return "DeclareFailed"
	case KindAddSpare:
		return "AddSpare"
	case KindFinish:
		return "Finish"
	case KindSetVoters:
		return "SetVoters"
	case KindEndWait:
		return "EndWait"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Command is one entry of the replicated log. The set is closed: the
// implementations are the value types below (pass values, not pointers).
type Command interface {
	Kind() CommandKind
	isCommand()
}

// DeclareFailed declares Proc failed. Reporter is the process that
// confirmed the failure (NoProc: the launcher or an operator), Epoch the
// epoch of the view in which it did (0: unknown, not checked).
//
// Applied to a rank holder it is one log entry doing the whole recovery
// step: the epoch goes up, Proc moves to Failed and a spare of the pool
// takes the rank (the first on another host than Proc, else the first).
// With no spare left and State.RefillWait set, the rank awaits a joiner:
// Proc keeps it, failed, until an AddSpare gives it to a joiner or the
// leader's EndWait gives up on it. Otherwise (or then) the rank becomes
// vacant and the job fails with ReasonSparesExhausted, or the rank stays
// vacant when shrinking. Applied to a spare it removes the spare from
// the pool (the epoch goes up too, since the view changed). It is a
// no-op when Proc is already failed, when Reporter was itself declared
// failed (a replaced, fenced process cannot evict live ones), or when the
// job is no longer running. An Epoch newer than the view is rejected with
// ErrBadCommand.
//
// The report's Epoch does not make a report about a live process stale: a
// process seen dead while it was a spare is still dead after a promotion
// committed meanwhile, so the next spare takes its rank in a later epoch.
type DeclareFailed struct {
	Proc     uint32
	Reporter uint32
	Epoch    uint64
}

// AddSpare adds a new process to the job (a joiner: Config.Join). The
// epoch goes up. While ranks await a joiner it takes the lowest of them at
// once and holds it; otherwise it joins the spare pool (refilling it).
// Adding a process that is already in the job with the same Info is a
// no-op; with another Info, or after it failed, it is ErrBadCommand (a
// replacement process needs a new id).
type AddSpare struct {
	Proc uint32
	Info ProcInfo
}

// EndWait ends the wait of Rank for a joiner that started in epoch Since
// (State.Awaiting): the leader proposes it once the rank has waited
// State.RefillWait on its clock. The rank then goes the way of a rank
// lost with an empty pool: vacant with Shrink, else the job fails with
// ReasonSparesExhausted. The epoch goes up. It is a no-op when Rank does
// not await since Since (a joiner took it, or this wait already ended) or
// the job is no longer running; a Rank out of range or a Since newer than
// the view is ErrBadCommand.
type EndWait struct {
	Rank  int
	Since uint64
}

// Finish marks the job Finished. Idempotent; a no-op on a failed job.
type Finish struct{}

// SetVoters records the Raft voter set. The leader proposes it after it has
// changed the Raft configuration; it does not change the epoch. Every voter
// must be a known process that has not failed, at most MaxVoters of them,
// without repeats.
type SetVoters struct {
	Voters []uint32
}

func (DeclareFailed) Kind() CommandKind { return KindDeclareFailed }
func (AddSpare) Kind() CommandKind      { return KindAddSpare }
func (Finish) Kind() CommandKind        { return KindFinish }
func (SetVoters) Kind() CommandKind     { return KindSetVoters }
func (EndWait) Kind() CommandKind       { return KindEndWait }
func (DeclareFailed) isCommand()        {}
func (AddSpare) isCommand()             {}
func (Finish) isCommand()               {}
func (SetVoters) isCommand()            {}
func (EndWait) isCommand()              {}

// Result says what a command did.
type Result struct {
	// Changed is false for a no-op (see Note for why).
	Changed bool
	// Epoch is the epoch after the command.
	Epoch uint64
	// Rank is the rank the failed process held (DeclareFailed), the rank
	// whose wait ended (EndWait) or the awaiting rank a joiner took
	// (AddSpare); else -1.
	Rank int
	// Promoted is the spare or joiner that took Rank, NoProc if none.
	Promoted uint32
	// Status is the job status after the command.
	Status JobStatus
	// Note is a short human-readable account, e.g. "already failed in epoch 3".
	Note string
}

func noop(s *State, format string, a ...any) Result {
	return Result{Epoch: s.Epoch, Rank: -1, Promoted: NoProc, Status: s.Status, Note: fmt.Sprintf(format, a...)}
}

func badCmd(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrBadCommand, fmt.Sprintf(format, a...))
}

// Apply applies cmd to s. It is deterministic and does no I/O: the same
// state and command give the same result on every process, which is what
// the Raft FSM relies on. An error means the command was rejected and s is
// unchanged; errors wrap ErrBadCommand or ErrUnknownProc. Apply is
// idempotent for every command: applying it again is a no-op, so a
// proposal retried across a leader change is harmless.
func (s *State) apply(cmd Command) (Result, error) {
	if s.Procs == nil {
		s.Procs = map[uint32]ProcInfo{}
	}
	if s.Failed == nil {
		s.Failed = map[uint32]uint64{}
	}
	switch c := cmd.(type) {
	case DeclareFailed:
		return s.declareFailed(c)
	case AddSpare:
		return s.addSpare(c)
	case Finish:
		if s.Status != Running {
			return noop(s, "job is already %s", s.Status), nil
		}
		s.Status = Finished
		r := noop(s, "job finished")
		r.Changed = true
		return r, nil
	case SetVoters:
		return s.setVoters(c)
	case EndWait:
		return s.endWait(c)
	case nil:
		return Result{}, badCmd("nil command")
	}
	return Result{}, badCmd("unknown command type %T (pass one of the command values)", cmd)
}

func (s *State) declareFailed(c DeclareFailed) (Result, error) {
	if c.Epoch > s.Epoch {
		return Result{}, badCmd("DeclareFailed of proc %d reported in epoch %d, but the view is only at epoch %d", c.Proc, c.Epoch, s.Epoch)
	}
	if _, ok := s.Procs[c.Proc]; !ok {
		return Result{}, fmt.Errorf("%w: DeclareFailed names proc %d", ErrUnknownProc, c.Proc)
	}
	if _, ok := s.Procs[c.Reporter]; !ok && c.Reporter != NoProc {
		return Result{}, fmt.Errorf("%w: DeclareFailed reported by proc %d", ErrUnknownProc, c.Reporter)
	}
	if s.Status != Running {
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
	res := Result{Changed: true, Epoch: s.Epoch, Rank: -1, Promoted: NoProc}
	if i := slices.Index(s.Spares, c.Proc); i >= 0 {
		s.Spares = slices.Delete(s.Spares, i, i+1)
		res.Note = fmt.Sprintf("spare %d removed from the pool", c.Proc)
	} else if r, ok := s.RankOf(c.Proc); ok {
		res.Rank = r
		switch {
		case len(s.Spares) > 0:
			i := s.spareFor(c.Proc)
			res.Promoted = s.Spares[i]
			s.Ranks[r] = s.Spares[i]
			s.Spares = slices.Delete(s.Spares, i, i+1)
			res.Note = fmt.Sprintf("spare %d takes rank %d", res.Promoted, r)
		case s.RefillWait > 0:
			// c.Proc keeps the rank, failed: the runtime sees it lost and
			// not yet replaced, and survivors wait for a joiner.
			i, _ := s.awaitIndex(r)
			s.Awaiting = slices.Insert(s.Awaiting, i, Awaiting{Rank: r, Since: s.Epoch})
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
func (s *State) loseRank(r int) string {
	s.Ranks[r] = NoProc
	switch {
	case !s.Shrink:
		s.Status, s.StatusReason = Failed, ReasonSparesExhausted
		return fmt.Sprintf("no spare left for rank %d: job failed (%s)", r, ReasonSparesExhausted)
	case s.LiveRanks() == 0:
		s.Status, s.StatusReason = Failed, ReasonAllRanksLost
		return fmt.Sprintf("rank %d was the last live rank: job failed (%s)", r, ReasonAllRanksLost)
	}
	return fmt.Sprintf("no spare left: rank %d is vacant (shrink)", r)
}

// spareFor is the index in the pool of the spare that takes the rank of
// the failed process: the first spare on another host than it, or the
// first spare when all are on its host. A process often fails with its
// host (a crash, a cut link): a spare there would be lost too, and its
// loss found only one detection later, after the rank had waited for it.
func (s *State) spareFor(failed uint32) int {
	host := s.Procs[failed].Host
	if i := slices.IndexFunc(s.Spares, func(p uint32) bool { return s.Procs[p].Host != host }); i >= 0 {
		return i
	}
	return 0
}

func (s *State) addSpare(c AddSpare) (Result, error) {
	if c.Proc == NoProc {
		return Result{}, badCmd("AddSpare of proc %d (NoProc is reserved)", c.Proc)
	}
	if err := c.Info.validate(); err != nil {
		return Result{}, badCmd("AddSpare of proc %d: %v", c.Proc, err)
	}
	if e, ok := s.Failed[c.Proc]; ok {
		return Result{}, badCmd("AddSpare of proc %d, which was declared failed in epoch %d: give the replacement a new process id", c.Proc, e)
	}
	if info, ok := s.Procs[c.Proc]; ok {
		if info != c.Info {
			return Result{}, badCmd("AddSpare of proc %d, which is already in the job with other addresses (%+v)", c.Proc, info)
		}
		return noop(s, "proc %d is already in the job", c.Proc), nil
	}
	if s.Status != Running {
		return noop(s, "job is %s", s.Status), nil
	}
	if len(s.Procs) >= MaxProcs {
		return Result{}, badCmd("AddSpare of proc %d: the job already has %d procs (max %d)", c.Proc, len(s.Procs), MaxProcs)
	}
	s.Procs[c.Proc] = c.Info
	if len(s.Awaiting) > 0 {
		// A rank changes holder: a new epoch fences the old one.
		s.Epoch++
		a := s.Awaiting[0]
		s.Awaiting = slices.Delete(s.Awaiting, 0, 1)
		s.Ranks[a.Rank] = c.Proc
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

func (s *State) endWait(c EndWait) (Result, error) {
	if c.Rank < 0 || c.Rank >= len(s.Ranks) {
		return Result{}, badCmd("EndWait of rank %d, but the job has ranks 0..%d", c.Rank, len(s.Ranks)-1)
	}
	if c.Since > s.Epoch {
		return Result{}, badCmd("EndWait of rank %d waiting since epoch %d, but the view is only at epoch %d", c.Rank, c.Since, s.Epoch)
	}
	if s.Status != Running {
		return noop(s, "job is %s", s.Status), nil
	}
	i, ok := s.awaitIndex(c.Rank)
	if !ok || s.Awaiting[i].Since != c.Since {
		return noop(s, "rank %d does not await a joiner since epoch %d", c.Rank, c.Since), nil
	}
	s.Awaiting = slices.Delete(s.Awaiting, i, i+1)
	s.Epoch++
	res := Result{Changed: true, Epoch: s.Epoch, Rank: c.Rank, Promoted: NoProc}
	res.Note = fmt.Sprintf("no joiner came for rank %d within %v: %s", c.Rank, s.RefillWait, s.loseRank(c.Rank))
	res.Status = s.Status
	return res, nil
}

func (s *State) setVoters(c SetVoters) (Result, error) {
	if len(c.Voters) > MaxVoters {
		return Result{}, badCmd("SetVoters with %d voters, max %d", len(c.Voters), MaxVoters)
	}
	for i, v := range c.Voters {
		if _, ok := s.Procs[v]; !ok {
			return Result{}, fmt.Errorf("%w: SetVoters names proc %d", ErrUnknownProc, v)
		}
		if e, ok := s.Failed[v]; ok {
			return Result{}, badCmd("SetVoters names proc %d, declared failed in epoch %d", v, e)
		}
		if slices.Contains(c.Voters[:i], v) {
			return Result{}, badCmd("SetVoters names proc %d twice", v)
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
