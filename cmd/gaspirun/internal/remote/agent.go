package remote

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// headerTimeout bounds the wait for the header on stdin.
const headerTimeout = 60 * time.Second

// Exec is "gaspirun --remote-exec", the remote side of a process started
// through ssh or srun (see protocol.go for the protocol). It reads the
// program, its arguments and its environment from stdin, starts the
// program in its own process group (stdin /dev/null, stderr straight to
// its own, stdout relayed), passes on signals that gaspirun sends, and
// kills the process group when stdin ends or gaspirun has been silent for
// the header's PingTimeout: nothing outlives the connection. When the
// program has exited it kills what is left of its process group, writes
// the status line and exits with the program's code (128+N for signal N).
// Messages go to stderr, prefixed "gaspirun --remote-exec".
func Exec(stdin io.Reader, stdout, stderr *os.File) int {
	a := &agent{in: bufio.NewReaderSize(stdin, 64<<10), stdout: stdout, stderr: stderr}
	a.host, _ = os.Hostname()
	if err := a.readHeader(); err != nil {
		return a.fail(err)
	}
	a.usePath()
	p, err := a.start()
	var cannot *cannotStart
	switch {
	case errors.As(err, &cannot):
		a.say("cannot start process %d: %v", a.h.Proc, cannot.err)
		return a.report(Status{Code: 127}, true)
	case err != nil:
		return a.fail(err)
	}
	go p.relay(a.stdout)
	go p.wait()
	pings, gone := a.control(p)
	st := a.supervise(p, pings, gone)
	// Whatever the program left in its group ends with it; then its stdout
	// has no writer left, unless something escaped the group.
	p.kill(syscall.SIGKILL)
	return a.report(st, p.relayed(a.h.Grace))
}

// agent is the remote side of one process, or of one task of a step.
type agent struct {
	in             *bufio.Reader // the header, then the control lines
	stdout, stderr *os.File
	host           string  // for messages: the header's, or this machine's name
	h              *Header // read by readHeader
}

// say writes a message to stderr.
func (a *agent) say(format string, args ...any) {
	fmt.Fprintf(a.stderr, "gaspirun --remote-exec on %s: %s\n", a.host, fmt.Sprintf(format, args...))
}

// fail says err and is the exit code of a remote side that could not do
// its work.
func (a *agent) fail(err error) int {
	a.say("%v", err)
	return 2
}

// readHeader reads the header within headerTimeout and, in a step, makes
// it this task's.
func (a *agent) readHeader() error {
	type got struct {
		h   *Header
		err error
	}
	hc := make(chan got, 1)
	go func() {
		h, err := ReadHeader(a.in)
		hc <- got{h, err}
	}()
	select {
	case g := <-hc:
		if g.err != nil {
			return g.err
		}
		a.h = g.h
	case <-time.After(headerTimeout):
		return fmt.Errorf("no header on stdin within %v", headerTimeout)
	}
	if a.h.Step != nil {
		if err := a.h.ResolveStep(os.Getenv("SLURM_PROCID")); err != nil {
			return err
		}
	}
	if a.h.Host != "" {
		a.host = a.h.Host
	}
	return nil
}

// usePath makes a PATH passed from gaspirun the one the program is looked
// up on.
func (a *agent) usePath() {
	for _, kv := range a.h.Env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			os.Setenv("PATH", v)
		}
	}
}

// cannotStart is a program that could not be started: the remote side
// reports it as exit 127, as a shell does.
type cannotStart struct{ err error }

func (e *cannotStart) Error() string { return e.err.Error() }

// program is the process the remote side started.
type program struct {
	cmd    *exec.Cmd
	out    *os.File       // the read end of its stdout
	sigs   chan os.Signal // the signals this process receives, passed on
	lastNL chan bool      // relay's end: whether the last byte ended a line
	waited chan Status
}

// start starts the program in its own process group, its stdout into a
// pipe.
func (a *agent) start() (*program, error) {
	path, err := exec.LookPath(a.h.Program)
	if err != nil {
		return nil, &cannotStart{err}
	}
	cmd := exec.Command(path, a.h.Args...)
	cmd.Env = MergeEnviron(os.Environ(), a.h.Env, runtime.NumCPU(), a.h.RanksOnHost)
	if fi, err := os.Stat(a.h.Dir); err == nil && fi.IsDir() {
		cmd.Dir = a.h.Dir
	}
	// Its own process group, so that signals and the final kill reach what
	// it starts; and killed with this process, should this one be killed.
	// The parent-death signal belongs to the starting thread: keep it.
	runtime.LockOSThread()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = outW, a.stderr
	p := &program{cmd: cmd, out: outR, sigs: make(chan os.Signal, 4), lastNL: make(chan bool, 1), waited: make(chan Status, 1)}
	signal.Notify(p.sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	err = cmd.Start()
	outW.Close()
	if err != nil {
		return nil, &cannotStart{err}
	}
	return p, nil
}

// kill signals the program's process group.
func (p *program) kill(sig syscall.Signal) { syscall.Kill(-p.cmd.Process.Pid, sig) }

// wait waits for the program's end.
func (p *program) wait() {
	p.cmd.Wait()
	p.waited <- StatusOf(p.cmd.ProcessState)
}

// relay copies the program's stdout to w, remembering whether the last
// byte ended a line, so that the status line starts one.
func (p *program) relay(w io.Writer) {
	nl := true
	buf := make([]byte, 64<<10)
	for {
		n, err := p.out.Read(buf)
		if n > 0 {
			w.Write(buf[:n])
			nl = buf[n-1] == '\n'
		}
		if err != nil {
			p.lastNL <- nl
			return
		}
	}
}

// relayed waits for the relay to end, for at most the grace period (at
// least a second): after that something that escaped the group holds the
// program's stdout, which is then closed. It says whether the output
// ended a line.
func (p *program) relayed(grace time.Duration) bool {
	select {
	case nl := <-p.lastNL:
		return nl
	case <-time.After(max(grace, time.Second)):
		p.out.Close()
		return <-p.lastNL
	}
}

// control reads the control lines: each ping is sent on pings, signals
// for this process go to the program's group, and the end of stdin (or a
// bad line) is sent on gone.
func (a *agent) control(p *program) (pings <-chan struct{}, gone <-chan error) {
	pc := make(chan struct{}, 1)
	gc := make(chan error, 1)
	go func() {
		for {
			line, err := readLimitedLine(a.in, 256)
			if err != nil {
				gc <- err
				return
			}
			switch cmdLine := string(line); {
			case cmdLine+"\n" == PingLine:
				select {
				case pc <- struct{}{}:
				default:
				}
			case strings.HasPrefix(cmdLine, "signal "):
				if sig, ok := ParseSignal(cmdLine, a.h.Proc); ok {
					p.kill(sig)
				}
			}
		}
	}()
	return pc, gc
}

// supervise passes on what gaspirun asks for until the program has
// exited, and kills the program's group when gaspirun is gone or silent
// for the header's PingTimeout.
func (a *agent) supervise(p *program, pings <-chan struct{}, gone <-chan error) Status {
	var pingC <-chan time.Time
	var pingT *time.Timer
	if a.h.PingTimeout > 0 {
		pingT = time.NewTimer(a.h.PingTimeout)
		defer pingT.Stop()
		pingC = pingT.C
	}
	for {
		select {
		case st := <-p.waited:
			return st
		case <-pings:
			if pingT != nil {
				pingT.Reset(a.h.PingTimeout)
			}
		case <-pingC:
			a.say("no word from gaspirun for %v; killing process %d", a.h.PingTimeout, a.h.Proc)
			p.kill(syscall.SIGKILL)
			pingC = nil
		case <-gone:
			// gaspirun or the connection is gone: nobody will judge this
			// process any more, so it must not run on.
			p.kill(syscall.SIGKILL)
			gone = nil
		case s := <-p.sigs:
			p.kill(s.(syscall.Signal))
		}
	}
}

// report writes the status line, at the start of a line, and returns the
// remote side's exit code: the program's, 128+N for signal N.
func (a *agent) report(st Status, lastNL bool) int {
	if !lastNL {
		a.stdout.Write([]byte{'\n'})
	}
	io.WriteString(a.stdout, StatusLine(a.h.Nonce, st))
	return st.ShellCode()
}
