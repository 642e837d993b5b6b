package kvjob

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gaspigo/gaspigo/ckpt"
	"github.com/gaspigo/gaspigo/health"
	"github.com/gaspigo/gaspigo/kvshuffle"
	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/pgas/pgastest"
	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/mem"
)

// A rank killed during Start's collective setup, while the others create
// the checkpointer's segments (ckpt.New) or the shuffle's segment
// (kvshuffle.New), is recovered inside Start: the promoted spare joins,
// every rank starts from the initial region, and the job checkpoints on
// with the spare as a job that never failed would.
func TestStartRecoversKillDuringSetup(t *testing.T) {
	for _, step := range []string{"ckpt.New", "kvshuffle.New"} {
		t.Run(step, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { killDuringStart(t, step) })
		})
	}
}

func killDuringStart(t *testing.T, step string) {
	const ranks, procs, victim = 4, 5, 2
	nw, err := mem.New(procs, mem.Config{Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer nw.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	m := pgastest.New(ranks, procs)
	hc := health.LocalConfig()
	cfgs := make([]pgas.Config, procs)
	for p := range cfgs {
		c := pgas.LocalConfig()
		c.Proc = transport.Proc(p)
		c.NumProcs, c.NumRanks = procs, ranks
		c.Transport = nw.Endpoint(transport.Proc(p))
		c.Membership = m.Handle(transport.Proc(p))
		c.Health = &hc
		cfgs[p] = c
	}
	sh := kvshuffle.LocalConfig()
	sh.SpillDir = t.TempDir()
	initial := []byte("the program's initial region")
	config := func() Config {
		return Config{Name: "test", Shuffle: sh, App: bytes.Clone(initial), StateBytes: 1 << 10, Mirrors: 1}
	}
	var mu sync.Mutex
	var opened []*pgas.Runtime
	defer func() {
		for _, rt := range opened {
			rt.Close()
		}
	}()
	jobs := make([]*Job, procs)
	errs := make([]error, procs)
	// start is a process's Start, then one more checkpoint.
	start := func(p int, rt *pgas.Runtime) {
		mu.Lock()
		opened = append(opened, rt)
		mu.Unlock()
		cfg := config()
		j, err := Start(ctx, rt, cfg)
		if err == nil {
			err = j.Save(ctx, nil)
			defer j.Close()
		}
		jobs[p], errs[p] = j, err
	}
	rts := make([]*pgas.Runtime, ranks)
	for r := range rts {
		if rts[r], err = pgas.Init(ctx, cfgs[r]); err != nil {
			t.Fatal(err)
		}
	}
	spareDone := make(chan struct{})
	go func() {
		defer close(spareDone)
		if rt, err := pgas.Init(ctx, cfgs[ranks]); err == nil {
			start(ranks, rt)
		}
	}()
	var wg sync.WaitGroup
	for r, rt := range rts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r != victim {
				start(r, rt)
				return
			}
			mu.Lock()
			opened = append(opened, rt)
			mu.Unlock()
			// The victim gets as far as the step, and dies once its frames
			// arrived (the others wait in the step).
			if step == "kvshuffle.New" {
				cc := ckpt.DefaultConfig()
				cc.Mirrors = 1
				cc.MaxBytes = int64(len(initial) + 8 + 1<<10)
				if ck, err := ckpt.New(ctx, rt, cc); err == nil {
					defer ck.Close()
				} else {
					t.Errorf("victim: ckpt.New: %v", err)
				}
			}
			synctest.Wait()
			nw.Kill(rt.Proc())
		}()
	}
	wg.Wait()
	<-spareDone
	for p, err := range errs {
		if p == victim {
			continue
		}
		if err != nil {
			t.Fatalf("process %d: %v", p, err)
		}
		j := jobs[p]
		if j.Recoveries != 1 || j.seq != 2 || !bytes.Equal(j.cfg.App, initial) {
			t.Fatalf("process %d (rank %d): %d recoveries, checkpoint %d, region %q; want 1 recovery, checkpoint 2, the initial region", p, j.RT.Rank(), j.Recoveries, j.seq, j.cfg.App)
		}
	}
	if jobs[ranks] == nil || jobs[ranks].RT.Rank() != victim {
		t.Fatalf("the spare does not hold rank %d", victim)
	}
}
