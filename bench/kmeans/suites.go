package main

import (
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gaspigo/gaspigo/apps/kmeans/kernel"
	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
	"github.com/gaspigo/gaspigo/internal/testkit/stats"
)

// overhead: --ckpt-every 10 against --ckpt-every 0, alternating.
func (b *bench) overhead() error {
	fmt.Printf("\n## (a) checkpoint overhead: 4 ranks, %d points, 10-D, k=100, %d iterations, --ckpt-every 10 vs 0 (load %s)\n", b.o.points, b.o.iters, proctest.LoadAvg())
	var on, off, ratios []float64
	var sums []string
	fmt.Printf("%4s %12s %12s %8s %8s %12s %10s %10s %8s  %s\n", "rep", "ckpt10 loop", "ckpt0 loop", "ratio", "iters", "in ckpt", "cpu10", "cpu0", "ratio", "load before")
	var shares, cpuRatios []float64
	for r := 0; r < b.o.reps; r++ {
		proctest.SettleLoad(2 * time.Minute) // each round from below 1.5, as far as it goes
		order := []int{10, 0}
		if r%2 == 1 {
			order = []int{0, 10}
		}
		got, cpu := map[int]time.Duration{}, map[int]time.Duration{}
		var n int
		var share float64
		load := proctest.LoadAvg()
		for _, every := range order {
			j, err := b.runJob([]string{"-n", "4"}, kmArgs(b.o.points, 100, b.o.iters, every))
			if err != nil {
				return err
			}
			if err := j.ok(); err != nil {
				return err
			}
			got[every], n = j.loop()
			cpu[every] = j.cpu
			sums = append(sums, j.final)
			if every > 0 {
				share = j.ckptShare()
			}
		}
		on = append(on, got[10].Seconds())
		off = append(off, got[0].Seconds())
		ratios = append(ratios, got[10].Seconds()/got[0].Seconds())
		shares = append(shares, share)
		cpuRatios = append(cpuRatios, cpu[10].Seconds()/cpu[0].Seconds())
		fmt.Printf("%4d %12v %12v %8.3f %8d %11.2f%% %10v %10v %8.3f  %s\n", r+1, got[10].Round(time.Millisecond), got[0].Round(time.Millisecond), ratios[r], n, share,
			cpu[10].Round(time.Millisecond), cpu[0].Round(time.Millisecond), cpuRatios[r], load)
	}
	if !allEqual(sums) {
		return fmt.Errorf("the runs with and without checkpoints ended with different centroids: %v", sums)
	}
	fmt.Printf("median loop: ckpt10 %.3f s, ckpt0 %.3f s; ratio of medians %.3f; median of paired ratios %.3f (min %.3f, max %.3f); overhead target < 1.02; load after %s\n",
		stats.Median(on), stats.Median(off), stats.Median(on)/stats.Median(off), stats.Median(ratios), slices.Min(ratios), slices.Max(ratios), proctest.LoadAvg())
	fmt.Printf("CPU time of the whole job (all processes, start-up and data generation included): median of paired ratios %.3f (min %.3f, max %.3f)\n", stats.Median(cpuRatios), slices.Min(cpuRatios), slices.Max(cpuRatios))
	fmt.Printf("rank 0's time in checkpoint Start and Commit (the critical path), share of its run: median %.2f%% (min %.2f%%, max %.2f%%)\n", stats.Median(shares), slices.Min(shares), slices.Max(shares))
	fmt.Printf("every run ended with the same centroids: %s\n", sums[0])
	return nil
}

// recovery: SIGKILL of rank 2 after iteration 25 against a failure-free
// run of the same job.
func (b *bench) recovery() error {
	const killAt, every = 25, 10
	iters := max(b.o.iters, killAt+10)
	fmt.Printf("\n## (b) recovery: 4 ranks + 1 spare, %d points, 10-D, k=100, %d iterations, --ckpt-every %d, kill:rank=2,iter=%d (load %s)\n", b.o.points, iters, every, killAt, proctest.LoadAvg())
	fmt.Printf("%4s %10s %10s %10s %10s %10s %10s %10s %7s  %s\n", "rep", "noticed", "view", "restored", "next-iter", "caught-up", "lost", "per-iter", "leader", "load before")
	var noticed, view, restored, next, caught, lost, per []float64
	var sums []string
	for r := 0; r < b.o.reps; r++ {
		proctest.SettleLoad(2 * time.Minute)
		load := proctest.LoadAvg()
		args := kmArgs(b.o.points, 100, iters, every)
		var jf, jk *job
		for _, kill := range []bool{r%2 == 0, r%2 == 1} {
			a := args
			if kill {
				a = append(slices.Clone(args), "--inject", fmt.Sprintf("kill:rank=2,iter=%d", killAt))
			}
			j, err := b.runJob([]string{"-n", "4", "--spares", "1"}, a)
			if err != nil {
				return err
			}
			if err := j.ok(); err != nil {
				return err
			}
			sums = append(sums, j.final)
			if kill {
				jk = j
			} else {
				jf = j
			}
		}
		rec, err := recoveryTimes(jk, killAt)
		if err != nil {
			return err
		}
		lk, _ := jk.loop()
		lf, _ := jf.loop()
		pi := stats.Median(durations(jf.perIter()))
		noticed = append(noticed, rec.noticed.Seconds())
		view = append(view, rec.view.Seconds())
		restored = append(restored, rec.restored.Seconds())
		next = append(next, rec.next.Seconds())
		caught = append(caught, rec.caught.Seconds())
		lost = append(lost, (lk - lf).Seconds())
		per = append(per, pi)
		fmt.Printf("%4d %10s %10s %10s %10s %10s %10s %10s %7v  %s\n", r+1, ms(rec.noticed.Seconds()), ms(rec.view.Seconds()), ms(rec.restored.Seconds()),
			ms(rec.next.Seconds()), ms(rec.caught.Seconds()), ms((lk - lf).Seconds()), ms(pi), rec.leader, load)
	}
	if !allEqual(sums) {
		return fmt.Errorf("recovered and failure-free runs ended with different centroids: %v", sums)
	}
	fmt.Printf("median (ms), from the SIGKILL: rank 0 noticed %s, new view in force %s, checkpoint restored %s, next iteration completed %s (target < 1000), back at iteration %d %s; loop time lost against the failure-free run %s; failure-free time per iteration %s; load after %s\n",
		ms(stats.Median(noticed)), ms(stats.Median(view)), ms(stats.Median(restored)), ms(stats.Median(next)), killAt+1, ms(stats.Median(caught)), ms(stats.Median(lost)), ms(stats.Median(per)), proctest.LoadAvg())
	return nil
}

type recTimes struct {
	noticed, view, restored, next, caught time.Duration
	leader                                bool // the victim led Raft when it was killed
}

// recoveryTimes reads a recovered job: the victim's kill time, rank 0's
// "recovery: iteration N failed" line (noticed), its "recovery: epoch E in
// force after V; checkpoint ... restored after R" line (the view is the
// time the line was printed minus (R - V); restored is the line), the
// first iteration line after that (next), and the first line of the
// iteration after the kill (caught).
func recoveryTimes(j *job, killAt int) (recTimes, error) {
	var kill time.Time
	leader, victim := -1, -1
	for _, l := range j.lines {
		if strings.Contains(l, `msg="spares: became raft leader"`) {
			if _, after, ok := strings.Cut(l, " proc="); ok {
				p, _, _ := strings.Cut(after, " ")
				leader, _ = strconv.Atoi(p)
			}
		}
		if m := injectRE.FindStringSubmatch(l); m != nil {
			victim, _ = strconv.Atoi(m[1]) // no earlier failure: process = rank
			t, err := time.Parse(time.RFC3339Nano, m[3])
			if err != nil {
				return recTimes{}, err
			}
			kill = t
			break
		}
	}
	if kill.IsZero() {
		return recTimes{}, errors.New("recovery job: no inject line")
	}
	r := recTimes{leader: leader >= 0 && leader == victim}
	state := 0
	for _, l := range j.iters {
		if l.at.Before(kill) {
			continue
		}
		switch {
		case state == 0 && strings.HasPrefix(l.text, "recovery: iteration"):
			r.noticed = l.at.Sub(kill)
			state = 1
		case state <= 1 && strings.HasPrefix(l.text, "recovery: epoch"):
			r.restored = l.at.Sub(kill)
			var ep int
			var v, rs string
			if n, _ := fmt.Sscanf(l.text, "recovery: epoch %d in force after %s", &ep, &v); n == 2 {
				_, after, _ := strings.Cut(l.text, "restored after ")
				rs, _, _ = strings.Cut(after, ";")
				dv, e1 := time.ParseDuration(strings.TrimSuffix(v, ";"))
				dr, e2 := time.ParseDuration(rs)
				if e1 == nil && e2 == nil {
					r.view = r.restored - (dr - dv)
				}
			}
			state = 2
		case state == 2 && l.iter >= 0:
			r.next = l.at.Sub(kill)
			state = 3
		}
		if state >= 2 && l.iter == killAt+1 {
			r.caught = l.at.Sub(kill)
			return r, nil
		}
	}
	return r, fmt.Errorf("recovery job: incomplete recovery lines (state %d)", state)
}

// runtimeOverhead: 2 ranks under gaspirun against a single-process loop of
// the same kernel with 2 threads.
func (b *bench) runtimeOverhead() error {
	const k = 100
	iters := b.o.iters
	fmt.Printf("\n## (c) runtime overhead: 2 ranks under gaspirun (--ckpt-every 0, 1 kernel thread each) vs one process, kernel with Threads=2; %d points, 10-D, k=%d, %d iterations (load %s)\n", b.o.points, k, iters, proctest.LoadAvg())
	g := kernel.DefaultGenConfig()
	g.N = b.o.points
	pts := make([]float64, g.N*g.D)
	if err := kernel.Generate(g, 0, g.N, pts); err != nil {
		return err
	}
	idx, err := kernel.InitIndices(g.Seed, g.N, k)
	if err != nil {
		return err
	}
	init := make([]float64, k*g.D)
	for c, i := range idx {
		if err := kernel.Generate(g, i, i+1, init[c*g.D:(c+1)*g.D]); err != nil {
			return err
		}
	}
	fmt.Printf("%4s %14s %14s %8s  %s\n", "rep", "gaspirun -n 2", "1 process", "ratio", "load before")
	var dist, single, ratios []float64
	for r := 0; r < b.o.reps; r++ {
		proctest.SettleLoad(2 * time.Minute)
		load := proctest.LoadAvg()
		var d, s float64
		var sse float64
		for _, which := range order2(r) {
			if which == 0 {
				j, err := b.runJob([]string{"-n", "2"}, kmArgs(b.o.points, k, iters, 0))
				if err != nil {
					return err
				}
				if err := j.ok(); err != nil {
					return err
				}
				d = stats.Median(durations(j.perIter()))
				f := strings.Fields(j.final)
				if len(f) >= 3 {
					sse, _ = strconv.ParseFloat(strings.TrimPrefix(f[2], "sse="), 64)
				}
			} else {
				per, lastSSE, err := singleProcess(pts, g.D, init, iters)
				if err != nil {
					return err
				}
				s = stats.Median(durations(per))
				if sse != 0 && relDiff(sse, lastSSE) > 1e-9 {
					return fmt.Errorf("single process SSE %v, distributed %v: not the same computation", lastSSE, sse)
				}
				sse = lastSSE
			}
		}
		dist = append(dist, d)
		single = append(single, s)
		ratios = append(ratios, d/s)
		fmt.Printf("%4d %14s %14s %8.3f  %s\n", r+1, ms(d), ms(s), d/s, load)
	}
	fmt.Printf("median per iteration: gaspirun -n 2 %s ms, one process %s ms; ratio of medians %.3f; median of paired ratios %.3f (min %.3f, max %.3f); target <= 1.2; load after %s\n",
		ms(stats.Median(dist)), ms(stats.Median(single)), stats.Median(dist)/stats.Median(single), stats.Median(ratios), slices.Min(ratios), slices.Max(ratios), proctest.LoadAvg())
	return nil
}

func order2(r int) []int {
	if r%2 == 0 {
		return []int{0, 1}
	}
	return []int{1, 0}
}

// singleProcess runs iters Lloyd iterations with the kernel (Threads=2)
// and returns the time of each iteration (step plus update) and the last
// SSE.
func singleProcess(pts []float64, d int, init []float64, iters int) ([]time.Duration, float64, error) {
	k := len(init) / d
	kr, err := kernel.NewKernel(pts, d, k, kernel.Config{Impl: kernel.ImplAuto, Threads: 2, MaxIter: iters})
	if err != nil {
		return nil, 0, err
	}
	defer kr.Close()
	cent := slices.Clone(init)
	next := make([]float64, len(cent))
	p := kernel.NewPartial(k, d)
	var per []time.Duration
	for it := 0; it < iters; it++ {
		t0 := time.Now()
		if err := kr.Step(cent, p); err != nil {
			return nil, 0, err
		}
		if _, err := kernel.Update(next, cent, p.Sums, p.Counts, k, d); err != nil {
			return nil, 0, err
		}
		copy(cent, next)
		if it > 0 { // like the distributed figure: gaps after the first iteration
			per = append(per, time.Since(t0))
		}
	}
	return per, p.SSE, nil
}

// kernel runs the apps/kmeans/kernel benchmarks.
func (b *bench) kernel() error {
	fmt.Printf("\n## (d) kernel: go test -run XXX -bench Kernel -benchtime 20x ./apps/kmeans/kernel (load %s)\n", proctest.LoadAvg())
	root, err := proctest.ModuleRoot()
	if err != nil {
		return err
	}
	cmd := exec.Command("go", "test", "-run", "XXX", "-bench", "Kernel", "-benchtime", "20x", "./apps/kmeans/kernel")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go test -bench: %v\n%s", err, out)
	}
	fmt.Printf("%-32s %14s %10s %8s %9s\n", "benchmark", "dist/s", "GFLOP/s", "%peak", "x naive")
	for _, l := range strings.Split(string(out), "\n") {
		if !strings.HasPrefix(l, "BenchmarkKernel/") {
			continue
		}
		f := strings.Fields(l)
		metric := map[string]string{}
		for i := 2; i+1 < len(f); i += 2 {
			metric[f[i+1]] = f[i]
		}
		name := strings.TrimSuffix(strings.TrimPrefix(f[0], "BenchmarkKernel/"), "-2")
		fmt.Printf("%-32s %14s %10s %8s %9s\n", name, metric["dist/s"], metric["GFLOP/s"], metric["%peak"], metric["x_naive"])
	}
	fmt.Printf("(rates per second of the benchmark thread's CPU time; %%peak against 120 GFLOP/s per core, the constant in apps/kmeans/kernel/bench_test.go; load after %s)\n", proctest.LoadAvg())
	return nil
}

// seed: the paper's workload with 2 ranks.
func (b *bench) seed() error {
	fmt.Printf("\n## (e) the seed's workload: %d points, 10-D, 2 ranks under gaspirun, --ckpt-every 10 (load %s)\n", b.o.points, proctest.LoadAvg())
	// The paper's Table 2: seconds to convergence, mixed MPI/GPI-2, 4 MPI
	// processes per node.
	paper := map[int][4]float64{10: {4, 3, 2, 2}, 100: {24, 17, 14, 9}, 1000: {150, 72, 50, 37}}
	fmt.Printf("%6s %8s %14s %14s %12s  %s\n", "k", "iters", "per-iter (ms)", "range (ms)", "dist/s/core", "load before")
	res := map[int]float64{}
	for _, k := range []int{10, 100, 1000} {
		iters := b.o.iters
		if k == 1000 {
			iters = max(12, b.o.iters/3)
		}
		var per []float64
		load := proctest.LoadAvg()
		for r := 0; r < b.o.reps; r++ {
			proctest.SettleLoad(2 * time.Minute)
			j, err := b.runJob([]string{"-n", "2"}, kmArgs(b.o.points, k, iters, 10))
			if err != nil {
				return err
			}
			if err := j.ok(); err != nil {
				return err
			}
			per = append(per, stats.Median(durations(j.perIter())))
		}
		m := stats.Median(per)
		res[k] = m
		fmt.Printf("%6d %8d %14s %6s..%-6s %12.3g  %s\n", k, iters, ms(m), ms(slices.Min(per)), ms(slices.Max(per)), float64(b.o.points)*float64(k)/m/2, load)
	}
	fmt.Printf("\nseed paper, Table 2 (seconds to convergence; 16/32/48/64 processes on 4/8/12/16 nodes) next to ours (2 processes on 2 cores):\n")
	fmt.Printf("%6s %8s %8s %8s %8s   %s\n", "k", "4 nodes", "8", "12", "16", "ours: ms per iteration (x 550 iterations, the paper's count for k=1000)")
	for _, k := range []int{10, 100, 1000} {
		p := paper[k]
		fmt.Printf("%6d %8.0f %8.0f %8.0f %8.0f   %s ms (%.1f s)\n", k, p[0], p[1], p[2], p[3], ms(res[k]), res[k]*550)
	}
	fmt.Printf("k=1000 per iteration in the paper (550 iterations): %.0f / %.0f / %.0f / %.0f ms on 4 / 8 / 12 / 16 nodes; load after %s\n",
		150.0/550*1000, 72.0/550*1000, 50.0/550*1000, 37.0/550*1000, proctest.LoadAvg())
	return nil
}
