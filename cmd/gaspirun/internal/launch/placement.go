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
