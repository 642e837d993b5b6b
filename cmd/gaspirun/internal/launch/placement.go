package launch

import (
	"fmt"
	"strings"
)

// Placement says on which host each process of a multi-host job runs.
type Placement struct {
	// Hosts are the hosts the job may use, in the hostfile's order.
	Hosts []HostSlots
	// HostOf is the index into Hosts of each process, by process id.
	HostOf []int
	// Ranks is the number of ranks; processes Ranks.. are spares.
	Ranks int
}

// Place puts ranks+spares processes on hosts. The rule:
//
//  1. Ranks fill the hosts in order, slot by slot (rank 0 on the first
//     slot of the first host, and so on), as mpirun does by default, so
//     neighbouring ranks share a host.
//  2. Spares go one by one (process ids ranks, ranks+1, ...) into the free
//     slot of the host that holds the fewest processes so far; among
//     equals, the host with fewer ranks, then the later host in the file.
//
// Why: any spare can take over any rank, so the loss of host h is covered
// when the spares on the other hosts are at least h's ranks, ranks(h) <=
// spares - spares(h), that is when h holds at most `spares` processes in
// all. Spares therefore go where they raise the fullest hosts the least,
// which keeps every host's count within the spares when the slots allow
// it, and puts spares on hosts away from the ranks they may replace.
// Uncovered lists the hosts whose loss the placement cannot cover.
//
// Too few slots for ranks+spares is an error naming the numbers.
func Place(hosts []HostSlots, ranks, spares int) (Placement, error) {
	total := 0
	for _, h := range hosts {
		total += h.Slots
	}
	if n := ranks + spares; total < n {
		return Placement{}, &FlagError{Flag: "--hostfile",
			Problem: fmt.Sprintf("its %d %s offer %d %s, too few for %d processes (-n %d + --spares %d)",
				len(hosts), plural(len(hosts), "host", "hosts"), total, plural(total, "slot", "slots"), n, ranks, spares),
			Fix: fmt.Sprintf("add hosts or slots (slots=N after a host name), or run fewer processes: at most %d", total)}
	}
	p := Placement{Hosts: hosts, HostOf: make([]int, ranks+spares), Ranks: ranks}
	used := make([]int, len(hosts))
	rankCount := make([]int, len(hosts))
	h := 0
	for r := 0; r < ranks; r++ {
		for used[h] == hosts[h].Slots {
			h++
		}
		p.HostOf[r] = h
		used[h]++
		rankCount[h]++
	}
	for s := ranks; s < ranks+spares; s++ {
		best := -1
		for i := range hosts {
			if used[i] == hosts[i].Slots {
				continue
			}
			if best < 0 || used[i] < used[best] ||
				(used[i] == used[best] && rankCount[i] <= rankCount[best]) {
				best = i
			}
		}
		p.HostOf[s] = best
		used[best]++
	}
	return p, nil
}

// Host is the host of process proc.
func (p Placement) Host(proc int) string { return p.Hosts[p.HostOf[proc]].Name }

// counts returns, per host, its ranks and its spares.
func (p Placement) counts() (ranks, spares []int) {
	ranks, spares = make([]int, len(p.Hosts)), make([]int, len(p.Hosts))
	for proc, h := range p.HostOf {
		if proc < p.Ranks {
			ranks[h]++
		} else {
			spares[h]++
		}
	}
	return ranks, spares
}

// Uncovered lists the hosts holding ranks whose loss leaves more ranks to
// replace than there are spares on the other hosts, each described as
// "node1 (3 ranks, 1 spare elsewhere)". Empty when every single host loss
// is covered.
func (p Placement) Uncovered() []string {
	ranks, spares := p.counts()
	total := len(p.HostOf) - p.Ranks
	var out []string
	for i, h := range p.Hosts {
		if elsewhere := total - spares[i]; ranks[i] > elsewhere {
			out = append(out, fmt.Sprintf("%s (%d %s, %d %s elsewhere)", h.Name,
				ranks[i], plural(ranks[i], "rank", "ranks"), elsewhere, plural(elsewhere, "spare", "spares")))
		}
	}
	return out
}

// String lists the processes of each used host, e.g.
// "node1: r0-1; node2: r2,s3" (ranges, as collapsed output names them).
func (p Placement) String() string {
	per := make([][]string, len(p.Hosts))
	for proc, h := range p.HostOf {
		l := fmt.Sprintf("r%d", proc)
		if proc >= p.Ranks {
			l = fmt.Sprintf("s%d", proc)
		}
		per[h] = append(per[h], l)
	}
	var parts []string
	for i, h := range p.Hosts {
		if len(per[i]) > 0 {
			parts = append(parts, h.Name+": "+formatLabels(per[i]))
		}
	}
	return strings.Join(parts, "; ")
}

// hostUse is what a running job has on one host, for placing a
// replacement (pickHost).
type hostUse struct {
	placed int  // processes gaspirun started there
	live   int  // of those, still running and not declared failed
	ranks  int  // of the live ones, those holding a rank
	died   int  // of those, ended other than by exiting 0, or declared failed (replaced) while running
	failed bool // a start there failed
}

// lost says the host is taken for gone: a start there failed, or every
// process gaspirun placed there died. Its processes are replaced on the
// other hosts.
func (u hostUse) lost() bool { return u.failed || (u.placed > 0 && u.live == 0 && u.died > 0) }

// pickHost chooses where a replacement runs, among hosts (with use[i]
// the job's use of hosts[i]): a host not lost; among those, one with a
// free slot (fewer live processes than its slots) first, then one where
// no process of the job died, then the one with the fewest of the job's
// live processes, then the earlier one. So a replacement goes where the
// job lost a process when only that host has room, and otherwise to a
// host with no loss: a host that just lost a process may be on its way
// down, its other processes' ends not known yet. With needRoom (Slurm, whose
// allocation grants each node its tasks and no more) only hosts with a
// free slot qualify; over ssh a full host is used rather than none, since
// slots there are the user's intent, not a grant.
//
// It returns -1 and why no host qualifies, naming each host's state.
func pickHost(hosts []HostSlots, use []hostUse, needRoom bool) (int, string) {
	best := -1
	room := func(i int) bool { return use[i].live < hosts[i].Slots }
	for i := range hosts {
		if use[i].lost() || (needRoom && !room(i)) {
			continue
		}
		switch {
		case best < 0:
			best = i
		case room(i) != room(best):
			if room(i) {
				best = i
			}
		case (use[i].died == 0) != (use[best].died == 0):
			if use[i].died == 0 {
				best = i
			}
		case use[i].live < use[best].live:
			best = i
		}
	}
	if best >= 0 {
		return best, ""
	}
	states := make([]string, len(hosts))
	for i, h := range hosts {
		switch u := use[i]; {
		case u.failed:
			states[i] = h.Name + " (a start there failed)"
		case u.lost():
			states[i] = h.Name + " (every process placed there died)"
		default:
			states[i] = fmt.Sprintf("%s (%d of its %d %s in use)", h.Name, u.live, h.Slots, plural(h.Slots, "slot", "slots"))
		}
	}
	what := "every host is lost"
	if needRoom {
		what = "no node of the allocation has room"
	}
	return -1, what + ": " + strings.Join(states, ", ")
}
