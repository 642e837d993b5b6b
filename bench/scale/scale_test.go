package scale

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gaspigo/gaspigo/health"
	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/spares"
	"github.com/gaspigo/gaspigo/transport"
)

var (
	tableN   = flag.String("scale.n", "", "comma-separated rank counts for TestScaleTable (e.g. 64,256,1024,4096,16384)")
	realN    = flag.Int("scale.real", 65536, "TestScaleTable: up to this many ranks the membership is package spares' (Raft among the voters, a tree for the others); above it the fake one, which turns a report into a view at once")
	restN    = flag.String("scale.rest", "", "comma-separated rank counts for TestRestTraffic (e.g. 256,4096,16384)")
	killLead = flag.Bool("scale.killleader", false, "TestScaleTable: kill the Raft leader's rank instead of rank N/3 (with the real membership)")
	heapProf = flag.String("scale.heapprofile", "", "TestScaleTable: write heap profiles taken after setup (Init, ckpt.New and the first checkpoint) and after the kill's recovery to this file, suffixed with -N and -N-kill")
)

// figures is one row of the table.
type figures struct {
	n         int
	init      initFigures
	rest      restFigures
	barrier   collFigures
	allred    collFigures
	bcast     collFigures
	kill      killFigures
	goPerRank float64
	real      bool // the membership was package spares'
	victim    int  // the rank killed
}

// measure runs the whole simulation at n ranks (plus 2 spares) and returns
// its figures. It runs inside a synctest bubble.
func measure(t *testing.T, n int, real, killLeader bool) figures {
	var f figures
	f.n, f.real = n, real
	s, fi := newSim(t, n, 2, real)
	f.init = fi
	t.Logf("N=%d after setup: %s", n, memLine())
	f.goPerRank = float64(runtime.NumGoroutine()) / float64(n)
	f.rest = s.rest(5 * time.Second)
	ctx := context.Background()
	f.barrier = s.collective(3, func(rt *pgas.Runtime) error { return rt.Barrier(ctx, nil) })
	f.allred = s.collective(3, func(rt *pgas.Runtime) error {
		return pgas.Allreduce(ctx, rt, nil, []float64{1}, pgas.OpSum)
	})
	f.bcast = s.collective(3, func(rt *pgas.Runtime) error {
		return rt.Bcast(ctx, nil, make([]byte, 8), 0)
	})
	f.victim = n / 3
	if killLeader {
		if r := s.leaderRank(); r >= 0 {
			f.victim = r
		} else {
			t.Logf("N=%d: the Raft leader holds no rank; rank %d is killed instead", n, f.victim)
		}
	}
	f.kill = s.kill(f.victim)
	t.Logf("N=%d after the kill's recovery: %s", n, memLine())
	if *heapProf != "" {
		runtime.GC()
		writeHeapProfile(t, fmt.Sprintf("%s-%d-kill", *heapProf, n))
	}
	return f
}

// memLine describes the process's memory: resident now and at its
// peak (VmRSS, VmHWM), and the Go heap and goroutine stacks.
func memLine() string {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	rss, hwm := "?", "?"
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				rss = strings.TrimSpace(v)
			}
			if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
				hwm = strings.TrimSpace(v)
			}
		}
	}
	return fmt.Sprintf("rss %s (peak %s), heap in use %d MiB, heap held %d MiB, stacks %d MiB, goroutines %d",
		rss, hwm, ms.HeapInuse>>20, (ms.HeapSys-ms.HeapReleased)>>20, ms.StackInuse>>20, runtime.NumGoroutine())
}

// check holds the figures to the protocols' stated costs.
func check(t *testing.T, f figures) {
	t.Helper()
	if lim := float64(log2(f.n) + 4); f.allred.msgsPerRank > lim {
		t.Errorf("N=%d: %.1f messages per rank per allreduce, want at most ⌈log2 N⌉+4 = %.0f", f.n, f.allred.msgsPerRank, lim)
	}
	if lim := float64(log2(f.n) + 1); f.barrier.msgsPerRank > lim {
		t.Errorf("N=%d: %.1f messages per rank per barrier, want at most ⌈log2 N⌉+1 = %.0f", f.n, f.barrier.msgsPerRank, lim)
	}
	// A kill reaches a new view on every survivor within the detector's
	// timeout, an election and O(log N) hops of news.
	bound := health.DefaultConfig().SuspicionTimeout + 2*spares.LocalConfig().ElectionTimeout + time.Duration(4*log2(f.n)+20)*hop
	if f.kill.toView <= 0 || f.kill.toView > bound {
		t.Errorf("N=%d: a kill reached every survivor's new view after %v (fake time), want within %v", f.n, f.kill.toView, bound)
	}
	if f.bcast.msgsPerRank > 1.01 {
		t.Errorf("N=%d: %.2f messages per rank per broadcast, want at most 1", f.n, f.bcast.msgsPerRank)
	}
}

func header() string {
	return fmt.Sprintf("%7s | %9s %9s %9s %9s %7s | %8s %8s %8s | %6s %6s %6s | %8s %8s %8s | %9s %9s %9s | %6s",
		"N", "init.wall", "init.cpu", "alloc/rk", "heap/rk", "setup.m", "hb.msg/s", "hb.B/s", "hb.max/s",
		"bar.m", "ar.m", "bc.m", "bar.wall", "ar.wall", "bc.wall", "view.hops", "rest.hops", "kill.m/rk", "gor/rk")
}

func (f figures) String() string {
	return fmt.Sprintf("%7d | %9s %9s %9.0f %8.1fK %7.1f | %8.2f %8.0f %8.2f | %6.2f %6.2f %6.2f | %8s %8s %8s | %9.0f %9.0f %9.1f | %6.1f",
		f.n, round(f.init.wall), round(f.init.cpu), f.init.allocsPerRank, f.init.heapPerRank/1024, f.init.setupMsgsPerRank,
		f.rest.msgsPerProcSec, f.rest.bytesPerProcSec, f.rest.maxPerProcSec,
		f.barrier.msgsPerRank, f.allred.msgsPerRank, f.bcast.msgsPerRank,
		round(f.barrier.wall), round(f.allred.wall), round(f.bcast.wall),
		float64(f.kill.toView)/float64(hop), float64(f.kill.toRestored)/float64(hop), f.kill.msgsPerSurvivor, f.goPerRank)
}

func round(d time.Duration) time.Duration {
	switch {
	case d > time.Second:
		return d.Round(10 * time.Millisecond)
	case d > time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

// TestScaleSample runs the simulation at N = 1,024 and holds its message
// counts to the protocols' bounds. Counts, not times: they are the same
// on a busy machine.
func TestScaleSample(t *testing.T) {
	n := 1024
	if proctest.Race {
		// The race detector allows 8,128 goroutines at once.
		n = 128
	}
	synctest.Test(t, func(t *testing.T) {
		f := measure(t, n, true, false)
		t.Log("\n" + header() + "\n" + f.String())
		check(t, f)
	})
}

// TestScaleTable prints the table for the rank counts of -scale.n, and the
// growth of each figure per 4x of N.
func TestScaleTable(t *testing.T) {
	if *tableN == "" {
		t.Skip("give -scale.n=64,256,1024,4096,16384")
	}
	var rows []figures
	for _, s := range strings.Split(*tableN, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 2 {
			t.Fatalf("-scale.n: %q is not a rank count of 2 or more", s)
		}
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := measure(t, n, n <= *realN, *killLead)
				rows = append(rows, f)
				// Before the job is closed, which at tens of thousands of
				// ranks takes minutes.
				t.Logf("\n%s\n%s", header(), f.String())
				t.Logf("recovery frames per rank by type: %s", byType(f.kill.byType, n))
				check(t, f)
			})
		})
		fmt.Fprintln(os.Stderr, header())
		fmt.Fprintln(os.Stderr, rows[len(rows)-1].String())
	}
	fmt.Println(header())
	for _, f := range rows {
		fmt.Println(f.String())
	}
}

// byType lists a snapshot's frames per rank by frame type.
func byType(s snapshot, n int) string {
	var b strings.Builder
	for ty, c := range s.frames {
		if c != 0 {
			fmt.Fprintf(&b, " %v=%.1f", transport.FrameType(ty), float64(c)/float64(n))
		}
	}
	return b.String()
}

// TestRestTraffic measures the failure detector's traffic at rest for the
// rank counts of -scale.rest, with the fake membership and no checkpoints,
// so that it reaches sizes (16,384) whose checkpoint and membership
// tables would not fit the machine: the figure to hold flat in N.
func TestRestTraffic(t *testing.T) {
	if *restN == "" {
		t.Skip("give -scale.rest=256,4096,16384")
	}
	fmt.Printf("%7s | %10s %9s | %9s %9s %9s\n", "N", "init.wall", "heap/rk", "hb.msg/s", "hb.B/s", "hb.max/s")
	for _, f := range strings.Split(*restN, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 2 {
			t.Fatalf("-scale.rest: %q is not a rank count of 2 or more", f)
		}
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s, fi := newSimOpts(t, n, 2, false, true)
				r := s.rest(5 * time.Second)
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				fmt.Printf("%7d | %10s %8.1fK | %9.2f %9.0f %9.2f\n", n, round(fi.wall), float64(ms.HeapAlloc)/float64(n)/1024,
					r.msgsPerProcSec, r.bytesPerProcSec, r.maxPerProcSec)
			})
		})
	}
}
