package launch

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"

	"github.com/gaspigo/gaspigo/cmd/gaspirun/internal/remote"
)

// backend starts the job's processes and signals them. Everything else,
// the rendezvous, the output prefixes, judging exits and the teardown, is
// the front end's (job), so every back end ends a job the same way.
type backend interface {
	// start starts one process. It owns spec.stdout and spec.stderr from
	// the call on, and closes them once the process can no longer write.
	start(spec procSpec) (process, error)
	// close ends whatever the back end still runs for the job (clients of
	// remote processes, its own goroutines) and waits for it. Called once,
	// after every process has ended or failed to start.
	close()
}

// procSpec is one process to start.
type procSpec struct {
	proc int
	// host is where to run it: "" for this machine, else a host name from
	// the hostfile or the Slurm allocation.
	host string
	// env holds the variables gaspirun gives the process: Config.Env, then
	// the contract. The back end adds the base environment.
	env []string
	// ranksOnHost is the number of ranks placed on the process's host, for
	// its GOMAXPROCS.
	ranksOnHost int
	// stdout and stderr are the write ends of the pipes the front end
	// reads the process's output from.
	stdout, stderr *os.File
	// stdin, when not nil, is what the process reads (Config.StdinTo):
	// gaspirun's own, or the read end of a copy's pipe, which the back
	// end closes here once the process has it (ownStdin). Only a local
	// process gets one.
	stdin    *os.File
	ownStdin bool
}

// process is one started process, as its back end sees it.
type process interface {
	// pid is the local process gaspirun started: the program itself, or
	// the ssh or srun client that runs it elsewhere.
	pid() int
	// signal sends sig to the process and whatever it started. It never
	// blocks for long and may be called after the process ended.
	signal(sig syscall.Signal)
	// wait blocks until the process has ended and says how. Called once.
	wait() exitInfo
}

// localBackend forks and execs the processes on this machine.
type localBackend struct {
	path string // the program, resolved on PATH
	args []string
	nice int // added to each process's niceness (childNice)

	once    sync.Once
	spawner chan<- func() // startSpawner's, once nice > 0 started a process
}

// oversubscribed is how many processes per core a local job may run
// before gaspirun lowers their priority below its own: the point where
// the processes stretch their timeouts too (job/stretch.go).
const oversubscribed = 4

// oversubscribedNice is the niceness gaspirun adds to the processes of a
// local job beyond oversubscribed processes per core. gaspirun serves the
// rendezvous, reads every process's output and judges the exits; among
// 2,050 processes on 2 cores that each weigh as much as it does, it got
// so little of the machine that the registrations took more than 140 s
// and timed out (exit 69). Ten levels give it about nine times a
// process's share; among themselves the processes share as before.
const oversubscribedNice = 10

// childNice is the niceness added to the processes of a local job of
// procs processes on cpus cores.
func childNice(procs, cpus int) int {
	if procs > oversubscribed*max(cpus, 1) {
		return oversubscribedNice
	}
	return 0
}

var _ backend = (*localBackend)(nil)

func (b *localBackend) start(spec procSpec) (process, error) {
	cmd := exec.Command(b.path, b.args...)
	cmd.Env = childEnviron(spec.env, spec.ranksOnHost)
	// Its own process group: a teardown kills the process and whatever it
	// started, and the terminal's Ctrl-C reaches only gaspirun, which then
	// tears down in order. No parent-death signal: the processes outlive a
	// killed launcher.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout, cmd.Stderr = spec.stdout, spec.stderr
	if spec.stdin != nil {
		cmd.Stdin = spec.stdin // a file: the process reads it straight, no copy here
	}
	err := b.spawn(cmd)
	spec.stdout.Close()
	spec.stderr.Close()
	if spec.ownStdin {
		spec.stdin.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("process %d (%s): %v", spec.proc, b.path, err)
	}
	return &localProc{cmd: cmd}, nil
}

func (b *localBackend) close() {
	if b.spawner != nil {
		close(b.spawner)
	}
}

// spawn starts cmd; with b.nice, from a thread of gaspirun's whose
// niceness is b.nice above the rest of it, so that the process, and every
// thread it makes, starts with that niceness (a child inherits its
// priority from the thread that forked it; renicing it afterwards would
// miss the threads it made meanwhile).
func (b *localBackend) spawn(cmd *exec.Cmd) error {
	if b.nice <= 0 {
		return cmd.Start()
	}
	b.once.Do(func() { b.spawner = startSpawner(b.nice) })
	done := make(chan error, 1)
	b.spawner <- func() { done <- cmd.Start() }
	return <-done
}

// startSpawner starts the goroutine that runs the functions sent on the
// returned channel, on an OS thread of its own made nice levels nicer
// (best effort: where the system refuses, the processes start with
// gaspirun's priority, which costs speed, not correctness). Closing the
// channel ends it, and the thread with it.
func startSpawner(nice int) chan<- func() {
	ch := make(chan func())
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		own, err := syscall.Getpriority(syscall.PRIO_PROCESS, 0)
		if err == nil {
			// The raw getpriority returns 20 - nice on Linux;
			// PRIO_PROCESS with a thread id sets that thread's.
			_ = syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), min(20-own+nice, 19))
		}
		for f := range ch {
			f()
		}
	}()
	return ch
}

type localProc struct{ cmd *exec.Cmd }

func (p *localProc) pid() int { return p.cmd.Process.Pid }

// signal signals the process group, whether or not its leader has exited
// (what it started may still run).
func (p *localProc) signal(sig syscall.Signal) { syscall.Kill(-p.cmd.Process.Pid, sig) }

func (p *localProc) wait() exitInfo {
	p.cmd.Wait()
	return exitInfoOf(p.cmd.ProcessState)
}

func exitInfoOf(ps *os.ProcessState) exitInfo { return exitInfoFrom(remote.StatusOf(ps)) }

// childEnviron is this process's environment without the contract's
// variables (PGAS_LOG, PGAS_ADVERTISE_HOST and the like pass through),
// then GOMAXPROCS unless the user set it, then env.
func childEnviron(env []string, ranksOnHost int) []string {
	return remote.MergeEnviron(os.Environ(), env, runtime.NumCPU(), ranksOnHost)
}
