package clustertier

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
)

// The K-means workload of every job here: a few seconds on 2 cores, with
// room (40 iterations, --tol 0 so that none are skipped) for a loss in the
// middle.
var workload = []string{"--generate", "200000", "--dim", "10", "--k", "20", "--max-iter", "40", "--tol", "0", "--ckpt-every", "5"}

const (
	ranks  = 4
	spares = 2
	// jobDeadline bounds every job, generously for a busy 2-core machine.
	jobDeadline = 90 * time.Second
)

// bins are the image's binaries, built by deploy/build.sh (static, as in
// the container image).
var bins struct {
	dir                        string
	gaspirun, gaspipod, kmeans string
	err                        error
}

var imagePkgs = []string{"./cmd/gaspirun", "./cmd/gaspipod", "./apps/kmeans/cmd/kmeans"}

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	flag.Parse()
	if runtime.GOOS != "linux" || testing.Short() {
		bins.err = errors.New("cluster tests need Linux and no -short")
		return m.Run()
	}
	root, err := proctest.ModuleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	dir, err := os.MkdirTemp("", "clustertier-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	// Readable by the Slurm daemons and the unprivileged pods alike.
	os.Chmod(dir, 0o755)
	cmd := exec.Command(filepath.Join(root, "deploy", "build.sh"), append([]string{dir}, imagePkgs...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "deploy/build.sh: %v\n%s", err, out)
		return 1
	}
	bins.dir = dir
	bins.gaspirun = filepath.Join(dir, "gaspirun")
	bins.gaspipod = filepath.Join(dir, "gaspipod")
	bins.kmeans = filepath.Join(dir, "kmeans")
	return m.Run()
}

func needBins(t *testing.T) {
	t.Helper()
	if bins.err != nil {
		t.Skip(bins.err)
	}
}

// TestImageBinariesAreStatic checks what the image's final stage relies on:
// deploy/build.sh makes binaries that need no loader and no shared library.
func TestImageBinariesAreStatic(t *testing.T) {
	needBins(t)
	for _, b := range []string{bins.gaspirun, bins.gaspipod, bins.kmeans} {
		f, err := elf.Open(b)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
				t.Errorf("%s has a %v program header: it is dynamically linked", filepath.Base(b), p.Type)
			}
		}
		if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
			t.Errorf("%s needs shared libraries %v", filepath.Base(b), libs)
		}
		f.Close()
	}
}

var (
	finalRE = regexp.MustCompile(`(?m)^centroids sha256=([0-9a-f]{64}) sse=\S+ iterations=(\d+)$`)
	iterRE  = regexp.MustCompile(`(?m)^iter\s+(\d+)\s`)
)

// finals returns every final line's checksum in out.
func finals(out string) []string {
	var sums []string
	for _, m := range finalRE.FindAllStringSubmatch(out, -1) {
		sums = append(sums, m[1])
	}
	return sums
}

// lastIter is the highest iteration line in out, or -1.
func lastIter(out string) int {
	it := -1
	for _, m := range iterRE.FindAllStringSubmatch(out, -1) {
		var n int
		fmt.Sscan(m[1], &n)
		it = max(it, n)
	}
	return it
}

var reference struct {
	mu   sync.Mutex
	sums map[string]string // by the workload's arguments
}

// referenceSum is the failure-free job's checksum for workload, from
// gaspirun's local mode with the same ranks and spares.
func referenceSum(t *testing.T) string { return referenceSumOf(t, workload) }

// referenceSumOf is referenceSum for the K-means arguments args.
func referenceSumOf(t *testing.T, args []string) string {
	t.Helper()
	reference.mu.Lock()
	defer reference.mu.Unlock()
	key := strings.Join(args, " ")
	if sum, ok := reference.sums[key]; ok {
		return sum
	}
	ctx, cancel := context.WithTimeout(context.Background(), jobDeadline)
	defer cancel()
	gargs := append([]string{"-n", fmt.Sprint(ranks), "--spares", fmt.Sprint(spares), "--timeout", jobDeadline.String(), "--quiet", "--", bins.kmeans}, args...)
	out, err := exec.CommandContext(ctx, bins.gaspirun, gargs...).CombinedOutput()
	if err != nil {
		t.Fatalf("failure-free gaspirun run: %v\n%s", err, out)
	}
	var sums []string
	for _, l := range strings.Split(string(out), "\n") {
		if _, rest, ok := strings.Cut(l, "] "); ok {
			if m := finalRE.FindStringSubmatch(rest); m != nil {
				sums = append(sums, m[1])
			}
		}
	}
	if len(sums) != 1 {
		t.Fatalf("failure-free gaspirun run printed %d final lines\n%s", len(sums), out)
	}
	if reference.sums == nil {
		reference.sums = map[string]string{}
	}
	reference.sums[key] = sums[0]
	return sums[0]
}

// proc is one process of a job (a pod, a Slurm client), started by the
// test on proctest's runner.
type proc struct {
	name string
	cmd  *exec.Cmd
	job  *proctest.Job
}

// start runs cmd, collecting its combined output.
func start(t *testing.T, name string, cmd *exec.Cmd) *proc {
	t.Helper()
	cmd.WaitDelay = 5 * time.Second
	j, err := proctest.Start(proctest.JobConfig{}, cmd)
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	return &proc{name: name, cmd: cmd, job: j}
}

// wait waits for p to end, for at most d; false if it did not.
func (p *proc) wait(d time.Duration) bool { return p.job.WaitEnd(d) }

// output is p's combined output so far.
func (p *proc) output() string { return p.job.Output() }

// wall is p's run time, once it ended.
func (p *proc) wall() time.Duration {
	_, _, end, _ := p.job.Procs()[0].Exit()
	return end.Sub(p.job.Begin())
}

// exitCode is the code a container runtime reports: 128+signal for a
// process killed by a signal.
func (p *proc) exitCode() int {
	code, sig, _, _ := p.job.Procs()[0].Exit()
	if sig != 0 {
		return 128 + int(sig)
	}
	return code
}

// noRaft drops the Raft library's lines from out, for failure messages.
func noRaft(out string) string {
	var b strings.Builder
	for _, l := range strings.Split(out, "\n") {
		if !strings.Contains(l, "component=raft") {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// checkNoTokenInArgv fails the test if token is on the command line of any
// live process.
func checkNoTokenInArgv(t *testing.T, token string) {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(token)) {
			t.Errorf("pid %s has the job token in its argv: %q", e.Name(), bytes.ReplaceAll(b, []byte{0}, []byte{' '}))
		}
	}
}

// runScript runs a cluster script (deploy/*/local-cluster.sh) with verb
// and env, within d, and returns its output.
func runScript(script string, env []string, d time.Duration, verb string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, script, verb)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// logTails returns the last lines of the daemons' logs in dir/log, for
// failure messages: of the files named, or of every file there.
func logTails(dir string, names ...string) string {
	if len(names) == 0 {
		ents, _ := os.ReadDir(filepath.Join(dir, "log"))
		for _, e := range ents {
			names = append(names, e.Name())
		}
	}
	var b strings.Builder
	for _, f := range names {
		data, err := os.ReadFile(filepath.Join(dir, "log", f))
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		fmt.Fprintf(&b, "--- %s (last lines)\n%s\n", f, strings.Join(lines[max(0, len(lines)-15):], "\n"))
	}
	return b.String()
}
