package spares

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// noProc names no process: a vacant rank (after shrinking or when the job
// failed for lack of spares) or an external reporter. It has the value of
// transport.NoProc.
const noProc uint32 = ^uint32(0)

// Limits on the replicated state. Decoders reject anything larger before
// allocating; Apply refuses commands that would exceed them.
const (
	// maxProcs caps the processes of one job (ranks plus spares).
	maxProcs = 1 << 20
	// voterCap caps Config.MaxVoters and a setVoters command. Raft gains
	// nothing from more voters; 5 is the usual choice.
	voterCap = 9
	// maxAddrLen caps every procInfo string (addresses and host label).
	maxAddrLen = 255
)

// jobStatus is the job's lifecycle state as the membership agrees on it.
type jobStatus uint8

const (
	// statusRunning: the job is in progress.
	statusRunning jobStatus = iota
	// statusFinished: a finish command was committed; membership changes stop.
	statusFinished
	// statusFailed: the job cannot continue; see state.StatusReason.
	statusFailed
)

func (s jobStatus) String() string {
	switch s {
	case statusRunning:
		return "running"
	case statusFinished:
		return "finished"
	case statusFailed:
		return "failed"
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// Reasons recorded in state.StatusReason.
const (
	// reasonSparesExhausted: a rank was lost, the pool was empty and
	// shrinking was off. waitEpoch and friends return ErrSparesExhausted.
	reasonSparesExhausted = "spares-exhausted"
	// reasonAllRanksLost: shrinking was on and the last live rank was lost.
	reasonAllRanksLost = "all-ranks-lost"
)

// procInfo is what the job knows about one process.
type procInfo struct {
	Addr     string // data-plane address (transport), may be empty
	Host     string // host label, used to spread voters and mirrors
	RaftAddr string // Raft transport address; empty: runs no Raft node
	CtlAddr  string // control-RPC address; empty: takes no proposals
}

// state is the replicated membership: the same on every process once the
// same log prefix is applied. It is plain data: Apply is its only mutator
// and does no I/O, so it can be tested without Raft.
//
// Invariants (checked by Validate): len(Ranks) == NumRanks; every proc in
// Ranks (other than noProc), Spares, Failed and Voters is in Procs; a proc
// holds at most one rank; no proc is both a rank holder and a spare; no
// failed proc is a spare or a voter, and a failed proc holds a rank only
// while that rank awaits a joiner (Awaiting, sorted by rank, each entry
// since the epoch its holder failed in); ranks await only with RefillWait
// set and while the pool is empty.
type state struct {
	// Epoch counts membership changes. It starts at 1 and goes up by one
	// with every committed change to Ranks, Spares or Failed (a failure, a
	// promotion, a spare added or lost). Frames of the data plane carry it.
	Epoch uint64
	// NumRanks is the job's size. It never changes, even when shrinking:
	// a lost rank becomes vacant (noProc) so apps can redistribute its work.
	NumRanks int
	// Ranks maps rank -> proc; noProc marks a vacant rank.
	Ranks rankTable
	// Procs is every process the job ever had, failed ones included.
	Procs procTable
	// Spares is the ordered pool: the first spare on another host than the
	// lost process (else the first) takes its rank.
	Spares []uint32
	// Failed maps proc -> the epoch in which it was declared failed.
	Failed map[uint32]uint64
	// Status and StatusReason are the job's lifecycle state.
	Status       jobStatus
	StatusReason string
	// Shrink: when the pool is empty, a lost rank becomes vacant instead of
	// failing the job. Fixed at start (Config.Shrink).
	Shrink bool
	// Voters are the procs that vote in Raft, as last recorded by the
	// leader (setVoters); failed procs are dropped from it at once.
	Voters []uint32
	// RefillWait: when the pool is empty, a lost rank waits this long for
	// a process that joins the job (addSpare) before it becomes vacant
	// (Shrink) or the job fails; 0: it does not wait. Fixed at start
	// (Config.RefillWait), so every process applies the log alike. The
	// leader keeps the clock (refill.go) and ends a wait with endWait.
	RefillWait time.Duration
	// Awaiting lists the ranks that wait for a joiner, in rank order. Such
	// a rank is still held by its failed process, so the runtime sees it
	// failed and not yet replaced (survivors' Recover waits) rather than
	// vacant.
	Awaiting []awaiting
}

// awaiting is a rank that waits for a joiner (state.Awaiting).
type awaiting struct {
	Rank int
	// Since is the epoch the wait started in: the one its holder was
	// declared failed in. A rank that waits again later (its joiner failed
	// too) waits since a later epoch, so an endWait names one wait.
	Since uint64
}

// AwaitingSince reports whether rank awaits a joiner, and since which
// epoch.
func (s *state) AwaitingSince(rank int) (since uint64, ok bool) {
	i, ok := s.awaitIndex(rank)
	if !ok {
		return 0, false
	}
	return s.Awaiting[i].Since, true
}

func (s *state) awaitIndex(rank int) (int, bool) {
	return slices.BinarySearchFunc(s.Awaiting, rank, func(a awaiting, r int) int { return a.Rank - r })
}

// RankOf returns the rank proc holds, if any.
func (s *state) RankOf(proc uint32) (int, bool) {
	if proc == noProc {
		return -1, false
	}
	for r, p := range s.Ranks.all() {
		if p == proc {
			return r, true
		}
	}
	return -1, false
}

// ProcOf returns the proc holding rank, false when rank is out of range or
// vacant.
func (s *state) ProcOf(rank int) (uint32, bool) {
	if rank < 0 || rank >= s.Ranks.len() || s.Ranks.at(rank) == noProc {
		return noProc, false
	}
	return s.Ranks.at(rank), true
}

// IsSpare reports whether proc is in the spare pool.
func (s *state) IsSpare(proc uint32) bool { return slices.Contains(s.Spares, proc) }

// IsFailed reports whether proc was declared failed, and in which epoch.
func (s *state) IsFailed(proc uint32) (epoch uint64, failed bool) {
	epoch, failed = s.Failed[proc]
	return epoch, failed
}

// IsVoter reports whether proc is in Voters.
func (s *state) IsVoter(proc uint32) bool { return slices.Contains(s.Voters, proc) }

// FailedProcs returns the failed processes in increasing order.
func (s *state) FailedProcs() []uint32 {
	return slices.Sorted(maps.Keys(s.Failed))
}

// Err returns nil while the job runs or after it finished, and
// ErrSparesExhausted or ErrJobFailed (with the epoch and reason) once it
// failed: what a process should exit with (see job.ExitCode).
func (s *state) Err() error { return statusErr(s) }

// LiveRanks counts the ranks that are not vacant.
func (s *state) LiveRanks() int {
	n := 0
	for _, p := range s.Ranks.all() {
		if p != noProc {
			n++
		}
	}
	return n
}

// Clone returns a deep copy.
func (s *state) Clone() state {
	c := *s
	c.Spares = slices.Clone(s.Spares)
	c.Voters = slices.Clone(s.Voters)
	c.Awaiting = slices.Clone(s.Awaiting)
	c.Failed = maps.Clone(s.Failed)
	if c.Failed == nil {
		c.Failed = map[uint32]uint64{}
	}
	return c
}

// Validate checks the invariants listed on state. apply keeps them; a
// decoded snapshot is checked with it before use.
func (s *state) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", errBadSnapshot, fmt.Sprintf(format, a...))
	}
	if s.NumRanks < 0 || s.NumRanks > maxProcs || s.Ranks.len() != s.NumRanks {
		return bad("NumRanks %d but %d rank entries (max %d)", s.NumRanks, s.Ranks.len(), maxProcs)
	}
	if s.Procs.len() > maxProcs {
		return bad("%d procs, max %d", s.Procs.len(), maxProcs)
	}
	if s.Epoch == 0 {
		return bad("epoch 0 (epochs start at 1)")
	}
	if s.Status > statusFailed {
		return bad("unknown status %d", s.Status)
	}
	if err := s.validateAwaiting(); err != nil {
		return bad("%v", err)
	}
	role := make(map[uint32]string, s.Ranks.len()+len(s.Spares))
	for r, p := range s.Ranks.all() {
		if p == noProc {
			continue
		}
		if !s.Procs.has(p) {
			return bad("rank %d held by unknown proc %d", r, p)
		}
		if prev, dup := role[p]; dup {
			return bad("proc %d holds rank %d and is also %s", p, r, prev)
		}
		if e, f := s.Failed[p]; f {
			if since, ok := s.AwaitingSince(r); !ok || since != e {
				return bad("failed proc %d (epoch %d) holds rank %d, which does not await a joiner since then", p, e, r)
			}
		}
		role[p] = fmt.Sprintf("rank %d", r)
	}
	for _, p := range s.Spares {
		if !s.Procs.has(p) {
			return bad("unknown proc %d in spare pool", p)
		}
		if prev, dup := role[p]; dup {
			return bad("spare %d is also %s", p, prev)
		}
		if _, f := s.Failed[p]; f {
			return bad("failed proc %d in spare pool", p)
		}
		role[p] = "a spare"
	}
	for p, e := range s.Failed {
		if !s.Procs.has(p) {
			return bad("unknown proc %d in failed set", p)
		}
		if e == 0 || e > s.Epoch {
			return bad("proc %d failed in epoch %d, view at %d", p, e, s.Epoch)
		}
	}
	if len(s.Voters) > voterCap {
		return bad("%d voters, max %d", len(s.Voters), voterCap)
	}
	seen := map[uint32]bool{}
	for _, v := range s.Voters {
		if !s.Procs.has(v) || seen[v] {
			return bad("voter %d unknown or repeated", v)
		}
		if _, f := s.Failed[v]; f {
			return bad("failed proc %d is a voter", v)
		}
		seen[v] = true
	}
	for p, info := range s.Procs.all() {
		if p == noProc {
			return bad("proc id %d is reserved (NoProc)", p)
		}
		if err := info.validate(); err != nil {
			return bad("proc %d: %v", p, err)
		}
	}
	return nil
}

// validateAwaiting checks Awaiting against the rest of the state.
func (s *state) validateAwaiting() error {
	if s.RefillWait < 0 {
		return fmt.Errorf("RefillWait is %v, want >= 0", s.RefillWait)
	}
	if len(s.Awaiting) == 0 {
		return nil
	}
	if s.RefillWait == 0 {
		return fmt.Errorf("%d ranks await a joiner, but RefillWait is 0", len(s.Awaiting))
	}
	if len(s.Spares) > 0 {
		return fmt.Errorf("ranks await a joiner while the pool holds %v", s.Spares)
	}
	for i, a := range s.Awaiting {
		if a.Rank < 0 || a.Rank >= s.Ranks.len() {
			return fmt.Errorf("awaiting rank %d out of range (NumRanks %d)", a.Rank, s.NumRanks)
		}
		if i > 0 && a.Rank <= s.Awaiting[i-1].Rank {
			return fmt.Errorf("awaiting ranks not in increasing order (%d after %d)", a.Rank, s.Awaiting[i-1].Rank)
		}
		p := s.Ranks.at(a.Rank)
		if e, f := s.Failed[p]; p == noProc || !f || e != a.Since {
			return fmt.Errorf("rank %d awaits a joiner since epoch %d, but its holder %s was not declared failed then", a.Rank, a.Since, procLabel(p))
		}
	}
	return nil
}

func procLabel(p uint32) string {
	if p == noProc {
		return "(none)"
	}
	return fmt.Sprintf("proc %d", p)
}

func (i procInfo) validate() error {
	for _, f := range []struct{ name, v string }{{"Addr", i.Addr}, {"Host", i.Host}, {"RaftAddr", i.RaftAddr}, {"CtlAddr", i.CtlAddr}} {
		if len(f.v) > maxAddrLen {
			return fmt.Errorf("%s is %d bytes long, max %d", f.name, len(f.v), maxAddrLen)
		}
	}
	return nil
}
