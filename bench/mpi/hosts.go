package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gaspigo/gaspigo/bench/internal/hostsrig"
	"github.com/gaspigo/gaspigo/internal/testkit/stats"
)

// Across simulated hosts (-hosts N): the rig of bench/internal/hostsrig,
// both launchers through its launch agent. Ranks fill the hosts in order
// (-per-host on each), so ranks 0 and 1 share a host; the collectives
// span them all.
//
// Open MPI runs with btl self,vader,tcp (shared memory inside a host, TCP
// between hosts, on the bridge only) and osc pt2pt; ours with its
// defaults (shared memory inside a host, TCP between them).

// hostSystems are the systems measured across hosts.
const (
	mpiHosts  system = "mpi-hosts"
	oursHosts system = "ours-hosts"
	oursRacks system = "ours-racks" // ours with a rack level (-racks)
)

// hostFigures are the figures compared across hosts.
var hostFigures = []figure{
	{"barrier", key{"barrier", 0}, key{"barrier", 0}, "us", false, 1.5},
	{"8 B allreduce", key{"allreduce", 8}, key{"allreduce", 8}, "us", false, 1.5},
	{"8 B put+flush vs write+notify RTT, ranks 0-1", key{"put_flush", 8}, key{"write_notify_rtt", 8}, "us", false, 0},
	{"put/write bandwidth, 1 MiB, ranks 0-1", key{"put", 1 << 20}, key{"write", 1 << 20}, "MiB/s", true, 0},
}

// pairPlace says where ranks 0 and 1, the pair of the two-rank figures,
// run: on one host when each host has more than one rank, else on two.
func pairPlace(perHost int) string {
	if perHost > 1 {
		return "on one host"
	}
	return "on two hosts"
}

// measureHosts runs Open MPI and ours across the rig's hosts, o.rounds
// times taking turns.
func measureHosts(o options, r *hostsrig.Rig, osc, dir string) (map[system]map[key][]float64, error) {
	n := len(r.C.Hosts()) * o.perHost
	systems := []system{mpiHosts, oursHosts}
	if o.racks != nil {
		systems = append(systems, oursRacks)
	}
	got := map[system]map[key][]float64{}
	for _, s := range systems {
		got[s] = map[key][]float64{}
	}
	for round := range o.rounds {
		for i := range systems {
			s := systems[(i+round)%len(systems)]
			var rows map[key]float64
			var err error
			switch s {
			case mpiHosts:
				rows, err = runMPIHosts(r, osc, n, o.minTime)
			case oursHosts:
				rows, err = runOursHosts(r, dir, n, o, "")
			default:
				rows, err = runOursHosts(r, dir, n, o, racksSpec(r, o.racks))
			}
			if err != nil {
				return nil, fmt.Errorf("round %d, %s: %w", round+1, s, err)
			}
			for k, v := range rows {
				got[s][k] = append(got[s][k], v)
			}
		}
	}
	return got, nil
}

// runMPIHosts runs osc_bench under mpirun across the hosts.
func runMPIHosts(r *hostsrig.Rig, exe string, n int, minTime time.Duration) (map[key]float64, error) {
	subnet := r.C.Subnet().String()
	args := []string{"--hostfile", r.Hostfile, "--mca", "plm_rsh_agent", r.Agent, "--bind-to", "none", "-np", strconv.Itoa(n),
		"--mca", "btl", "self,vader,tcp", "--mca", "btl_tcp_if_include", subnet, "--mca", "oob_tcp_if_include", subnet,
		"--mca", "pml", "ob1", "--mca", "osc", "pt2pt",
		// The hosts' slots add up to more ranks than this machine has
		// cores: waiting ranks yield, as --oversubscribe makes them on
		// one host (busy polling, 12 ranks on 2 cores took 50 ms a barrier).
		"--mca", "mpi_yield_when_idle", "1"}
	if os.Geteuid() == 0 {
		args = append([]string{"--allow-run-as-root"}, args...)
	}
	args = append(args, exe, strconv.FormatFloat(minTime.Seconds(), 'f', 3, 64))
	out, err := run("mpirun", args...)
	if err != nil {
		return nil, err
	}
	return parseOSC(out)
}

// runOursHosts runs gaspibench under gaspirun across the hosts, with
// gaspirun --racks racks unless it is empty.
func runOursHosts(r *hostsrig.Rig, dir string, n int, o options, racks string) (map[key]float64, error) {
	args := []string{"-n", strconv.Itoa(n), "--hostfile", r.Hostfile, "--ssh", r.Agent, "--quiet", "--timeout", "5m"}
	if racks != "" {
		args = append(args, "--racks", racks)
	}
	args = append(args, "--", filepath.Join(dir, "gaspibench"), "--csv", "--tests", "bw,lat,barrier,allreduce",
		"--sizes", "1M", "--lat-sizes", "8", "--coll-sizes", "8", "--min-time", o.minTime.String(),
		"--spin", o.spin.String(), "--poll-spin", o.pollSpin.String())
	out, err := run(filepath.Join(dir, "gaspirun"), args...)
	if err != nil {
		return nil, err
	}
	return parseOurs(out)
}

// printHosts prints the across-hosts table and the targets of the issue
// (barrier and 8 B allreduce at most 1.5x Open MPI's).
func printHosts(got map[system]map[key][]float64, hosts, perHost int) {
	fmt.Printf("\n# %d simulated hosts x %d ranks (ranks 0 and 1 %s)\n", hosts, perHost, pairPlace(perHost))
	fmt.Printf("%-46s %6s %11s %11s %10s\n", "figure", "unit", "mpi-hosts", "ours-hosts", "ours/mpi")
	var checks []string
	for _, f := range hostFigures {
		m := stats.Median(got[mpiHosts][f.mpi])
		o := stats.Median(got[oursHosts][f.ours])
		fmt.Printf("%-46s %6s %11s %11s %10s\n", f.name, f.unit, num(m), num(o), ratio(o, m))
		if f.target > 0 && m > 0 && o > 0 {
			checks = append(checks, f.check(o/m))
		}
	}
	fmt.Println("# targets across hosts (ours/Open MPI)")
	for _, c := range checks {
		fmt.Println(strings.Replace(c, "ours/mpi-tcp", "ours/mpi-hosts", 1))
	}
	if len(got[oursRacks]) == 0 {
		return
	}
	fmt.Printf("\n# ours with a rack level (-racks) against ours without, same run\n")
	fmt.Printf("%-46s %6s %11s %11s %12s\n", "figure", "unit", "ours-hosts", "ours-racks", "racks/hosts")
	for _, f := range hostFigures {
		h, k := stats.Median(got[oursHosts][f.ours]), stats.Median(got[oursRacks][f.ours])
		fmt.Printf("%-46s %6s %11s %11s %12s\n", f.name, f.unit, num(h), num(k), ratio(k, h))
	}
}

// parseRacks reads -racks: counts of hosts per rack that add up to hosts.
func parseRacks(v string, hosts int) ([]int, error) {
	var counts []int
	sum := 0
	for _, f := range strings.Split(v, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || c < 1 {
			return nil, fmt.Errorf("-racks %q: %q is not a count of hosts (1 or more)", v, f)
		}
		counts = append(counts, c)
		sum += c
	}
	if sum != hosts || len(counts) < 2 {
		return nil, fmt.Errorf("-racks %q: want 2 racks or more whose counts add up to -hosts %d", v, hosts)
	}
	return counts, nil
}

// racksSpec is gaspirun's --racks for the rig's hosts (their labels are
// their addresses, as in the hostfile), counts[i] hosts on rack i in
// host order.
func racksSpec(r *hostsrig.Rig, counts []int) string {
	hosts := r.C.Hosts()
	var parts []string
	next := 0
	for i, c := range counts {
		var names []string
		for _, h := range hosts[next : next+c] {
			names = append(names, h.Addr().String())
		}
		next += c
		parts = append(parts, fmt.Sprintf("rack%d=%s", i, strings.Join(names, ",")))
	}
	return strings.Join(parts, ";")
}
