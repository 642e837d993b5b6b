package chaos

import (
	"flag"
	"fmt"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/health"
	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
	gjob "github.com/gaspigo/gaspigo/job"
)

var (
	flagScale          = flag.Int("chaos.scale", 0, "scale mode: the job's ranks (0: the mode does not run; the test command runs it at 128, after the other packages)")
	flagScaleSchedules = flag.Int("chaos.scaleschedules", 0, "scale mode: run seeds 1..N instead of the fixed sample (the sweep)")
	flagScaleSeeds     = flag.String("chaos.scaleseeds", "", "scale mode: comma-separated seeds to run instead of the sample (replay)")
)

// scaleSampleSeeds is the scale mode's CI sample: a SIGKILLed rank
// (TestScaleSampleKills checks it draws one).
var scaleSampleSeeds = []uint64{1}

// scaleBins are the programs of the scale mode, built without the race
// detector whatever the test binary is: hundreds of race-instrumented
// processes do not fit two cores.
var scaleBins struct {
	once             sync.Once
	gaspirun, kmeans string
	err              error
	cleanup          func()
}

func buildScaleBins(t *testing.T) {
	scaleBins.once.Do(func() {
		dir, cleanup, err := proctest.Build("chaos-scale", false, "./cmd/gaspirun", "./apps/kmeans/cmd/kmeans")
		if err != nil {
			scaleBins.err = err
			return
		}
		scaleBins.cleanup = cleanup
		scaleBins.gaspirun, scaleBins.kmeans = filepath.Join(dir, "gaspirun"), filepath.Join(dir, "kmeans")
	})
	if scaleBins.err != nil {
		t.Fatal(scaleBins.err)
	}
}

// scaleDeadline bounds a scale-mode job of procs processes with faults
// faults. On an oversubscribed machine the job stretches its detector's
// timing (job.StretchFor: 32 for 258 processes on 2 cores), so finding a
// paused or partitioned process takes its silent detection bound times
// that factor (62 s at 32), and up to 1+MaxLocalHealth times that when
// the observers' local health is low. jobDeadline, set for an
// unstretched job, would call two such faults a hang.
func scaleDeadline(procs, faults int) time.Duration {
	c := health.DefaultConfig()
	c = c.Stretched(gjob.StretchFor(procs, runtime.NumCPU()))
	silent := c.DetectionBound(time.Millisecond, false)
	return jobDeadline + time.Duration(faults*(1+c.MaxLocalHealth))*silent
}

// TestChaosScale is the scale mode: schedules of DrawScale on a job of
// -chaos.scale ranks on this machine (the test command: 128), with the same
// invariants as TestChaos. Its reference is the same job without faults,
// which must itself create no new epoch: on a starved machine a
// failure-free job of hundreds of processes must see no false failure.
// The sweep and a replay:
//
//	go test ./test/chaos -run TestChaosScale -chaos.scale=128 -v     # the sample, as the test command runs it
//	go test ./test/chaos -run TestChaosScale -chaos.scale=256 -chaos.scaleschedules=20 -timeout 0 -v
//	go test ./test/chaos -run 'TestChaosScale/seed=5$' -chaos.scale=128 -chaos.scaleseeds=5 -v
func TestChaosScale(t *testing.T) {
	if bins.err != nil {
		t.Skip(bins.err)
	}
	n := *flagScale
	if n == 0 {
		t.Skip("the scale mode runs with -chaos.scale=N (the test command runs it at 128 on its own: hundreds of processes starve whatever runs beside them)")
	}
	if n < 8 {
		t.Fatalf("-chaos.scale=%d: give at least 8 ranks", n)
	}
	buildScaleBins(t)
	t.Cleanup(func() {
		if scaleBins.cleanup != nil {
			scaleBins.cleanup()
		}
	})
	w := kmWorkloadFor(n)
	_, ref := run(t, spec{gaspirun: scaleBins.gaspirun, ranks: n, spares: 2,
		program: append([]string{scaleBins.kmeans}, w.args()...)})
	if ref.Code != 0 || ref.Answer == "" {
		t.Fatalf("failure-free K-means of %d ranks failed (exit %d):\n%s", n, ref.Code, tail(ref.Lines, 30))
	}
	if e := Epochs(ref.Lines) - 1; e > 0 {
		t.Errorf("the failure-free job of %d ranks went through %d new epochs (false failures):\n%s", n, e, tail(ref.Lines, 30))
	}
	t.Logf("reference at %d ranks: %s", n, ref.Answer)
	var list []uint64
	switch {
	case *flagScaleSeeds != "":
		for _, f := range strings.Split(*flagScaleSeeds, ",") {
			s, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
			if err != nil {
				t.Fatalf("-chaos.scaleseeds: %q is not a seed (want e.g. -chaos.scaleseeds=7,12)", f)
			}
			list = append(list, s)
		}
	case *flagScaleSchedules > 0:
		for i := range *flagScaleSchedules {
			list = append(list, uint64(i+1))
		}
	default:
		list = scaleSampleSeeds
	}
	sum := newSummary()
	refs := &references{m: map[string]string{string(KMeans): ref.Answer}}
	for _, seed := range list {
		s := DrawScale(seed, n, w.lastAt())
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			runSchedule(t, s, refs, sum)
		})
	}
	t.Logf("chaos scale summary (%d ranks):\n%s", n, sum.table())
	sum.cov.check(t)
}
