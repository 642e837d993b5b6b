package benchutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
	"github.com/gaspigo/gaspigo/internal/testkit/stats"
)

// Key names one gaspibench measurement: test and size.
type Key struct {
	Test string
	Size int
}

// Setting is one side of a comparison: extra gaspirun flags, and
// environment variables (KEY=VALUE) that replace the caller's.
type Setting struct {
	Name string
	Args []string
	Env  []string
	// Bin, when set, is a directory with another build's gaspirun and
	// gaspibench, run instead of the AB's (to compare two builds).
	Bin string
}

// AB is a comparison of settings on the same gaspirun command (Args:
// gaspirun's flags, then "--" and gaspibench with --csv), run Rounds times
// taking turns (each round starts with the next setting), so that load
// that comes and goes touches every setting alike.
type AB struct {
	Gaspirun string
	Args     []string
	Settings []Setting
	Rounds   int
}

// Result holds rank 0's measurements of each setting over the rounds:
// MiB/s for bandwidth, medians in microseconds otherwise.
type Result struct {
	Order   []Key
	Got     map[string]map[Key][]float64
	Load    string // load average before and after
	Elapsed time.Duration
}

// Run runs the comparison; an error names the round and setting.
func (ab AB) Run() (Result, error) {
	res := Result{Got: map[string]map[Key][]float64{}}
	before := proctest.LoadAvg()
	start := time.Now()
	for r := range ab.Rounds {
		for i := range ab.Settings {
			s := ab.Settings[(i+r)%len(ab.Settings)]
			gaspirun, args := ab.Gaspirun, append(slices.Clone(s.Args), ab.Args...)
			if s.Bin != "" {
				gaspirun, args = s.rebase(ab.Gaspirun, args)
			}
			rows, err := runOnce(gaspirun, args, s.Env)
			if err != nil {
				return res, fmt.Errorf("round %d, %s: %w", r+1, s.Name, err)
			}
			if res.Got[s.Name] == nil {
				res.Got[s.Name] = map[Key][]float64{}
			}
			for k, v := range rows {
				if !slices.Contains(res.Order, k) {
					res.Order = append(res.Order, k)
				}
				res.Got[s.Name][k] = append(res.Got[s.Name][k], v)
			}
		}
	}
	slices.SortFunc(res.Order, func(a, b Key) int {
		if d := slices.Index(testOrder, a.Test) - slices.Index(testOrder, b.Test); d != 0 {
			return d
		}
		return a.Size - b.Size
	})
	res.Load = fmt.Sprintf("before: %s; after: %s", before, proctest.LoadAvg())
	res.Elapsed = time.Since(start).Round(time.Second)
	return res, nil
}

// rebase points gaspirun and the gaspibench beside it at s.Bin's.
func (s Setting) rebase(gaspirun string, args []string) (string, []string) {
	bench := filepath.Join(filepath.Dir(gaspirun), "gaspibench")
	for i, a := range args {
		if a == bench {
			args[i] = filepath.Join(s.Bin, "gaspibench")
		}
	}
	return filepath.Join(s.Bin, "gaspirun"), args
}

var testOrder = []string{"write", "read", "write_notify_rtt", "barrier", "allreduce"}

// Table prints the medians over the rounds of settings a and b, with b/a.
func (res Result) Table(a, b string) string {
	var s strings.Builder
	fmt.Fprintf(&s, "%-18s %7s %11s %11s %9s\n", "test", "size", a, b, b+"/"+a)
	for _, k := range res.Order {
		va, vb := stats.Median(res.Got[a][k]), stats.Median(res.Got[b][k])
		fmt.Fprintf(&s, "%-18s %7s %11.2f %11.2f %9.2f\n", k.Test, SizeName(k.Size), va, vb, vb/va)
	}
	return s.String()
}

// runOnce runs the job once and returns rank 0's measurements.
func runOnce(gaspirun string, args, env []string) (map[Key]float64, error) {
	cmd := exec.Command(gaspirun, args...)
	cmd.Env = withEnv(os.Environ(), env)
	out, err := proctest.Run(6*time.Minute, cmd)
	if err != nil {
		return nil, err
	}
	rows := map[Key]float64{}
	for l := range strings.SplitSeq(out, "\n") {
		if l, ok := strings.CutPrefix(l, "[r0] "); ok {
			if m, ok := ParseMeasurement(l); ok {
				rows[Key{m.Test, m.Size}] = m.PGAS
			}
		}
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("no measurements in rank 0's output\n%s", out)
	}
	return rows, nil
}

// withEnv is base with the variables of set replaced (set's KEY=VALUE) or
// removed (set's KEY=).
func withEnv(base, set []string) []string {
	out := make([]string, 0, len(base)+len(set))
	for _, kv := range base {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.ContainsFunc(set, func(s string) bool { return strings.HasPrefix(s, name+"=") }) {
			out = append(out, kv)
		}
	}
	for _, kv := range set {
		if !strings.HasSuffix(kv, "=") {
			out = append(out, kv)
		}
	}
	return out
}

// Binaries returns dir when it is set, else builds gaspirun and gaspibench
// into a new directory (exiting with a message naming prog if they do not
// build); cleanup removes what was built.
func Binaries(prog, dir string) (string, func()) {
	if dir != "" {
		return dir, func() {}
	}
	d, cleanup, err := proctest.Build(prog, false, "./cmd/gaspirun", "./cmd/gaspibench")
	if err != nil {
		fmt.Fprintln(os.Stderr, prog+":", err)
		os.Exit(1)
	}
	return d, cleanup
}
