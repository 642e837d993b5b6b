package spares

import (
	"slices"
)

// raftServer is one entry of the Raft configuration, reduced to what the
// voter plan needs (so the plan is a pure function, tested without Raft).
type raftServer struct {
	Proc  uint32
	Voter bool
}

// voterPlan is what the leader changes in the Raft configuration to match
// the committed membership. Steps run in field order: removals first (so
// the quorum shrinks to the live voters before anything waits on it; the
// leader's own removal comes last), then additions, then promotions.
type voterPlan struct {
	Remove      []uint32 // failed or unknown procs still in the configuration
	AddNonvoter []uint32 // live procs of the state missing from the configuration
	Promote     []uint32 // live non-voters to make voters, best first
	Voters      []uint32 // the voter set once the plan is done, sorted
}

func (p voterPlan) empty() bool {
	return len(p.Remove) == 0 && len(p.AddNonvoter) == 0 && len(p.Promote) == 0
}

// planVoters compares the Raft configuration with the state. Failed procs
// leave the configuration; live procs that run a Raft node join it as
// non-voters; and while there are fewer than maxVoters live voters, live
// non-voters are promoted, preferring hosts with the fewest voters (then
// the lowest proc id), so the voters stay spread across hosts.
//
// With clients (Config.VotersOnly) the configuration holds voters only:
// no process is added as a non-voter, and the candidates are the live
// processes outside the configuration that can run Raft.
func planVoters(s *state, servers []raftServer, maxVoters int, self uint32, clients bool) voterPlan {
	var p voterPlan
	inConf := make(map[uint32]bool, len(servers))
	votersOnHost := map[string]int{}
	var candidates []uint32
	removeSelf := false
	for _, srv := range servers {
		inConf[srv.Proc] = true
		known := s.Procs.has(srv.Proc)
		_, failed := s.Failed[srv.Proc]
		switch {
		case !known || failed:
			if srv.Proc == self {
				removeSelf = true
			} else {
				p.Remove = append(p.Remove, srv.Proc)
			}
		case srv.Voter:
			p.Voters = append(p.Voters, srv.Proc)
			votersOnHost[s.Procs.info(srv.Proc).Host]++
		default:
			candidates = append(candidates, srv.Proc)
		}
	}
	slices.Sort(p.Remove)
	if removeSelf {
		p.Remove = append(p.Remove, self)
	}
	for proc, info := range s.Procs.all() {
		if _, failed := s.Failed[proc]; failed || inConf[proc] || info.RaftAddr == "" {
			continue
		}
		if clients {
			if info.CtlAddr != "" {
				candidates = append(candidates, proc)
			}
			continue
		}
		p.AddNonvoter = append(p.AddNonvoter, proc)
	}
	slices.Sort(p.AddNonvoter)
	slices.Sort(candidates)
	for len(p.Voters)+len(p.Promote) < maxVoters && len(candidates) > 0 {
		best := 0
		for i, c := range candidates {
			if votersOnHost[s.Procs.info(c).Host] < votersOnHost[s.Procs.info(candidates[best]).Host] {
				best = i
			}
		}
		c := candidates[best]
		candidates = slices.Delete(candidates, best, best+1)
		p.Promote = append(p.Promote, c)
		votersOnHost[s.Procs.info(c).Host]++
	}
	p.Voters = append(p.Voters, p.Promote...)
	slices.Sort(p.Voters)
	return p
}
