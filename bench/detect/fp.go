package main

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
)

// falsePositives runs one job without kills beside CPU hogs and counts
// the detector's and the membership's reactions to a death that did not
// happen.
func falsePositives(o options, gaspirun, prog string) error {
	fmt.Printf("detect: false positives, %d ranks + %d spares, ftstep -pause %v, %d CPU hogs, for %v, seed %d\n",
		o.ranks, o.spares, o.pause, o.hogs, o.duration, o.seed)
	fmt.Printf("detect: load average before the hogs: %s\n", proctest.LoadAvg())
	var hogs []*exec.Cmd
	defer func() {
		for _, h := range hogs {
			h.Process.Kill() // by pid: only the hogs this tool started
			h.Wait()
		}
	}()
	for range o.hogs {
		h := exec.Command("yes") // stdout: /dev/null
		if err := h.Start(); err != nil {
			return fmt.Errorf("start CPU hog: %w", err)
		}
		hogs = append(hogs, h)
		onSignal(func() { h.Process.Kill() })
	}
	fmt.Printf("detect: CPU hogs started, pids %v; ftstep extra arguments %q\n", hogPids(hogs), o.progArgs)
	deadline := time.Now().Add(o.duration)
	var total fpCount
	var loads []float64
	var ran time.Duration
	jobs := 0
	sample := time.NewTicker(10 * time.Second)
	defer sample.Stop()
	for time.Until(deadline) > 5*time.Second {
		c, d, err := fpJob(o, gaspirun, prog, jobs, deadline, sample.C, &loads)
		if err != nil {
			return err
		}
		jobs++
		ran += d
		total.add(c)
	}
	fmt.Printf("\n%d job(s), %v of running time with %d CPU hogs: %s\n", jobs, ran.Round(time.Second), o.hogs, total)
	fmt.Printf("load average (1 min) sampled every 10s: %s\n", loadSummary(loads))
	return nil
}

// fpJob runs one job until it ends or until deadline and counts what
// happened while every rank was running.
func fpJob(o options, gaspirun, prog string, i int, deadline time.Time, tick <-chan time.Time, loads *[]float64) (fpCount, time.Duration, error) {
	logw, closeLog := openLog(o.logDir, fmt.Sprintf("fp-%03d.log", i))
	defer closeLog()
	nprocs := o.ranks + o.spares
	limit := time.Until(deadline) + 5*time.Minute
	flags := []string{"-n", fmt.Sprint(o.ranks), "--spares", fmt.Sprint(o.spares), "--timeout", limit.Round(time.Second).String()}
	args := append([]string{"-steps", fmt.Sprint(o.steps), "-pause", o.pause.String(), "-leader", "-progress", "1000",
		"-timeout", limit.Round(time.Second).String(), "-finalize-timeout", "10s"}, o.progArgs...)
	j, err := startJob(gaspirun, flags, prog, args, []string{"PGAS_LOG=info"}, logw)
	if err != nil {
		return fpCount{}, 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if !j.wait(ctx, func(recs []record) bool { return count(recs, "init") >= o.ranks && len(pids(recs)) == nprocs }) {
		j.stop(15 * time.Second)
		return fpCount{}, 0, fmt.Errorf("job %d did not start within 2 minutes", i)
	}
	onSignal(func() { j.stop(5 * time.Second) })
	t0 := time.Now()
	fmt.Printf("job %d running at %s\n", i, t0.Format(time.TimeOnly))
	report := time.NewTicker(time.Minute)
	defer report.Stop()
	end := time.NewTimer(time.Until(deadline))
	defer end.Stop()
	for ended := false; !ended; {
		select {
		case <-tick:
			if v, err := strconv.ParseFloat(strings.Fields(proctest.LoadAvg())[0], 64); err == nil {
				*loads = append(*loads, v)
			}
		case <-report.C:
			fmt.Printf("  job %d, %v: %s; load %s\n", i, time.Since(t0).Round(time.Second), countFP(j.snapshot(), t0, time.Now()), proctest.LoadAvg())
		case <-end.C:
			ended = true
		case <-j.run.Changed():
		}
		if j.run.Ended() {
			ended = true
		}
	}
	t1 := time.Now()
	recs := j.snapshot()
	c := countFP(recs, t0, t1)
	jobEnded, code := j.run.Ended(), j.run.ExitCode()
	j.stop(15 * time.Second)
	fmt.Printf("job %d ran %v: %s\n", i, t1.Sub(t0).Round(time.Second), c)
	if jobEnded {
		c.jobsFailed++
		fmt.Printf("job %d ended by itself (gaspirun exit %d) before the deadline\n", i, code)
	}
	for _, x := range recs {
		if interesting(x) && !x.at.Before(t0) && !x.at.After(t1) {
			fmt.Println("  ", x.raw)
		}
	}
	return c, t1.Sub(t0), nil
}

func hogPids(hs []*exec.Cmd) []int {
	var ps []int
	for _, h := range hs {
		ps = append(ps, h.Process.Pid)
	}
	return ps
}

// fpCount is what happened in a window of a run without kills.
type fpCount struct {
	suspected, confirmed, epochs, failedSteps, leaderChanges, exits, jobsFailed int
	maxStep                                                                     int64
}

func (c *fpCount) add(d fpCount) {
	c.suspected += d.suspected
	c.confirmed += d.confirmed
	c.epochs += d.epochs
	c.failedSteps += d.failedSteps
	c.leaderChanges += d.leaderChanges
	c.exits += d.exits
	c.jobsFailed += d.jobsFailed
	c.maxStep += d.maxStep
}

func (c fpCount) String() string {
	return fmt.Sprintf("suspicions %d, failures confirmed %d, epochs changed %d, failed steps %d, raft leader changes %d, process exits %d, jobs ended early %d, steps done %d",
		c.suspected, c.confirmed, c.epochs, c.failedSteps, c.leaderChanges, c.exits, c.jobsFailed, c.maxStep)
}

func countFP(recs []record, from, to time.Time) fpCount {
	var c fpCount
	epochs := map[int64]bool{}
	leaders := 0 // the first leader line is the initial election
	for _, x := range recs {
		if x.kind == "leader" {
			leaders++
			if leaders > 1 && !x.at.Before(from) && !x.at.After(to) {
				c.leaderChanges++
			}
			continue
		}
		if x.at.Before(from) || x.at.After(to) {
			if x.kind == "progress" && x.int("step") > c.maxStep {
				c.maxStep = x.int("step")
			}
			continue
		}
		switch {
		case x.kind == "log" && x.msg == "health: suspected":
			c.suspected++
		case x.kind == "log" && x.msg == "failure confirmed":
			c.confirmed++
		case x.kind == "log" && x.msg == "view applied" && x.int("epoch") > 1:
			epochs[x.int("epoch")] = true
		case x.kind == "rank" && strings.Contains(x.raw, "failed ("):
			c.failedSteps++
		case x.kind == "gaspirun" && (strings.Contains(x.raw, " was killed") || strings.Contains(x.raw, " exited")):
			c.exits++
		case x.kind == "progress" && x.int("step") > c.maxStep:
			c.maxStep = x.int("step")
		}
	}
	c.epochs = len(epochs)
	return c
}

// interesting lines are printed after a false-positive run.
func interesting(x record) bool {
	switch {
	case x.kind == "log":
		return x.msg == "health: suspected" || x.msg == "failure confirmed" ||
			(x.msg == "view applied" && x.int("epoch") > 1)
	case x.kind == "leader", x.kind == "gaspirun":
		return true
	case x.kind == "rank":
		return strings.Contains(x.raw, "failed (")
	}
	return false
}

func loadSummary(ls []float64) string {
	if len(ls) == 0 {
		return "no samples"
	}
	lo, hi, sum := ls[0], ls[0], 0.0
	for _, v := range ls {
		lo, hi, sum = min(lo, v), max(hi, v), sum+v
	}
	return fmt.Sprintf("min %.2f, mean %.2f, max %.2f over %d samples", lo, sum/float64(len(ls)), hi, len(ls))
}
