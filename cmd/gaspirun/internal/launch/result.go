package launch

import (
	"syscall"
	"time"
)

// Result is how a job ended.
type Result struct {
	// ExitCode is what gaspirun exits with: 0, the failing process's exit
	// code, 128+signal for a process killed under --on-death abort,
	// ExitTimeout, ExitInterrupted (or 128+signal of the Interrupt), or
	// ExitLost.
	ExitCode int
	// Reason says why the job failed; empty on success.
	Reason string
	// TimedOut and Interrupted say the job was cut short.
	TimedOut, Interrupted bool
	// Procs is one entry per process gaspirun started, by process id: the
	// job's own, then the replacements (--respawn). Joiners started by
	// hand are not listed: gaspirun has no process of theirs.
	Procs []ProcResult
	// Wall is the time from the first start to the last exit.
	Wall time.Duration
	// Summary is the final line gaspirun prints (without "gaspirun: ").
	Summary string
}

// ProcResult is how one process ended.
type ProcResult struct {
	Proc    int
	Pid     int // the local process: the program, or its ssh or srun client
	Host    string
	Label   string         // output prefix at the end, e.g. "r2", "s5"
	Code    int            // exit code; -1 when killed by a signal
	Signal  syscall.Signal // 0 when it exited
	Stopped bool           // gaspirun signalled it (teardown or idle spare)
}
