package scale

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/pgas/pgastest"
	"github.com/gaspigo/gaspigo/transport/mem"
)

var wallN = flag.String("scale.wall", "", "comma-separated rank counts for TestWallClock (e.g. 64,256,1024,4096)")

// TestWallClock measures in real time what a user of pgastest.NewJob sees:
// Init of the whole job, then barriers and 8-byte allreduces, each rank a
// goroutine, all on this machine's cores. It prints the load average
// beside the figures; a figure taken at a load above 1.5 is not a figure.
func TestWallClock(t *testing.T) {
	if *wallN == "" {
		t.Skip("give -scale.wall=64,256,1024,4096")
	}
	fmt.Printf("load average: %s, GOMAXPROCS %d\n", loadAvg(), runtime.GOMAXPROCS(0))
	fmt.Printf("%7s | %10s %9s | %10s %10s | %10s %10s\n", "N", "init", "heap/rk", "barrier", "(min)", "allreduce", "(min)")
	for _, s := range strings.Split(*wallN, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 2 {
			t.Fatalf("-scale.wall: %q is not a rank count of 2 or more", s)
		}
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			var ms0, ms1 runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms0)
			t0 := time.Now()
			rts, _ := pgastest.NewJob(t, n, mem.Config{}, nil)
			initT := time.Since(t0)
			runtime.GC()
			runtime.ReadMemStats(&ms1)
			ctx := context.Background()
			bar := rounds(t, rts, 7, func(rt *pgas.Runtime) error { return rt.Barrier(ctx, nil) })
			ar := rounds(t, rts, 7, func(rt *pgas.Runtime) error {
				return pgas.Allreduce(ctx, rt, nil, []float64{1}, pgas.OpSum)
			})
			fmt.Printf("%7d | %10s %8.1fK | %10s %10s | %10s %10s\n", n, round(initT),
				float64(int64(ms1.HeapAlloc)-int64(ms0.HeapAlloc))/float64(n)/1024,
				round(median(bar)), round(slices.Min(bar)), round(median(ar)), round(slices.Min(ar)))
		})
	}
	fmt.Printf("load average after: %s\n", loadAvg())
}

// rounds runs op on every rank, reps times in a row, and returns the wall
// time of each round for all ranks together: every rank is a goroutine
// that starts the next round when it finished its part of the last (as
// a program does), and a round ends when the last rank finished it.
func rounds(t *testing.T, rts []*pgas.Runtime, reps int, op func(*pgas.Runtime) error) []time.Duration {
	t.Helper()
	ends := make([][]time.Time, len(rts))
	errs := make([]error, len(rts))
	var wg sync.WaitGroup
	t0 := time.Now()
	for i, rt := range rts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range reps {
				if err := op(rt); err != nil {
					errs[i] = err
					return
				}
				ends[i] = append(ends[i], time.Now())
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", i, err)
		}
	}
	out := make([]time.Duration, reps)
	prev := t0
	for k := range reps {
		last := prev
		for i := range rts {
			if ends[i][k].After(last) {
				last = ends[i][k]
			}
		}
		out[k] = last.Sub(prev)
		prev = last
	}
	return out
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
