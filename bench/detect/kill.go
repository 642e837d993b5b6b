package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"syscall"
	"time"

	"github.com/gaspigo/gaspigo/internal/testkit/simhost"
)

// oneKill runs one job and kills one process in it: start the job, wait
// until every rank runs, choose the victim at a random moment, apply the
// fault, then measure the detection and the agreement on the new view,
// and check the job's results.
func oneKill(o options, gaspirun, prog string, i int, rng *rand.Rand) killResult {
	r := killResult{job: i, victim: -1, victimRank: -1, detect: -1, firstApplied: -1, lastApplied: -1, commit: -1, newLeaderProc: -1}
	logw, closeLog := openLog(o.logDir, fmt.Sprintf("latency-%03d.log", i))
	defer closeLog()
	nprocs := o.ranks + o.spares
	j, err := startKillJob(o, gaspirun, prog, logw)
	if err != nil {
		r.note = err.Error()
		return r
	}
	defer j.stop(15 * time.Second)
	onSignal(func() { j.stop(5 * time.Second) })
	if !waitStarted(j, o) {
		r.note = "job did not start"
		return r
	}
	time.Sleep(o.minDelay + time.Duration(rng.Int64N(int64(o.maxDelay-o.minDelay)+1)))
	recs := j.snapshot()
	chooseVictim(o, &r, lastLeader(recs, time.Time{}), rng)
	// lost: the processes the fault takes (the victim's host's with
	// -fault crash or cut).
	lost := map[int]bool{r.victim: true}
	if o.fault != "kill" {
		for p := range nprocs {
			lost[p] = p%o.hosts == r.victim%o.hosts
		}
	}
	killAt := time.Now()
	heal, err := applyFault(o, pids(recs), r.victim)
	if err != nil {
		r.note = err.Error()
		return r
	}
	if heal != nil {
		defer heal() // before the job's stop (deferred earlier, runs later)
	}
	survivors := map[int]bool{}
	for p := 0; p < nprocs; p++ {
		if !lost[p] {
			survivors[p] = true
		}
	}
	measureAgreement(j, &r, survivors, killAt)
	checkResults(j, o, &r, lost)
	return r
}

// startKillJob starts a latency job: over the simulated hosts with -hosts,
// else under gaspirun.
func startKillJob(o options, gaspirun, prog string, logw io.Writer) (*job, error) {
	nprocs := o.ranks + o.spares
	args := append([]string{"-steps", fmt.Sprint(o.steps), "-pause", o.pause.String(), "-leader", "-timeout", "150s", "-finalize-timeout", "10s"}, o.progArgs...)
	if cluster == nil {
		flags := []string{"-n", fmt.Sprint(o.ranks), "--spares", fmt.Sprint(o.spares), "--timeout", "180s"}
		return startJob(gaspirun, flags, prog, args, []string{"PGAS_LOG=info"}, logw)
	}
	hosts := make([]int, nprocs)
	for p := range hosts {
		hosts[p] = p % o.hosts
	}
	// gaspirun gives each process GOMAXPROCS = cores / processes.
	procs := max(1, runtime.NumCPU()/nprocs)
	return startHostJob(cluster, hosts, o.spares, prog, args, []string{"PGAS_LOG=info", fmt.Sprintf("GOMAXPROCS=%d", procs)}, logw)
}

// waitStarted waits, at most a minute, until every rank has initialized,
// every process's pid is known and a Raft leader is reported.
func waitStarted(j *job, o options) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return j.wait(ctx, func(recs []record) bool {
		n := 0
		for _, x := range recs {
			if x.kind == "init" {
				n++
			}
		}
		return n >= o.ranks && len(pids(recs)) == o.ranks+o.spares && lastLeader(recs, time.Time{}) >= 0
	})
}

// chooseVictim sets r's victim by -victim, given the Raft leader's
// process.
func chooseVictim(o options, r *killResult, leader int, rng *rand.Rand) {
	switch o.victim {
	case "random":
		r.victim = rng.IntN(o.ranks)
	case "leader":
		r.victim = leader
	case "nonleader":
		for {
			r.victim = rng.IntN(o.ranks)
			if r.victim != leader {
				break
			}
		}
	}
	if r.victim < o.ranks {
		r.victimRank = r.victim // at epoch 1, process p holds rank p
	}
	r.leader = r.victim == leader
}

// applyFault applies -fault to the victim (pm: the processes' pids): a
// SIGKILL, or its host crashed or cut. heal, if not nil, heals the cut.
func applyFault(o options, pm map[int]int, victim int) (heal func(), err error) {
	switch o.fault {
	case "kill":
		if err := syscall.Kill(pm[victim], syscall.SIGKILL); err != nil {
			return nil, fmt.Errorf("kill %d: %v", pm[victim], err)
		}
	case "crash":
		if _, err := cluster.Crash(cluster.Host(victim % o.hosts)); err != nil {
			return nil, fmt.Errorf("crash: %v", err)
		}
	case "cut":
		h := cluster.Host(victim % o.hosts)
		if err := cluster.Cut(h, simhost.Silent); err != nil {
			return nil, fmt.Errorf("cut: %v", err)
		}
		return func() { cluster.Heal(h) }, nil
	}
	return nil, nil
}

// measureAgreement waits, at most 30 s, until every survivor has applied
// an epoch > 1, and sets r's times from the kill at killAt: to the first
// "failure confirmed" of the victim, to the first and the last survivor
// applying the view, and the new leader when the leader was killed.
func measureAgreement(j *job, r *killResult, survivors map[int]bool, killAt time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	applied := func(recs []record) map[int]time.Time {
		m := map[int]time.Time{}
		for _, x := range recs {
			if x.kind == "log" && x.msg == "view applied" && x.int("epoch") > 1 && survivors[x.proc()] {
				if _, ok := m[x.proc()]; !ok {
					m[x.proc()] = x.at
				}
			}
		}
		return m
	}
	if !j.wait(ctx, func(recs []record) bool { return len(applied(recs)) == len(survivors) }) {
		r.note = fmt.Sprintf("only %d of %d survivors applied a new view within 30s", len(applied(j.snapshot())), len(survivors))
	}
	recs := j.snapshot()
	var first, last time.Time
	for _, t := range applied(recs) {
		if first.IsZero() || t.Before(first) {
			first = t
		}
		if t.After(last) {
			last = t
		}
	}
	var confirmed time.Time
	for _, x := range recs {
		if x.kind == "log" && x.msg == "failure confirmed" && x.int("failed_proc") == int64(r.victim) {
			if confirmed.IsZero() || x.at.Before(confirmed) {
				confirmed = x.at
			}
		}
	}
	if !confirmed.IsZero() {
		r.detect = confirmed.Sub(killAt)
	}
	if !first.IsZero() && r.note == "" {
		r.firstApplied = first.Sub(killAt)
		r.lastApplied = last.Sub(killAt)
		if !confirmed.IsZero() {
			r.commit = last.Sub(confirmed)
		}
	}
	if r.leader {
		r.newLeaderProc = lastLeader(recs, killAt)
	}
}

// checkResults waits, at most 90 s, for the survivors' result lines (a
// process the fault cut off may print its own) and checks that the job
// still computes the failure-free result, in one epoch, and that a killed
// leader was followed by a new one.
func checkResults(j *job, o options, r *killResult, lost map[int]bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	want := fmt.Sprint(expectedSum(int64(o.ranks), int64(o.steps)))
	results := func(recs []record) int {
		n := 0
		for _, x := range recs {
			if x.kind == "result" && !lost[labelProc(x)] {
				n++
			}
		}
		return n
	}
	j.wait(ctx, func(recs []record) bool { return results(recs) >= o.ranks })
	recs := j.snapshot()
	r.resultOK = results(recs) == o.ranks
	epochs := map[string]bool{}
	for _, x := range recs {
		if x.kind == "result" && !lost[labelProc(x)] {
			epochs[x.kv["epoch"]] = true
			if x.kv["sum"] != want {
				r.resultOK = false
			}
		}
	}
	if len(epochs) != 1 {
		r.resultOK = false
	}
	if !r.resultOK && r.note == "" {
		r.note = fmt.Sprintf("results: %d of %d, want sum=%s in one epoch", count(recs, "result"), o.ranks, want)
	}
	if r.leader && r.newLeaderProc < 0 && r.note == "" {
		r.note = "no new leader reported"
	}
}
