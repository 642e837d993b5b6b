package launch

import (
	"bufio"
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

// RemoteExec is "gaspirun --remote-exec", the remote side of a process
// started through ssh or srun (see remoteproto.go for the protocol). It
// reads the program, its arguments and its environment from stdin, starts
// the program in its own process group (stdin /dev/null, stderr straight
// to its own, stdout relayed), passes on signals that gaspirun sends, and
// kills the process group when stdin ends or gaspirun has been silent for
// the header's PingTimeout: nothing outlives the connection. When the
// program has exited it kills what is left of its process group, writes
// the status line and exits with the program's code (128+N for signal N).
// Messages go to stderr, prefixed "gaspirun --remote-exec".
func RemoteExec(stdin io.Reader, stdout, stderr *os.File) int {
	host, _ := os.Hostname()
	fail := func(format string, args ...any) int {
		fmt.Fprintf(stderr, "gaspirun --remote-exec on %s: %s\n", host, fmt.Sprintf(format, args...))
		return 2
	}
	in := bufio.NewReaderSize(stdin, 64<<10)
	type got struct {
		h   *remoteHeader
		err error
	}
	hc := make(chan got, 1)
	go func() {
		h, err := readHeader(in)
		hc <- got{h, err}
	}()
	var h *remoteHeader
	select {
	case g := <-hc:
		if g.err != nil {
			return fail("%v", g.err)
		}
		h = g.h
	case <-time.After(headerTimeout):
		return fail("no header on stdin within %v", headerTimeout)
	}
	if h.Step != nil {
		if err := h.resolveStep(os.Getenv("SLURM_PROCID")); err != nil {
			return fail("%v", err)
		}
	}
	if h.Host != "" {
		host = h.Host
	}

	// A PATH passed from gaspirun is where the program is looked up.
	for _, kv := range h.Env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			os.Setenv("PATH", v)
		}
	}
	report := func(ex exitInfo, lastNL bool) int {
		if !lastNL {
			stdout.Write([]byte{'\n'})
		}
		io.WriteString(stdout, statusLine(h.Nonce, ex))
		if ex.Signal != 0 {
			return 128 + int(ex.Signal)
		}
		return ex.Code
	}
	path, err := exec.LookPath(h.Program)
	if err != nil {
		fmt.Fprintf(stderr, "gaspirun --remote-exec on %s: cannot start process %d: %v\n", host, h.Proc, err)
		return report(exitInfo{Code: 127}, true)
	}
	cmd := exec.Command(path, h.Args...)
	cmd.Env = mergeEnviron(os.Environ(), h.Env, runtime.NumCPU(), h.RanksOnHost)
	if fi, err := os.Stat(h.Dir); err == nil && fi.IsDir() {
		cmd.Dir = h.Dir
	}
	// Its own process group, so that signals and the final kill reach what
	// it starts; and killed with this process, should this one be killed.
	// The parent-death signal belongs to the starting thread: keep it.
	runtime.LockOSThread()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	outR, outW, err := os.Pipe()
	if err != nil {
		return fail("%v", err)
	}
	cmd.Stdout, cmd.Stderr = outW, stderr
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	if err := cmd.Start(); err != nil {
		outW.Close()
		fmt.Fprintf(stderr, "gaspirun --remote-exec on %s: cannot start process %d: %v\n", host, h.Proc, err)
		return report(exitInfo{Code: 127}, true)
	}
	outW.Close()
	pgid := cmd.Process.Pid
	kill := func(sig syscall.Signal) { syscall.Kill(-pgid, sig) }

	// The relay of the program's stdout, remembering whether the last byte
	// ended a line, so the status line starts one.
	lastNL := make(chan bool, 1)
	go func() {
		nl := true
		buf := make([]byte, 64<<10)
		for {
			n, err := outR.Read(buf)
			if n > 0 {
				stdout.Write(buf[:n])
				nl = buf[n-1] == '\n'
			}
			if err != nil {
				lastNL <- nl
				return
			}
		}
	}()
	// The control channel.
	pings := make(chan struct{}, 1)
	gone := make(chan error, 1)
	go func() {
		for {
			line, err := readLimitedLine(in, 256)
			if err != nil {
				gone <- err
				return
			}
			switch cmdLine := string(line); {
			case cmdLine == "ping":
				select {
				case pings <- struct{}{}:
				default:
				}
			case strings.HasPrefix(cmdLine, "signal "):
				if sig, ok := parseSignal(cmdLine, h.Proc); ok {
					kill(sig)
				}
			}
		}
	}()
	waited := make(chan exitInfo, 1)
	go func() {
		cmd.Wait()
		waited <- exitInfoOf(cmd.ProcessState)
	}()

	var pingC <-chan time.Time
	var pingT *time.Timer
	if h.PingTimeout > 0 {
		pingT = time.NewTimer(h.PingTimeout)
		defer pingT.Stop()
		pingC = pingT.C
	}
	var ex exitInfo
loop:
	for {
		select {
		case ex = <-waited:
			break loop
		case <-pings:
			if pingT != nil {
				pingT.Reset(h.PingTimeout)
			}
		case <-pingC:
			fmt.Fprintf(stderr, "gaspirun --remote-exec on %s: no word from gaspirun for %v; killing process %d\n", host, h.PingTimeout, h.Proc)
			kill(syscall.SIGKILL)
			pingC = nil
		case <-gone:
			// gaspirun or the connection is gone: nobody will judge this
			// process any more, so it must not run on.
			kill(syscall.SIGKILL)
			gone = nil
		case s := <-sigs:
			kill(s.(syscall.Signal))
		}
	}
	// Whatever the program left in its group ends with it; then its stdout
	// has no writer left, unless something escaped the group.
	kill(syscall.SIGKILL)
	nl := true
	select {
	case nl = <-lastNL:
	case <-time.After(max(h.Grace, time.Second)):
		outR.Close()
		nl = <-lastNL
	}
	return report(ex, nl)
}
