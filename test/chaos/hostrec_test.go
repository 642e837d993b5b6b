package chaos

import (
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
)

var (
	// hostFaultRE is the harness's note of an applied fault (hostRun.apply).
	hostFaultRE = regexp.MustCompile(`^chaos: applied (\S+) host=node(\d+) `)
	// hostRecoveredRE is K-means' line at the end of a recovery.
	hostRecoveredRE = regexp.MustCompile(`^recovery: epoch (\d+) in force`)
)

// hostRecoveries measures the recovery each fault caused, one value per
// fault that caused one: from the fault to the first iteration after the
// recovery that put right every rank the fault took.
//
// A fault caused a recovery when, after it and before the next fault, the
// membership declared failed a process of the struck host that held a
// rank ("spares: failure committed" with a rank); its recovery ends with
// the first "recovery: epoch E in force" line whose E is at least the
// last such epoch (the loss of a host with two ranks takes two epochs).
// A fault that took no rank (a blip ridden out, a cut healed before
// detection) is not measured: it used to be paired with the next recovery
// line, whatever caused that one.
func hostRecoveries(lines []proctest.Line) []time.Duration {
	type fault struct {
		at    int // index of its note
		host  int
		epoch int // last epoch that declared a rank of its host failed; 0: none
	}
	var faults []fault
	for i, l := range lines {
		if l.Proc >= 0 {
			continue
		}
		if m := hostFaultRE.FindStringSubmatch(l.Text); m != nil {
			h, _ := strconv.Atoi(m[2])
			faults = append(faults, fault{at: i, host: h - 1})
		}
	}
	var out []time.Duration
	for k, f := range faults {
		end := len(lines)
		if k+1 < len(faults) {
			end = faults[k+1].at
		}
		for _, l := range lines[f.at:end] {
			r, ok := ParseRecord(l.Text)
			if l.Proc < 0 || !ok || r.Msg() != msgFailureCommitted {
				continue
			}
			p, err1 := strconv.Atoi(r[attrFailedProc])
			e, err2 := strconv.Atoi(r["epoch"])
			if err1 != nil || err2 != nil || r["rank"] == "" || p < 0 || p >= len(HostLayout) || HostLayout[p] != f.host {
				continue
			}
			f.epoch = max(f.epoch, e)
		}
		if f.epoch == 0 {
			continue
		}
		rec := slices.IndexFunc(lines[f.at:], func(x proctest.Line) bool {
			m := hostRecoveredRE.FindStringSubmatch(x.Text)
			if x.Proc < 0 || m == nil {
				return false
			}
			e, _ := strconv.Atoi(m[1])
			return e >= f.epoch
		})
		if rec < 0 {
			continue
		}
		from := f.at + rec
		if it := slices.IndexFunc(lines[from:], func(x proctest.Line) bool { return x.Proc >= 0 && hostIterRE.MatchString(x.Text) }); it >= 0 {
			out = append(out, lines[from+it].Time.Sub(lines[f.at].Time))
		}
	}
	return out
}

// TestHostRecoveriesPerFault: each fault is paired with the recovery it
// caused, or with none.
func TestHostRecoveriesPerFault(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var lines []proctest.Line
	at := func(ms int, proc int, text string) {
		lines = append(lines, proctest.Line{Proc: proc, Time: t0.Add(time.Duration(ms) * time.Millisecond), Text: text})
	}
	committed := func(epoch, failed int, rank string) string {
		s := `time=x level=INFO msg="spares: failure committed" layer=membership proc=3 epoch=` + strconv.Itoa(epoch) +
			` status=running note="" failed_proc=` + strconv.Itoa(failed) + ` reporter=3`
		if rank != "" {
			s += " rank=" + rank + " promoted=5"
		}
		return s
	}
	// A blip on node2 ridden out: no recovery.
	at(0, -1, "chaos: applied host-blip host=node2 at=16 dur=300ms: node2 cut off (silent)")
	at(300, -1, "chaos: healed node2")
	at(400, 0, "iter  20 sse=1")
	// node1 (ranks 0 and 1) cut off for good: two epochs, the first
	// recovery fails, the second ends the loss.
	at(10000, -1, "chaos: applied host-cut-off host=node1 at=78: node1 cut off (silent)")
	at(11900, 3, committed(2, 0, "0"))
	at(11910, 2, committed(2, 0, "0")) // every process logs it
	at(13800, 3, committed(3, 1, "1"))
	at(13810, 4, "recovery: the recovery failed: rank 1 failed")
	at(13820, 4, "recovery: epoch 3 in force after 20µs; checkpoint of iteration 70 restored after 17ms; 9 iterations to redo")
	at(13900, 4, "iter  71 sse=1")
	// A crash of node3's idle spare only (as if): an epoch, no rank, no
	// recovery to measure.
	at(20000, -1, "chaos: applied host-crash host=node3 at=120: SIGKILL pids [9]")
	at(21000, 3, committed(4, 5, ""))
	at(21500, 4, "iter  125 sse=1")
	// A later loss on node2 with its own recovery.
	at(30000, -1, "chaos: applied host-unplug host=node2 at=150 dur=3s: node2 cut off (unreachable)")
	at(32000, 3, committed(5, 2, "2"))
	at(32100, 4, "recovery: epoch 5 in force after 20µs; checkpoint of iteration 140 restored after 17ms; 9 iterations to redo")
	at(32300, 4, "iter  141 sse=1")
	got := hostRecoveries(lines)
	want := []time.Duration{3900 * time.Millisecond, 2300 * time.Millisecond}
	if !slices.Equal(got, want) {
		t.Fatalf("hostRecoveries = %v, want %v", got, want)
	}
}
