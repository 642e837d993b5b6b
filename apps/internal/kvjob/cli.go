package kvjob

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/gaspigo/gaspigo/apps/internal/cli"
	"github.com/gaspigo/gaspigo/apps/internal/inject"
	"github.com/gaspigo/gaspigo/job"
	"github.com/gaspigo/gaspigo/kvshuffle"
	"github.com/gaspigo/gaspigo/pgas"
)

// Main runs a command's run function with a context that ends at SIGINT
// or SIGTERM and exits with its status: 0 for nil or flag.ErrHelp, an
// *ExitError's code (its message printed), 1 otherwise; 128+N for a run
// that failed after signal N ended the context (cli.SignalStatus).
func Main(name string, run func(ctx context.Context, args []string, stdout, stderr io.Writer) error) {
	ctx, stop := cli.SignalContext()
	err := cli.Interrupted(ctx, run(ctx, os.Args[1:], os.Stdout, os.Stderr))
	code := cli.SignalStatus(ctx, ExitCode(name, err, os.Stderr))
	stop()
	os.Exit(code)
}

// ExitCode is the exit status for err, which it prints on stderr on one
// line (cli.Status): a runtime error's exit code (job.ExitCode), 1 for
// another error.
func ExitCode(name string, err error, stderr io.Writer) int {
	var ee *ExitError
	if err != nil && !errors.As(err, &ee) {
		if code := job.ExitCode(err); code != 0 {
			err = &ExitError{Code: code, Msg: err.Error()}
		}
	}
	return cli.Status(name, err, stderr)
}

// Init joins the fault-tolerant job gaspirun started. It returns a nil
// runtime and nil error for a spare the job did not need (exit 0), and
// an *ExitError when joining failed.
func Init(ctx context.Context) (*pgas.Runtime, error) {
	rt, err := job.Init(ctx, job.Options{FaultTolerant: true})
	if err != nil {
		if ctx.Err() != nil {
			return nil, &ExitError{Code: 128 + int(syscall.SIGTERM)}
		}
		if code := job.ExitCode(err); code != 0 {
			return nil, &ExitError{Code: code, Msg: err.Error()}
		}
		return nil, nil
	}
	if rt.Rank() < 0 && rt.Fenced() {
		rt.Close()
		return nil, &ExitError{Code: job.ExitCode(pgas.ErrFenced), Msg: "this process was replaced before it started: " + pgas.ErrFenced.Error()}
	}
	return rt, nil
}

// Kill is a parsed --inject kill:rank=R,UNIT=N: SIGKILL rank R's own
// process when its progress reaches N (in the program's unit); or
// kill:rank=R,phase=ckpt-new: in Start, before the checkpointer's
// collective creation (ckpt.New), while the other ranks are inside it.
type Kill struct {
	Rank  int
	At    float64
	Unit  string
	Phase string // "": at progress At; "ckpt-new": in Start
}

// ParseKill parses kill:rank=R,UNIT=N and kill:rank=R,phase=ckpt-new;
// fraction: N is in [0, 1], else a whole number >= 0. Its errors wrap
// ErrInject (inject.ErrInject).
func ParseKill(s, unit string, fraction bool) (*Kill, error) {
	kind := inject.Count
	if fraction {
		kind = inject.Fraction
	}
	g := &inject.Grammar{Keys: []inject.Key{
		{Name: "rank", Kind: inject.Rank, Target: true},
		{Name: unit, Kind: kind},
		{Name: "phase", Kind: inject.Word, Words: []string{"ckpt-new"}},
	}, Want: fmt.Sprintf("kill:rank=R,%s=N or kill:rank=R,phase=ckpt-new", unit)}
	in, err := inject.Parse(s, g)
	if err != nil {
		return nil, err
	}
	if in.Has(unit) == in.Has("phase") {
		return nil, in.Errorf("give rank=R and %s=N (or phase=ckpt-new)", unit)
	}
	k := &Kill{Rank: in.Int("rank"), At: in.Float(unit), Unit: unit, Phase: in.Text("phase")}
	if !fraction && in.Has(unit) {
		k.At = float64(in.Int(unit))
	}
	return k, nil
}

// Check reports an error when the kill names a rank the job lacks.
func (k *Kill) Check(size int) error {
	if k != nil && k.Rank >= size {
		return &ExitError{Code: 2, Msg: fmt.Sprintf("--inject rank=%d: the job has ranks 0..%d", k.Rank, size-1)}
	}
	return nil
}

// Armed reports whether the kill at progress At is for this process: rank
// is its rank, and it is not a promoted spare (a spare taking over never
// fires it).
func (k *Kill) Armed(rt *pgas.Runtime) bool {
	return k.armedIn(rt, "")
}

// armedIn is Armed for the kills of phase.
func (k *Kill) armedIn(rt *pgas.Runtime, phase string) bool {
	return k != nil && k.Phase == phase && k.Rank == rt.Rank() && !rt.StartedAsSpare()
}

// Fire prints what it does on out and sends SIGKILL to this process.
func (k *Kill) Fire(out io.Writer, rank int, progress string) { inject.Fire(out, rank, progress) }

// Command picks the command of args among names: it returns the command,
// or a nil command with nil for help (usage printed on stdout) or a usage
// error (one line, status 2) for a missing or unknown one.
func Command(args []string, usage string, names []string, stdout, stderr io.Writer) (string, error) {
	switch {
	case len(args) == 0:
		return "", Usage("give a command: %s (--help says more)", strings.Join(names, ", "))
	case slices.Contains(names, args[0]):
		return args[0], nil
	case slices.Contains([]string{"-h", "-help", "--help", "help"}, args[0]):
		fmt.Fprint(stdout, usage)
		return "", nil
	case cli.IsVersion(args[0]):
		cli.PrintVersion(stdout, filepath.Base(os.Args[0]))
		return "", nil
	}
	return "", Usage("unknown command %q: give %s (--help says more)", args[0], strings.Join(names, ", "))
}

// Parse parses fs over args, which must hold flags only. A bad flag is a
// usage error (one line naming it, status 2; cli.Parse); --help prints
// the flags on os.Stdout and returns flag.ErrHelp (status 0).
func Parse(fs *flag.FlagSet, args []string) error {
	pos, err := cli.Parse(fs, args, os.Stdout)
	if err == nil && len(pos) > 0 {
		err = Usage("unexpected argument %q: flags only", pos[0])
	}
	return err
}

// ShuffleConfig is kvshuffle.DefaultConfig with frames of slot bytes (0:
// the default), a --memory budget of mem bytes (runs of a quarter of
// it), and spill directory spill ("" keeps the default). A budget the
// shuffle refuses is a usage error.
func ShuffleConfig(mem int64, slot int, spill string) (kvshuffle.Config, error) {
	c := kvshuffle.DefaultConfig()
	if slot > 0 {
		c.SlotSize = slot
	}
	c.MemoryBudget = mem
	c.RunSize = max(min(c.RunSize, mem/4), int64(c.SlotSize))
	if spill != "" {
		c.SpillDir = spill
	}
	if err := c.Validate(); err != nil {
		return c, Usage("--memory %d: %v", mem, err)
	}
	return c, nil
}
