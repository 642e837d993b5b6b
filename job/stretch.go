package job

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gaspigo/gaspigo/internal/bootstrap"
	"github.com/gaspigo/gaspigo/spares"
)

// Oversubscribed hosts.
//
// The membership's timeouts are set for a host with a core or so per
// process: a Raft heartbeat of 150 ms, a handshake of 2 s. With hundreds
// of processes on a few cores (a job tried at scale on one machine, or a
// node packed for throughput) the kernel runs each process for a few
// milliseconds in every round of hundreds, a round takes hundreds of
// milliseconds, and those timeouts measure the scheduler, not the peers:
// handshakes time out, Raft's voters elect and re-elect, and processes
// that hear no leader for the cut-off give up (at 256 processes on 2
// cores: no leader for 35 s, 239 processes cut off). So the membership's
// timeouts, and the failure detector's timing, grow with the processes
// per core once a host has more than perCore of them per core. Failure
// detection of a SIGKILLed process does not wait for them (a closed
// connection is strong evidence, and the voters' fast failover dials the
// leader's address); what grows is the time to notice a silent leader
// and the time a partitioned process takes to give up.
//
// The factor is one for the whole job: the largest over its hosts. The
// Raft group and the detector's ring span the hosts, and a starved host
// is slow for its peers too: its leader's heartbeats, its acks and its
// handshakes come late to processes on idle hosts, which with timeouts
// of their own would elect, suspect and cut off the starved ones. So
// every process computes the factor from the member table, the same in
// every process, never from its own host alone. Each process publishes
// in its member entry the CPUs it may run on (Extra "cpus", the count,
// and on Linux "cpuset", its affinity list such as "0-3,8", when that
// fits in maxCPUList bytes); a host's cores are the union of its
// members' lists, or the largest count they published when that is
// larger (a member with no list). Counts alone would take the processes
// bound to one core each, as srun and mpirun may bind them, for a host
// of one core. A host none of whose members published is counted with
// the fewest cores any member published, or one if none did (a table
// not written by this package's Init): the worst case, the same in
// every process.

// perCore is how many processes per core the default timeouts suit.
const perCore = 4

// maxStretch caps the factor: at 64 the cut-off is over ten minutes.
const maxStretch = 32

// The member table's entries (bootstrap.Member.Extra) for the CPUs a
// process may run on.
const (
	cpusExtra   = "cpus"   // how many, decimal
	cpusetExtra = "cpuset" // which, a Linux CPU list: "0-3,8"
)

// maxCPUList caps the CPU list a process publishes: a longer one (CPUs
// scattered over the machine) is left out, and its count stands for it,
// so that the member table stays small.
const maxCPUList = 64

// maxCPUID bounds the CPU ids and counts that a member entry is believed
// for; an entry beyond it is ignored.
const maxCPUID = 1 << 20

// hostLoad is one host label of a job: its members and the cores they
// may run on between them.
type hostLoad struct {
	Host  string
	Procs int
	Cores int
}

// factor is the stretch for the host's processes on its cores.
func (l hostLoad) factor() int { return StretchFor(l.Procs, l.Cores) }

// StretchFor is the factor by which a job stretches its membership's
// timeouts and its failure detector's timing when its most loaded host
// runs procs processes on cores cores: 1 up to four processes per core,
// then their number per four cores, rounded up, at most 32. A job logs
// the factor it chose ("membership timeouts stretched ..."); a caller
// that must bound a job's run beforehand (a test's deadline) uses this.
func StretchFor(procs, cores int) int {
	room := perCore * max(cores, 1)
	return min(max(1, (procs+room-1)/room), maxStretch)
}

// stretch returns the factor for the membership's and the detector's
// timing of every process of the job whose member table is table, and
// the host it comes from (the first by label among the most loaded). It
// depends on the table alone, so every process computes the same.
func stretch(table bootstrap.Table) (int, hostLoad) {
	f, worst := 0, hostLoad{}
	for _, l := range hostLoads(table) {
		if g := l.factor(); g > f {
			f, worst = g, l
		}
	}
	return max(f, 1), worst
}

// hostLoads returns the job's host labels in order, each with its
// members and the cores they may run on (see the comment at the top).
func hostLoads(table bootstrap.Table) []hostLoad {
	type acc struct {
		procs, count int
		spans        [][2]int
	}
	byHost := map[string]*acc{}
	for _, m := range table.Members {
		a := byHost[m.Host]
		if a == nil {
			a = &acc{}
			byHost[m.Host] = a
		}
		a.procs++
		if n, err := strconv.Atoi(m.Extra[cpusExtra]); err == nil && n > 0 && n <= maxCPUID {
			a.count = max(a.count, n)
		}
		a.spans = append(a.spans, parseCPUList(m.Extra[cpusetExtra])...)
	}
	loads := make([]hostLoad, 0, len(byHost))
	fewest := 0
	for h, a := range byHost {
		l := hostLoad{Host: h, Procs: a.procs, Cores: max(a.count, unionSize(a.spans))}
		if l.Cores > 0 && (fewest == 0 || l.Cores < fewest) {
			fewest = l.Cores
		}
		loads = append(loads, l)
	}
	for i := range loads {
		if loads[i].Cores == 0 {
			loads[i].Cores = max(fewest, 1)
		}
	}
	slices.SortFunc(loads, func(a, b hostLoad) int { return strings.Compare(a.Host, b.Host) })
	return loads
}

// parseCPUList reads a Linux CPU list ("0-3,8") as inclusive spans of
// ids; it returns nil for an empty, malformed or oversized one.
func parseCPUList(s string) [][2]int {
	if s == "" || len(s) > maxCPUList {
		return nil
	}
	var spans [][2]int
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 || a >= maxCPUID {
			return nil
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a || b >= maxCPUID {
				return nil
			}
		}
		spans = append(spans, [2]int{a, b})
	}
	return spans
}

// unionSize is the number of ids in the union of spans.
func unionSize(spans [][2]int) int {
	spans = slices.Clone(spans)
	slices.SortFunc(spans, func(a, b [2]int) int { return a[0] - b[0] })
	n, end := 0, -1 // end: the last id counted
	for _, s := range spans {
		if s[1] <= end {
			continue
		}
		n += s[1] - max(s[0], end+1) + 1
		end = s[1]
	}
	return n
}

// formatCPUList writes ids, ascending and distinct, as a Linux CPU list.
func formatCPUList(ids []int) string {
	var b strings.Builder
	for i := 0; i < len(ids); {
		j := i
		for j+1 < len(ids) && ids[j+1] == ids[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(ids[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(ids[j]))
		}
		i = j + 1
	}
	return b.String()
}

// publishCPUs adds to extra, this process's member entry, the count of
// CPUs it may run on and, when known and short enough, their list.
func publishCPUs(extra map[string]string, count int, ids []int) {
	extra[cpusExtra] = strconv.Itoa(max(count, 1))
	if list := formatCPUList(ids); list != "" && len(list) <= maxCPUList {
		extra[cpusetExtra] = list
	}
}

// stretchMembership multiplies the membership's timeouts by f, the
// cut-off too unless the user set it (PGAS_CUTOFF), and the periods that
// wake an idle process or voter: the cut-off rule's tick, the Raft
// leader's idle appends (CommitTimeout; every 5-10 ms to each follower)
// and a parent's answer to its children in the tree when there is no news
// (TreeHold).
func stretchMembership(cfg *spares.Config, f int, cutOff bool) {
	ds := []*time.Duration{&cfg.HeartbeatTimeout, &cfg.ElectionTimeout, &cfg.LeaderLeaseTimeout,
		&cfg.TransportTimeout, &cfg.HandshakeTimeout, &cfg.RPCTimeout, &cfg.StandingInterval, &cfg.ShutdownTimeout,
		&cfg.ContactTick, &cfg.CommitTimeout, &cfg.TreeHold}
	if cutOff {
		ds = append(ds, &cfg.CutOff)
	}
	for _, d := range ds {
		*d *= time.Duration(f)
	}
}
