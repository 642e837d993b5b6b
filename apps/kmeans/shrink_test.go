package kmeans

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gaspigo/gaspigo/apps/kmeans/internal/kmtest"
	"github.com/gaspigo/gaspigo/apps/kmeans/kernel"
	"github.com/gaspigo/gaspigo/ckpt"
	"github.com/gaspigo/gaspigo/health"
	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/pgas/pgastest"
	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/mem"
)

func TestShardOwners(t *testing.T) {
	for _, c := range []struct {
		vacant []bool
		want   []int
	}{
		{[]bool{false, false, false, false}, []int{0, 1, 2, 3}},
		{[]bool{false, false, true, false}, []int{0, 1, 3, 3}},
		{[]bool{false, false, true, true}, []int{0, 1, 0, 0}},
		{[]bool{true, false, false, false}, []int{1, 1, 2, 3}},
		{[]bool{true, true, true, false}, []int{3, 3, 3, 3}},
		{[]bool{true, true}, []int{-1, -1}},
		{[]bool{}, []int{}},
	} {
		if got := ShardOwners(c.vacant); !slices.Equal(got, c.want) {
			t.Errorf("ShardOwners(%v) = %v, want %v", c.vacant, got, c.want)
		}
	}
}

// lockedBuf collects the progress lines of whichever rank reports.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
	// onLine sees every line, under mu.
	onLine func(string)
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.onLine != nil {
		for _, line := range strings.SplitAfter(string(p), "\n") {
			if line != "" {
				l.onLine(line)
			}
		}
	}
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// shrinkOptions is the workload of the in-memory shrink tests: uneven
// shards (6001 points over 4 ranks), a checkpoint every 3 iterations.
func shrinkOptions() Options {
	g := kernel.DefaultGenConfig()
	g.N, g.D, g.Blobs, g.Seed = 6001, 4, 6, 11
	kc := kernel.DefaultConfig()
	kc.Impl = kernel.ImplGo
	return Options{Gen: g, K: 6, MaxIter: 15, Seed: 11, Every: 3, Kernel: kc, Shrink: true}
}

// runShrinkJob runs a 4-rank job over transport/mem, with a membership
// that shrinks, inside the caller's synctest bubble. kills maps an
// iteration to the rank whose process dies right after the job first
// completes it. It checks that every survivor finished with the same
// result and returns it with the progress output.
func runShrinkJob(t *testing.T, opt Options, kills map[int]int) (RunResult, string) {
	t.Helper()
	results, errs, out := runMemJob(t, opt, kills)
	var first *RunResult
	for r := range results {
		if slices.Contains(slices.Collect(maps.Values(kills)), r) {
			if errs[r] == nil {
				t.Fatalf("rank %d was killed but finished the run", r)
			}
			continue
		}
		if errs[r] != nil {
			t.Fatalf("rank %d: %v\n%s", r, errs[r], out)
		}
		if first == nil {
			first = &results[r]
		} else if kmtest.SameBits(first.Centroids, results[r].Centroids) >= 0 || first.SSE != results[r].SSE {
			t.Fatalf("ranks ended with different results")
		}
	}
	return *first, out
}

// runMemJob runs the job of runShrinkJob and returns every rank's result
// and error, and the progress output.
func runMemJob(t *testing.T, opt Options, kills map[int]int) ([]RunResult, []error, string) {
	t.Helper()
	return runMemJobWith(t, opt, kills, memHooks{})
}

// memHooks let a test step into every rank of runMemJobWith.
type memHooks struct {
	// ckpt adjusts the checkpointer's config (a disk level, say).
	ckpt func(cc *ckpt.Config)
	// before runs after UseCheckpoints, before Run (a resume from disk).
	before func(ctx context.Context, r int, job *Job, ck *ckpt.Checkpointer) error
	// after runs after a successful Run; its result replaces Run's.
	after func(ctx context.Context, r int, job *Job, res RunResult) (RunResult, error)
	// ranks is the job's size (0: 4); spares, the spare processes.
	ranks, spares int
	// net, if set, sees the network before the job starts.
	net func(nw *mem.Network)
}

// runMemJobWith is runMemJob with hooks. The results and errors are by
// process: the starting ranks' processes first (process r holds rank r),
// then the spares' (a zero result and a nil error for a spare never
// promoted).
func runMemJobWith(t *testing.T, opt Options, kills map[int]int, h memHooks) ([]RunResult, []error, string) {
	t.Helper()
	ranks := 4
	if h.ranks > 0 {
		ranks = h.ranks
	}
	procs := ranks + h.spares
	nw, err := mem.New(procs, mem.Config{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer nw.Close()
	if h.net != nil {
		h.net(nw)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	mj := &memJob{ctx: ctx, nw: nw, opt: opt, h: h, results: make([]RunResult, procs), errs: make([]error, procs)}
	defer mj.closeRuntimes()
	killed := mj.killAt(kills)
	cfgs := memConfigs(nw, ranks, procs)
	rts := make([]*pgas.Runtime, ranks)
	for r := range rts {
		if rts[r], err = pgas.Init(ctx, cfgs[r]); err != nil {
			t.Fatal(err)
		}
	}
	// Spares wait in Init until promoted; the network's end releases the
	// others.
	var spares sync.WaitGroup
	for p := ranks; p < procs; p++ {
		spares.Add(1)
		go func() {
			defer spares.Done()
			if rt, err := pgas.Init(ctx, cfgs[p]); err == nil {
				mj.process(p, rt)
			}
		}()
	}
	var wg sync.WaitGroup
	for r, rt := range rts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mj.process(r, rt)
		}()
	}
	wg.Wait()
	if h.spares > 0 {
		// The promoted spares finish with the survivors; then the idle
		// ones are let go.
		synctest.Wait()
		nw.Close()
		spares.Wait()
	}
	if len(killed) != len(kills) {
		t.Fatalf("%d of %d kills fired\n%s", len(killed), len(kills), mj.out.String())
	}
	return mj.results, mj.errs, mj.out.String()
}

// memJob is one job of runMemJobWith: its network, its processes'
// output, results and errors.
type memJob struct {
	ctx     context.Context
	nw      *mem.Network
	opt     Options
	h       memHooks
	out     lockedBuf
	results []RunResult
	errs    []error
	mu      sync.Mutex
	opened  []*pgas.Runtime // closed once every process is done
}

// memConfigs are the runtime configs of the job's processes, over a
// membership that shrinks once no spare is left: a reported failure
// becomes, at once, a new epoch in which a spare holds the rank, or the
// rank is vacant.
func memConfigs(nw *mem.Network, ranks, procs int) []pgas.Config {
	m := pgastest.New(ranks, procs)
	m.SetShrink(true)
	hc := health.LocalConfig()
	cfgs := make([]pgas.Config, procs)
	for p := range cfgs {
		cfg := pgas.LocalConfig()
		cfg.Proc = transport.Proc(p)
		cfg.NumProcs, cfg.NumRanks = procs, ranks
		cfg.Transport = nw.Endpoint(transport.Proc(p))
		cfg.Membership = m.Handle(transport.Proc(p))
		cfg.Health = &hc
		cfgs[p] = cfg
	}
	return cfgs
}

// killAt kills process r once the progress shows iteration it, for every
// it, r of kills, and returns the iterations whose kill fired.
func (mj *memJob) killAt(kills map[int]int) map[int]bool {
	killed := map[int]bool{}
	mj.out.onLine = func(line string) {
		var it int
		if _, err := fmt.Sscanf(line, "iter %d", &it); err != nil {
			return
		}
		if r, ok := kills[it]; ok && !killed[it] {
			killed[it] = true
			mj.nw.Kill(transport.Proc(r)) // process r holds rank r: no spares
		}
	}
	return killed
}

func (mj *memJob) closeRuntimes() {
	for _, rt := range mj.opened {
		rt.Close()
	}
}

// process is process p's life after Init, as the command's: the job, its
// checkpointer (SetupCheckpoints), the hook, Run.
func (mj *memJob) process(p int, rt *pgas.Runtime) {
	mj.mu.Lock()
	mj.opened = append(mj.opened, rt)
	mj.mu.Unlock()
	ctx, h := mj.ctx, mj.h
	o := mj.opt
	o.Progress = &mj.out
	o.Kill = func(Kill) { mj.nw.Kill(transport.Proc(p)) }
	job, err := NewJob(ctx, rt, o)
	if err != nil {
		mj.errs[p] = err
		return
	}
	defer job.Close()
	var ck *ckpt.Checkpointer
	err = job.SetupCheckpoints(ctx, func(ctx context.Context, joining bool) (Checkpoints, error) {
		cc := ckpt.LocalConfig()
		cc.MaxBytes = job.StateBytes()
		if h.ckpt != nil {
			h.ckpt(&cc)
		}
		mk := ckpt.New
		if joining {
			mk = ckpt.NewJoining
		}
		c, err := mk(ctx, rt, cc)
		if c == nil {
			return nil, err
		}
		ck = c
		return c, err
	})
	if ck != nil {
		defer ck.Close()
	}
	if err != nil {
		mj.errs[p] = err
		return
	}
	if h.before != nil && !job.Joining() {
		if mj.errs[p] = h.before(ctx, p, job, ck); mj.errs[p] != nil {
			return
		}
	}
	mj.results[p], mj.errs[p] = job.Run(ctx)
	if mj.errs[p] == nil && h.after != nil {
		mj.results[p], mj.errs[p] = h.after(ctx, p, job, mj.results[p])
	}
}

// shardOrderLloyd is what a --shrink run computes, done in one process:
// every shard's partial from its own kernel, the partials laid out as the
// reduction vector and added in shard order, then Update.
func shardOrderLloyd(t *testing.T, opt Options, ranks int) []float64 {
	t.Helper()
	g, k := opt.Gen, opt.K
	idx, err := kernel.InitIndices(opt.Seed, g.N, k)
	if err != nil {
		t.Fatal(err)
	}
	cent := make([]float64, k*g.D)
	for c, i := range idx {
		if err := kernel.Generate(g, i, i+1, cent[c*g.D:(c+1)*g.D]); err != nil {
			t.Fatal(err)
		}
	}
	kernels := make([]*kernel.Kernel, ranks)
	parts := make([]*kernel.Partial, ranks)
	for s := range kernels {
		lo, hi := g.N*s/ranks, g.N*(s+1)/ranks
		pts := make([]float64, (hi-lo)*g.D)
		if err := kernel.Generate(g, lo, hi, pts); err != nil {
			t.Fatal(err)
		}
		if kernels[s], err = kernel.NewKernel(pts, g.D, k, opt.Kernel); err != nil {
			t.Fatal(err)
		}
		defer kernels[s].Close()
		parts[s] = kernel.NewPartial(k, g.D)
	}
	kd := k * g.D
	buf := make([]float64, kd+k+2)
	slot := make([]float64, kd+k+2)
	counts := make([]int64, k)
	next := make([]float64, kd)
	for it := 0; it < opt.MaxIter; it++ {
		for s, kr := range kernels {
			if err := kr.Step(cent, parts[s]); err != nil {
				t.Fatal(err)
			}
			putPartial(slot, parts[s])
			if s == 0 {
				copy(buf, slot)
				continue
			}
			for i, x := range slot {
				buf[i] += x
			}
		}
		for i := range counts {
			counts[i] = int64(buf[kd+i])
		}
		if _, err := kernel.Update(next, cent, buf[:kd], counts, k, g.D); err != nil {
			t.Fatal(err)
		}
		copy(cent, next)
	}
	return cent
}

// A job with Shrink computes exactly the shard-order sums, and losing
// ranks with no spare left changes nothing in the result: the survivors
// take over the vacant ranks' shards and the centroids are the same bits.
func TestShrinkSameBits(t *testing.T) {
	opt := shrinkOptions()
	want := shardOrderLloyd(t, opt, 4)
	var base RunResult
	synctest.Test(t, func(t *testing.T) {
		var out string
		base, out = runShrinkJob(t, opt, nil)
		if strings.Contains(out, "recovery:") {
			t.Fatalf("a recovery without a failure\n%s", out)
		}
	})
	if i := kmtest.SameBits(base.Centroids, want); i >= 0 {
		t.Fatalf("failure-free --shrink run differs from the shard-order sums at %d: %v vs %v", i, base.Centroids[i], want[i])
	}
	for _, c := range []struct {
		name  string
		kills map[int]int
		lines []string
	}{
		{"rank 2", map[int]int{7: 2}, []string{
			"recovery: rank 2 is vacant: shard 2 (points [3000, 4500)) goes to rank 3; 3 of 4 ranks live",
		}},
		{"rank 0, the reporter", map[int]int{5: 0}, []string{
			"recovery: rank 0 is vacant: shard 0 (points [0, 1500)) goes to rank 1; 3 of 4 ranks live",
		}},
		{"ranks 2 then 3", map[int]int{4: 2, 10: 3}, []string{
			"recovery: rank 2 is vacant: shard 2 (points [3000, 4500)) goes to rank 3; 3 of 4 ranks live",
			"recovery: rank 3 is vacant: shard 2 (points [3000, 4500)) goes to rank 0; 2 of 4 ranks live",
			"recovery: rank 3 is vacant: shard 3 (points [4500, 6001)) goes to rank 0; 2 of 4 ranks live",
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				got, out := runShrinkJob(t, opt, c.kills)
				if got.Recoveries != len(c.kills) || got.Iterations != opt.MaxIter {
					t.Fatalf("%d recoveries and %d iterations, want %d and %d\n%s", got.Recoveries, got.Iterations, len(c.kills), opt.MaxIter, out)
				}
				for _, l := range c.lines {
					if !strings.Contains(out, l+"\n") {
						t.Fatalf("no line %q\n%s", l, out)
					}
				}
				if i := kmtest.SameBits(got.Centroids, base.Centroids); i >= 0 || got.SSE != base.SSE {
					t.Fatalf("after the kills: sse %v, failure-free sse %v; centroids differ at %d\n%s", got.SSE, base.SSE, i, out)
				}
			})
		})
	}
}

// Without Shrink a vacant rank's points would be lost: a job whose
// membership left a rank vacant refuses to go on. (With the membership's
// Shrink off that cannot happen: the job fails first.)
func TestVacantWithoutShrinkFails(t *testing.T) {
	opt := shrinkOptions()
	opt.Shrink = false
	synctest.Test(t, func(t *testing.T) {
		_, errs, out := runMemJob(t, opt, map[int]int{4: 1})
		for r, err := range errs {
			if r != 1 && (err == nil || !strings.Contains(err.Error(), "rank 1 is vacant")) {
				t.Fatalf("rank %d: %v, want an error naming the vacant rank\n%s", r, err, out)
			}
		}
	})
}
