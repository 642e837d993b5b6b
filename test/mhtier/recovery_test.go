package mhtier

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/testkit/mhjob"
	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
	"github.com/gaspigo/gaspigo/internal/testkit/simhost"
)

const (
	// recoveryBound is the acceptance bound of the recovery after a
	// silent host cut-off: from the cut to the survivors' first iteration
	// after it. Failure detection takes about 2 s and the recovery a
	// fraction of a second; 10 s is generous on a busy 2-core machine,
	// and far below the 54-68 s of issue 31, when the spare that was to
	// take rank 1 kept dialling the two silent processes of node1 in
	// turn, each dial to its time-out, and learnt of its promotion only
	// when the kernel gave up on node1's address.
	recoveryBound = 10 * time.Second
	// detectionAllowance is how long after the cut the survivors' first
	// confirmation of a node1 process's failure may come for the bound
	// above to hold: the failure detector stretches its timeouts on a
	// starved machine (health's local health score), which is its design
	// and not what this test judges. Past it, only the recovery after the
	// detection is held to recoveryBound.
	detectionAllowance = 5 * time.Second
)

// cutOffWorkload is the job of issue 31, the multi-host chaos mode's
// K-means: 200 iterations, a checkpoint every 10, no early convergence
// (under -race, as the chaos suite, fewer points and iterations).
func cutOffWorkload() []string {
	points, iters := "200000", "200"
	if proctest.Race {
		points, iters = "60000", "120"
	}
	return []string{"--generate", points, "--dim", "10", "--k", "20", "--seed", "11",
		"--max-iter", iters, "--tol", "0", "--ckpt-every", "10"}
}

// TestRendezvousHostCutOffRecovery (issue 31): node1, with ranks 0 and 1,
// the Raft leader and the rendezvous, is cut off silently for good at
// iteration 78. The spares on node2 and node3 take ranks 0 and 1, and the
// survivors must iterate again within recoveryBound of the cut; the
// answer is the failure-free one and node1's processes give up as cut
// off.
func TestRendezvousHostCutOffRecovery(t *testing.T) {
	const cutIter = 78
	args := cutOffWorkload()
	ref := referenceOf(t, args)
	c := newCluster(t)
	j := start(t, c, func(cfg *mhjob.Config) { cfg.Args = args })
	waitIter(t, j, cutIter)
	node1 := c.Host(0)
	cut := time.Now()
	if err := c.Cut(node1, simhost.Silent); err != nil {
		t.Fatalf("cut %s: %v", node1.Name(), err)
	}
	t.Logf("%s cut off (silent) %v after the start", node1.Name(), cut.Sub(j.Begin()).Round(time.Millisecond))
	want := map[int]end{}
	for p, h := range layout {
		if h == 0 {
			want[p] = cutOff
		}
	}
	finish(t, j, want, ref)
	detected, rec, ok := recoveryOf(j.Lines(), cut, 0)
	if !ok {
		t.Fatalf("no iteration after the recovery from the loss of %s\n%s", node1.Name(), output(j))
	}
	ms := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	t.Logf("the survivors confirmed a failure on %s %v after the cut and iterated again %v after the cut (%v after the confirmation)",
		node1.Name(), ms(detected.Sub(cut)), ms(rec.Sub(cut)), ms(rec.Sub(detected)))
	switch {
	case rec.Sub(detected) > recoveryBound:
		t.Errorf("the survivors iterated again %v after they confirmed the failure, want at most %v\n%s", ms(rec.Sub(detected)), recoveryBound, output(j))
	case detected.Sub(cut) > detectionAllowance:
		t.Logf("the failure detector took %v (its timeouts stretched on a starved machine): the bound of %v from the cut is not judged", ms(detected.Sub(cut)), recoveryBound)
	case rec.Sub(cut) > recoveryBound:
		t.Errorf("the survivors iterated again %v after the cut, want at most %v\n%s", ms(rec.Sub(cut)), recoveryBound, output(j))
	}
}

var recoveredRE = regexp.MustCompile(`^recovery: epoch (\d+) in force`)

// recoveryOf finds, after cut, the survivors' first confirmation of the
// failure of a process of host h (layout) and the recovery from the loss
// of h's ranks: the first iteration after the first "recovery: epoch E in
// force" line whose E is at least every epoch that declared one of them
// failed (the loss of two ranks takes two epochs).
func recoveryOf(lines []proctest.Line, cut time.Time, h int) (detected, rec time.Time, ok bool) {
	on := func(p string) bool {
		i, err := strconv.Atoi(p)
		return err == nil && i >= 0 && i < len(layout) && layout[i] == h
	}
	last := 0
	for _, l := range lines {
		if l.Time.Before(cut) || l.Proc < 0 || layout[l.Proc] == h {
			continue
		}
		kv := map[string]string{}
		switch {
		case strings.Contains(l.Text, `msg="failure confirmed"`):
			proctest.ParseKV(l.Text, kv)
			if on(kv["failed_proc"]) && detected.IsZero() {
				detected = l.Time
			}
		case strings.Contains(l.Text, `msg="spares: failure committed"`):
			proctest.ParseKV(l.Text, kv)
			if e, err := strconv.Atoi(kv["epoch"]); err == nil && on(kv["failed_proc"]) && kv["rank"] != "" {
				last = max(last, e)
			}
		}
	}
	if detected.IsZero() || last == 0 {
		return detected, rec, false
	}
	i := slices.IndexFunc(lines, func(l proctest.Line) bool {
		m := recoveredRE.FindStringSubmatch(l.Text)
		if m == nil || l.Time.Before(cut) {
			return false
		}
		e, _ := strconv.Atoi(m[1])
		return e >= last
	})
	if i < 0 {
		return detected, rec, false
	}
	k := slices.IndexFunc(lines[i:], func(l proctest.Line) bool { return l.Proc >= 0 && layout[l.Proc] != h && iterRE.MatchString(l.Text) })
	if k < 0 {
		return detected, rec, false
	}
	return detected, lines[i+k].Time, true
}
