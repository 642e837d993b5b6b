package spares

import (
	"fmt"
	"maps"
	"slices"
)

// NoProc names no process: a vacant rank (after shrinking or when the job
// failed for lack of spares) or an external reporter. It has the value of
// transport.NoProc.
const NoProc uint32 = ^uint32(0)

// Limits on the replicated state. Decoders reject anything larger before
// allocating; Apply refuses commands that would exceed them.
const (
	// MaxProcs caps the processes of one job (ranks plus spares).
	MaxProcs = 1 << 20
	// MaxVoters caps Config.MaxVoters and a SetVoters command. Raft gains
	// nothing from more voters; 5 is the usual choice.
	MaxVoters = 9
	// MaxAddrLen caps every ProcInfo string (addresses and host label).
	MaxAddrLen = 255
)

// JobStatus is the job's lifecycle state as the membership agrees on it.
type JobStatus uint8

const (
	// Running: the job is in progress.
	Running JobStatus = iota
	// Finished: a Finish command was committed; membership changes stop.
	Finished
	// Failed: the job cannot continue; see State.StatusReason.
	Failed
)

func (s JobStatus) String() string {
	switch s {
	case Running:
		return "running"
	case Finished:
		return "finished"
	case Failed:
		return "failed"
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// Reasons recorded in State.StatusReason.
const (
	// ReasonSparesExhausted: a rank was lost, the pool was empty and
	// shrinking was off. WaitEpoch and friends return ErrSparesExhausted.
	ReasonSparesExhausted = "spares-exhausted"
	// ReasonAllRanksLost: shrinking was on and the last live rank was lost.
	ReasonAllRanksLost = "all-ranks-lost"
)

// ProcInfo is what the job knows about one process.
type ProcInfo struct {
	Addr     string // data-plane address (transport), may be empty
	Host     string // host label, used to spread voters and mirrors
	RaftAddr string // Raft transport address; empty: runs no Raft node
	CtlAddr  string // control-RPC address; empty: takes no proposals
}

// State is the replicated membership: the same on every process once the
// same log prefix is applied. It is plain data: Apply is its only mutator
// and does no I/O, so it can be tested without Raft.
//
// Invariants (checked by Validate): len(Ranks) == NumRanks; every proc in
// Ranks (other than NoProc), Spares, Failed and Voters is in Procs; a proc
// holds at most one rank; no proc is both a rank holder and a spare; no
// failed proc holds a rank, is a spare or a voter.
type State struct {
	// Epoch counts membership changes. It starts at 1 and goes up by one
	// with every committed change to Ranks, Spares or Failed (a failure, a
	// promotion, a spare added or lost). Frames of the data plane carry it.
	Epoch uint64
	// NumRanks is the job's size. It never changes, even when shrinking:
	// a lost rank becomes vacant (NoProc) so apps can redistribute its work.
	NumRanks int
	// Ranks maps rank -> proc; NoProc marks a vacant rank.
	Ranks []uint32
	// Procs is every process the job ever had, failed ones included.
	Procs map[uint32]ProcInfo
	// Spares is the ordered pool: the first spare on another host than the
	// lost process (else the first) takes its rank.
	Spares []uint32
	// Failed maps proc -> the epoch in which it was declared failed.
	Failed map[uint32]uint64
	// Status and StatusReason are the job's lifecycle state.
	Status       JobStatus
	StatusReason string
	// Shrink: when the pool is empty, a lost rank becomes vacant instead of
	// failing the job. Fixed at start (Config.Shrink).
	Shrink bool
	// Voters are the procs that vote in Raft, as last recorded by the
	// leader (SetVoters); failed procs are dropped from it at once.
	Voters []uint32
}

// RankOf returns the rank proc holds, if any.
func (s *State) RankOf(proc uint32) (int, bool) {
	if proc == NoProc {
		return -1, false
	}
	for r, p := range s.Ranks {
		if p == proc {
			return r, true
		}
	}
	return -1, false
}

// ProcOf returns the proc holding rank, false when rank is out of range or
// vacant.
func (s *State) ProcOf(rank int) (uint32, bool) {
	if rank < 0 || rank >= len(s.Ranks) || s.Ranks[rank] == NoProc {
		return NoProc, false
	}
	return s.Ranks[rank], true
}

// IsSpare reports whether proc is in the spare pool.
func (s *State) IsSpare(proc uint32) bool { return slices.Contains(s.Spares, proc) }

// IsFailed reports whether proc was declared failed, and in which epoch.
func (s *State) IsFailed(proc uint32) (epoch uint64, failed bool) {
	epoch, failed = s.Failed[proc]
	return epoch, failed
}

// IsVoter reports whether proc is in Voters.
func (s *State) IsVoter(proc uint32) bool { return slices.Contains(s.Voters, proc) }

// FailedProcs returns the failed processes in increasing order.
func (s *State) FailedProcs() []uint32 {
	return slices.Sorted(maps.Keys(s.Failed))
}

// Err returns nil while the job runs or after it finished, and
// ErrSparesExhausted or ErrJobFailed (with the epoch and reason) once it
// failed: what a process should exit with (see ExitCode).
func (s *State) Err() error { return statusErr(s) }

// LiveRanks counts the ranks that are not vacant.
func (s *State) LiveRanks() int {
	n := 0
	for _, p := range s.Ranks {
		if p != NoProc {
			n++
		}
	}
	return n
}

// Clone returns a deep copy.
func (s *State) Clone() State {
	c := *s
	c.Ranks = slices.Clone(s.Ranks)
	c.Spares = slices.Clone(s.Spares)
	c.Voters = slices.Clone(s.Voters)
	c.Procs = maps.Clone(s.Procs)
	c.Failed = maps.Clone(s.Failed)
	if c.Procs == nil {
		c.Procs = map[uint32]ProcInfo{}
	}
	if c.Failed == nil {
		c.Failed = map[uint32]uint64{}
	}
	return c
}

// Validate checks the invariants listed on State. Apply keeps them; a
// decoded snapshot is checked with it before use.
func (s *State) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrBadSnapshot, fmt.Sprintf(format, a...))
	}
	if s.NumRanks < 0 || s.NumRanks > MaxProcs || len(s.Ranks) != s.NumRanks {
		return bad("NumRanks %d but %d rank entries (max %d)", s.NumRanks, len(s.Ranks), MaxProcs)
	}
	if len(s.Procs) > MaxProcs {
		return bad("%d procs, max %d", len(s.Procs), MaxProcs)
	}
	if s.Epoch == 0 {
		return bad("epoch 0 (epochs start at 1)")
	}
	if s.Status > Failed {
		return bad("unknown status %d", s.Status)
	}
	role := make(map[uint32]string, len(s.Ranks)+len(s.Spares))
	for r, p := range s.Ranks {
		if p == NoProc {
			continue
		}
		if _, ok := s.Procs[p]; !ok {
			return bad("rank %d held by unknown proc %d", r, p)
		}
		if prev, dup := role[p]; dup {
			return bad("proc %d holds rank %d and is also %s", p, r, prev)
		}
		if _, f := s.Failed[p]; f {
			return bad("failed proc %d holds rank %d", p, r)
		}
		role[p] = fmt.Sprintf("rank %d", r)
	}
	for _, p := range s.Spares {
		if _, ok := s.Procs[p]; !ok {
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
		if _, ok := s.Procs[p]; !ok {
			return bad("unknown proc %d in failed set", p)
		}
		if e == 0 || e > s.Epoch {
			return bad("proc %d failed in epoch %d, view at %d", p, e, s.Epoch)
		}
	}
	if len(s.Voters) > MaxVoters {
		return bad("%d voters, max %d", len(s.Voters), MaxVoters)
	}
	seen := map[uint32]bool{}
	for _, v := range s.Voters {
		if _, ok := s.Procs[v]; !ok || seen[v] {
			return bad("voter %d unknown or repeated", v)
		}
		if _, f := s.Failed[v]; f {
			return bad("failed proc %d is a voter", v)
		}
		seen[v] = true
	}
	for p, info := range s.Procs {
		if p == NoProc {
			return bad("proc id %d is reserved (NoProc)", p)
		}
		if err := info.validate(); err != nil {
			return bad("proc %d: %v", p, err)
		}
	}
	return nil
}

func (i ProcInfo) validate() error {
	for _, f := range []struct{ name, v string }{{"Addr", i.Addr}, {"Host", i.Host}, {"RaftAddr", i.RaftAddr}, {"CtlAddr", i.CtlAddr}} {
		if len(f.v) > MaxAddrLen {
			return fmt.Errorf("%s is %d bytes long, max %d", f.name, len(f.v), MaxAddrLen)
		}
	}
	return nil
}
