package chaos

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Documented exit codes a chaos job may end with when it cannot survive
// its schedule (cmd/gaspirun's and spares' documentation).
const (
	ExitOK              = 0
	ExitSparesExhausted = 75  // job.ExitSparesExhausted
	ExitCutOff          = 74  // job.ExitCutOff: no contact with a membership quorum for PGAS_CUTOFF
	ExitDeclaredFailed  = 77  // job.ExitDeclaredFailed: a fenced process
	ExitKilledNoSpares  = 137 // gaspirun: a rank died and the policy was abort
	ExitTimeout         = 124 // gaspirun --timeout: a hang
)

// noSparesEnd reports whether code is how a job without spares may end
// when it loses a process, besides ExitSparesExhausted: gaspirun tears it
// down with the first lost process's code (cmd/gaspirun's doc): 137 for
// a SIGKILL, 77 for a paused or partitioned process that resumed and
// learnt it was declared failed, 74 for one that gave up cut off, each
// of which can come before the survivors' 75.
func noSparesEnd(code int) bool {
	return code == ExitKilledNoSpares || code == ExitDeclaredFailed || code == ExitCutOff
}

// Result is what a finished job left behind, as the checks need it.
type Result struct {
	Code   int
	Lines  []string // every line gaspirun printed, in order
	Answer string   // the workload's result line ("" if none)
	Hung   bool     // the harness had to stop it
	// Skipped counts the schedule's faults that were not applied (late,
	// no target, or the job ended first).
	Skipped int
}

const staleLine = "applied a frame from a stale epoch"

// Violations checks the invariants of one finished schedule and returns
// every one that broke, each a sentence. ref is the failure-free answer.
func Violations(s Schedule, r Result, ref string) []string {
	var v []string
	switch {
	case r.Hung:
		v = append(v, "hang: the job did not end within its deadline")
	case r.Answer != "" && r.Answer != ref:
		v = append(v, fmt.Sprintf("wrong answer: %q, reference %q", r.Answer, ref))
	case s.Expect == Succeed && !s.Respawn && r.Code == ExitSparesExhausted && r.Answer == "" && DeclaredFailed(r.Lines) > s.Spares:
		// More processes were declared failed than the schedule killed
		// (a busy machine starved some of their heartbeats) and the pool
		// ran out: the documented end, counted apart in the summary. Not
		// with --respawn: there every lost process is replaced, and a rank
		// lost while the pool is empty waits for the replacement, so a
		// pool that ran out is a refill that failed.
	case s.Expect == Succeed && (r.Code != ExitOK || r.Answer == ""):
		v = append(v, fmt.Sprintf("the schedule is survivable, but the job exited %d without the result: %s", r.Code, lastError(r.Lines)))
	case s.Expect == Exhaust && r.Code == ExitOK && r.Skipped > 0 && r.Answer == ref:
		// A fault was skipped, so the losses never outnumbered the spares:
		// the job had to survive, and did.
	case s.Expect == Exhaust && r.Code == ExitOK:
		v = append(v, "the schedule has more losses than spares, but the job exited 0")
	case s.Expect == Exhaust && r.Code != ExitSparesExhausted && !(s.Spares == 0 && noSparesEnd(r.Code)):
		v = append(v, fmt.Sprintf("losses beyond the spares must end with exit %d (or, without spares, %d, %d or %d), got %d: %s", ExitSparesExhausted, ExitKilledNoSpares, ExitDeclaredFailed, ExitCutOff, r.Code, lastError(r.Lines)))
	case s.Expect == Exhaust && r.Answer != "":
		v = append(v, "a job that lost more ranks than it had spares printed a result")
	case s.Expect == ResumeOrRefuse && r.Code == ExitOK && r.Answer == "":
		v = append(v, "the resumed job exited 0 without a result")
	case s.Expect == ResumeOrRefuse && r.Code != ExitOK && !strings.Contains(strings.Join(r.Lines, "\n"), "checkpoint"):
		v = append(v, fmt.Sprintf("the resumed job failed (exit %d) without naming the damaged checkpoint: %s", r.Code, lastError(r.Lines)))
	}
	v = append(v, epochViolations(r.Lines)...)
	v = append(v, staleViolations(r.Lines)...)
	v = append(v, joinerViolations(s.Ranks+s.Spares, r.Lines)...)
	return v
}

// The lines that name a joiner's process id: gaspirun's when it starts a
// replacement (--respawn), the runtime's record when a view lists a
// process that joined.
var respawnIDRE = regexp.MustCompile(`^gaspirun: respawned s(\d+) `)

// joinerViolations checks that the processes that joined the running job
// got new ids: at or above first (the job's first processes, ranks and
// spares, have the ids below), and none handed out twice. The membership
// fences processes by id: a reused id would let a replaced process pass
// for its successor.
func joinerViolations(first int, lines []string) []string {
	var v []string
	started := map[int]bool{}
	reported := map[int]bool{}
	for i, rec := range recordsOf(lines) {
		if m := respawnIDRE.FindStringSubmatch(lines[i]); m != nil {
			id, _ := strconv.Atoi(m[1])
			switch {
			case id < first:
				v = append(v, fmt.Sprintf("gaspirun started a replacement with id %d, the id of one of the job's first %d processes: %s", id, first, lines[i]))
			case started[id]:
				v = append(v, fmt.Sprintf("gaspirun started two replacements with id %d: %s", id, lines[i]))
			}
			started[id] = true
			continue
		}
		if rec.Msg() != msgJoined {
			continue
		}
		id, ok := rec.Int(attrJoiner)
		if ok && id < first && !reported[id] {
			reported[id] = true
			v = append(v, fmt.Sprintf("a view lists process %d as joined, an id of the job's first %d processes: %s", id, first, lines[i]))
		}
	}
	return v
}

// Epochs counts the distinct epochs the job's processes applied (at
// least 1 for a job that started): every epoch after the first is a
// membership change the ranks recovered through.
func Epochs(lines []string) int {
	seen := map[string]bool{}
	for _, r := range recordsOf(lines) {
		if r.Msg() == msgViewApplied {
			seen[r["epoch"]] = true
		}
	}
	return max(len(seen), 1)
}

// DeclaredFailed counts the distinct processes the membership declared
// failed during a job.
func DeclaredFailed(lines []string) int {
	seen := map[string]bool{}
	for _, r := range recordsOf(lines) {
		if p := r[attrFailedProc]; r.Msg() == msgFailureCommitted && p != "" {
			seen[p] = true
		}
	}
	return len(seen)
}

// epochViolations checks that no two processes held one rank in one epoch,
// and that every process that applied an epoch saw the same rank table.
func epochViolations(lines []string) []string {
	type key struct{ rank, epoch int }
	holder := map[key]int{}
	table := map[int]string{}
	var v []string
	for i, kv := range recordsOf(lines) {
		if kv.Msg() != msgViewApplied {
			continue
		}
		l := lines[i]
		proc, e1 := strconv.Atoi(kv["proc"])
		epoch, e2 := strconv.Atoi(kv["epoch"])
		rank, e3 := strconv.Atoi(kv["rank"])
		if e1 != nil || e2 != nil || e3 != nil {
			v = append(v, "unparsable view line: "+l)
			continue
		}
		if ranks, ok := kv["table"]; ok {
			if t, seen := table[epoch]; seen && t != ranks {
				v = append(v, fmt.Sprintf("epoch %d: process %d applied rank table %s, another process %s", epoch, proc, ranks, t))
			}
			table[epoch] = ranks
		}
		if rank < 0 {
			continue
		}
		k := key{rank, epoch}
		if p, ok := holder[k]; ok && p != proc {
			v = append(v, fmt.Sprintf("processes %d and %d both held rank %d in epoch %d", p, proc, rank, epoch))
		}
		holder[k] = proc
	}
	return v
}

// staleViolations checks that no process applied a frame from an epoch
// older than the one its program had acknowledged.
func staleViolations(lines []string) []string {
	var v []string
	recs := recordsOf(lines)
	for i, l := range lines {
		if strings.Contains(l, staleLine) {
			v = append(v, "stale frame applied: "+l)
			continue
		}
		if kv := recs[i]; kv.Msg() == msgRuntimeClosed {
			if n := kv[attrStaleApplied]; n != "" && n != "0" {
				v = append(v, fmt.Sprintf("process %s applied %s frames from stale epochs", kv["proc"], n))
			}
		}
	}
	return v
}

// lastError is the most telling line of a failed job, for messages.
func lastError(lines []string) string {
	for _, pat := range []string{"gaspirun: job failed", "level=ERROR", "error"} {
		for i := len(lines) - 1; i >= 0; i-- {
			if strings.Contains(lines[i], pat) {
				return lines[i]
			}
		}
	}
	if len(lines) == 0 {
		return "(no output)"
	}
	return lines[len(lines)-1]
}
