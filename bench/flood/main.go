// Command flood measures the recovery of a K-means job after a kill of its
// Raft leader with and without a flood of unauthenticated connections to
// every listening port of the job (data plane, Raft, control RPC, and
// gaspirun's rendezvous), runs alternating:
//
//	go run ./bench/flood                       # 5 pairs, the default flood
//	go run ./bench/flood -reps 9 -rate 500 -hold 500
//
// Each run is gaspirun -n 4 --spares 1 -- kmeans --generate 200000 --dim 10
// --k 20 --max-iter 25 --ckpt-every 5 --ckpt-dir DIR --inject
// kill:leader,iter=15 (a run whose leader was the idle spare, which the job
// cannot kill, is repeated). The recovery time is from the kill (its
// inject line) to the last "checkpoint restored" record. The flood (one
// goroutine per port in this process) makes -rate connections a second to
// each port, holds up to -hold of them open and idle, and closes every
// -churn-th at once (-workers goroutines per port share the work). Each pair prints both times, the flood's counters and
// the 1-minute load average; the summary gives the medians and their
// ratio. Every run must exit 0 with the same checksum, and its final disk
// checkpoint must be complete. The tool builds cmd/gaspirun and the kmeans
// command into a temporary directory (or uses -bin DIR).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
)

var finalRE = regexp.MustCompile(`(?m)^\[r0\] centroids sha256=([0-9a-f]{64}) `)

type options struct {
	reps      int
	bin       string
	checkDisk bool
	flood     proctest.FloodConfig
}

func main() {
	var o options
	flag.IntVar(&o.reps, "reps", 5, "pairs of runs (unflooded, flooded)")
	flag.StringVar(&o.bin, "bin", "", "directory with gaspirun and kmeans already built (default: build them)")
	flag.BoolVar(&o.checkDisk, "check-disk", true, "require the final disk checkpoint to be complete (false: for builds that do not wait for it)")
	flag.IntVar(&o.flood.PerTarget, "rate", 250, "new connections per second to each port")
	flag.IntVar(&o.flood.Hold, "hold", 250, "connections held open per port")
	flag.IntVar(&o.flood.ChurnEvery, "churn", 4, "close every N-th connection at once (0: none)")
	flag.IntVar(&o.flood.Workers, "workers", 1, "dialing goroutines per port (for higher rates)")
	flag.Parse()
	if err := o.run(); err != nil {
		fmt.Fprintln(os.Stderr, "flood:", err)
		os.Exit(1)
	}
}

func (o options) run() error {
	if o.reps < 1 || o.flood.PerTarget < 1 || o.flood.Hold < 0 || o.flood.ChurnEvery < 0 {
		return errors.New("-reps and -rate must be >= 1, -hold and -churn >= 0")
	}
	if o.bin == "" {
		dir, err := os.MkdirTemp("", "bench-flood-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		root, err := proctest.ModuleRoot()
		if err != nil {
			return err
		}
		if err := proctest.BuildInto(root, dir, false, "./cmd/gaspirun", "./apps/kmeans/cmd/kmeans"); err != nil {
			return err
		}
		o.bin = dir
	}
	fmt.Printf("flood per port: %d connections/s, %d held, every %d-th closed at once, %d workers\n", o.flood.PerTarget, o.flood.Hold, o.flood.ChurnEvery, max(o.flood.Workers, 1))
	var quiet, loud []time.Duration
	sum := ""
	for i := 1; i <= o.reps; i++ {
		load := proctest.LoadAvg()
		q, qs, _, err := o.job(false)
		if err != nil {
			return fmt.Errorf("pair %d, unflooded: %w", i, err)
		}
		l, ls, st, err := o.job(true)
		if err != nil {
			return fmt.Errorf("pair %d, flooded: %w", i, err)
		}
		if qs != ls || (sum != "" && qs != sum) {
			return fmt.Errorf("pair %d: checksums differ: %s / %s / %s", i, sum, qs, ls)
		}
		sum = qs
		quiet, loud = append(quiet, q), append(loud, l)
		fmt.Printf("pair %d (load %s): recovery %v unflooded, %v flooded (ratio %.2f); flood: %v\n",
			i, load, q.Round(time.Millisecond), l.Round(time.Millisecond), l.Seconds()/q.Seconds(), st)
	}
	mq, ml := median(quiet), median(loud)
	fmt.Printf("median recovery over %d pairs: %v unflooded, %v flooded; ratio %.2f (load %s)\n",
		o.reps, mq.Round(time.Millisecond), ml.Round(time.Millisecond), ml.Seconds()/mq.Seconds(), proctest.LoadAvg())
	return nil
}

// job runs the kill-leader job once (repeating it while the leader is an
// idle spare) and returns its recovery time, checksum and flood counters.
func (o options) job(flood bool) (time.Duration, string, proctest.FloodStats, error) {
	for attempt := 1; attempt <= 8; attempt++ {
		dir, err := os.MkdirTemp("", "bench-flood-ckpt-")
		if err != nil {
			return 0, "", proctest.FloodStats{}, err
		}
		out, st, err := o.once(dir, flood)
		_, serr := os.Stat(filepath.Join(dir, "ckpt-26", "manifest.json"))
		os.RemoveAll(dir)
		if err != nil {
			return 0, "", st, fmt.Errorf("%w\n%s", err, keep(out))
		}
		if strings.Contains(out, "which holds no rank (an idle spare); nothing killed") {
			continue
		}
		if serr != nil && o.checkDisk {
			return 0, "", st, fmt.Errorf("the final disk checkpoint is not complete: %w\n%s", serr, tail(out))
		}
		m := finalRE.FindStringSubmatch(out)
		if m == nil {
			return 0, "", st, fmt.Errorf("no result line\n%s", tail(out))
		}
		kill, d, err := proctest.KillToRestore(strings.Split(out, "\n"))
		if err != nil {
			return 0, "", st, fmt.Errorf("%w\n%s", err, tail(out))
		}
		if flood && (st.Began.IsZero() || !st.Began.Before(kill.Add(-100*time.Millisecond))) {
			fmt.Printf("  (the flood began %v, not before the kill at %v; run again)\n", st.Began.Format(time.StampMilli), kill.Format(time.StampMilli))
			continue
		}
		return d, m[1], st, nil
	}
	return 0, "", proctest.FloodStats{}, errors.New("the Raft leader was an idle spare in 8 runs in a row")
}

// once runs one job, flooded or not, and returns its output.
func (o options) once(dir string, flood bool) (string, proctest.FloodStats, error) {
	jobID := fmt.Sprintf("bench-flood-%d-%x", os.Getpid(), rand.Uint64())
	cmd := exec.Command(filepath.Join(o.bin, "gaspirun"), "-n", "4", "--spares", "1", "--timeout", "2m", "--grace", "1s", "--job-id", jobID, "--",
		filepath.Join(o.bin, "kmeans"), "--generate", "200000", "--dim", "10", "--k", "20", "--max-iter", "25", "--ckpt-every", "5",
		"--ckpt-dir", dir, "--inject", "kill:leader,iter=15")
	cmd.Env = append(os.Environ(), "PGAS_LOG=info")
	j, err := proctest.Start(proctest.JobConfig{Bound: 3 * time.Minute}, cmd)
	if err != nil {
		return "", proctest.FloodStats{}, err
	}
	pids := proctest.NewProcs()
	stopWatch := pids.Watch(jobID, cmd.Process.Pid, 20*time.Millisecond)
	var st proctest.FloodStats
	stopFlood := func() {}
	var f *proctest.Flood
	if flood {
		f = proctest.NewFlood(o.flood)
		launcher := cmd.Process.Pid
		stopFlood = f.Follow(func() []int { return append(pids.PIDs(), launcher) }, 20*time.Millisecond)
	}
	j.Wait(context.Background()) // the bound ends it
	err = j.Procs()[0].Err()
	stopFlood()
	stopWatch()
	if f != nil {
		st = f.Stats()
	}
	if left := pids.Leftovers(15 * time.Second); len(left) > 0 {
		return j.Output(), st, fmt.Errorf("processes %v still ran after gaspirun ended", left)
	}
	if err != nil {
		return j.Output(), st, fmt.Errorf("gaspirun: %w", err)
	}
	return j.Output(), st, nil
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// keep writes a failed job's whole output to a file and returns its tail
// and the file's name.
func keep(out string) string {
	f, err := os.CreateTemp("", "bench-flood-failed-*.log")
	if err != nil {
		return tail(out)
	}
	f.WriteString(out)
	f.Close()
	return tail(out) + "\n(whole output: " + f.Name() + ")"
}

func tail(out string) string {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	return strings.Join(lines[max(len(lines)-40, 0):], "\n")
}
