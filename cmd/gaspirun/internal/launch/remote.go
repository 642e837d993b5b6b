package launch

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gaspigo/gaspigo/cmd/gaspirun/internal/remote"
)

// remoteBackend starts each process on its host through a connector, the
// ssh client, running "gaspirun --remote-exec" there (remote.Exec), and
// talks to that over the connector's stdin and stdout (package remote's
// protocol). (Under Slurm,
// stepBackend runs the same remote side as the tasks of one srun step;
// a replacement started later runs in a step of its own, through a
// remoteBackend whose connector is srun: LauncherSlurm.)
type remoteBackend struct {
	kind LauncherKind
	cfg  Config
	// remote is the command that runs remote.Exec on a host.
	remote []string
	// program is what the remote side runs: an absolute path when the
	// program was given with a directory, else a name for its PATH.
	program string
	dir     string   // the remote side starts the program here if it exists
	forward []string // variables passed from here (ssh only)
	nonce   string

	mu    sync.Mutex
	procs []*remoteProc

	stop chan struct{}
	wg   sync.WaitGroup // the pinger
}

var _ backend = (*remoteBackend)(nil)

func newRemoteBackend(kind LauncherKind, cfg Config) (*remoteBackend, error) {
	remote, program, dir, err := remoteSide(cfg)
	if err != nil {
		return nil, err
	}
	b := &remoteBackend{kind: kind, cfg: cfg, remote: remote, program: program, dir: dir, stop: make(chan struct{})}
	if kind == LauncherSSH {
		b.forward = forwardedEnv(os.Environ())
	}
	var n [8]byte
	rand.Read(n[:])
	b.nonce = hex.EncodeToString(n[:])
	b.wg.Add(1)
	go func() { defer b.wg.Done(); b.pinger() }()
	return b, nil
}

// forwardedEnv picks the variables an ssh-started process gets from
// gaspirun's environment: the PGAS_ variables outside the contract (such
// as PGAS_LOG) and the Go runtime's knobs. The rest of its environment is
// the remote login's; -x adds more. (srun passes the whole environment
// itself.)
func forwardedEnv(environ []string) []string {
	var out []string
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case remote.IsContractVar(k):
		case strings.HasPrefix(k, "PGAS_"):
			out = append(out, kv)
		case k == "GOMAXPROCS", k == "GOGC", k == "GOMEMLIMIT", k == "GODEBUG", k == "GORACE", k == "GOTRACEBACK":
			out = append(out, kv)
		}
	}
	return out
}

// sshOptions are added when the ssh command is ssh itself: no terminal,
// never a prompt (N sessions cannot share one), and a bound on a dead
// connection: the client gives up after ServerAliveInterval *
// ServerAliveCountMax without an answer, and the process counts as lost.
var sshOptions = []string{"-T", "-o", "BatchMode=yes", "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3",
	"-o", "ConnectTimeout=30", "-o", "LogLevel=ERROR"}

// connector names the command that reaches a host, for messages.
func (b *remoteBackend) connector() string {
	if b.kind == LauncherSlurm {
		return "srun"
	}
	return "ssh"
}

// argv is the command that runs the remote side on host: ssh, or under
// Slurm a step of one task on that node (srunArgv).
func (b *remoteBackend) argv(host string) []string {
	if b.kind == LauncherSlurm {
		return b.srunArgv(host)
	}
	ssh := b.cfg.SSH
	if len(ssh) == 0 {
		ssh = []string{"ssh"}
	}
	out := append([]string{}, ssh...)
	if filepath.Base(ssh[0]) == "ssh" {
		out = append(out, sshOptions...)
	}
	return append(out, host, "exec "+shellJoin(b.remote))
}

// srunArgv is the srun command of a step of one task on node, for a
// replacement in a Slurm allocation. --overlap lets it share the CPUs the
// job's step still holds for its dead tasks (Slurm 20.11 and later);
// without it srun would wait for CPUs that step never gives back. As in
// the job's step, srun does not judge the task: gaspirun does.
func (b *remoteBackend) srunArgv(node string) []string {
	srun := b.cfg.Srun
	if len(srun) == 0 {
		srun = []string{"srun"}
	}
	out := append([]string{}, srun...)
	out = append(out, "--ntasks=1", "--nodes=1", "--nodelist="+node, "--overlap", "--kill-on-bad-exit=0", "--no-kill")
	return append(out, b.remote...)
}

func (b *remoteBackend) start(spec procSpec) (process, error) {
	defer spec.stderr.Close()
	hdr := &remote.Header{
		Proc: spec.proc, Host: spec.host, Nonce: b.nonce, Dir: b.dir, Program: b.program, Args: b.cfg.Args,
		Env: append(append([]string{}, b.forward...), spec.env...), RanksOnHost: spec.ranksOnHost,
		PingTimeout: b.cfg.PingTimeout, Grace: b.cfg.Grace,
	}
	header, err := hdr.Encode()
	if err != nil {
		spec.stdout.Close()
		return nil, fmt.Errorf("process %d: %v", spec.proc, err)
	}
	argv := b.argv(spec.host)
	cmd := exec.Command(argv[0], argv[1:]...)
	// The job's step placed its tasks from a host file; a one-task step
	// names its node instead.
	cmd.Env = connectorEnviron(b.kind == LauncherSlurm)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	inR, inW, err := os.Pipe()
	if err != nil {
		spec.stdout.Close()
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		spec.stdout.Close()
		return nil, err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, spec.stderr
	err = cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		spec.stdout.Close()
		return nil, fmt.Errorf("process %d on %s: %s: %v", spec.proc, spec.host, argv[0], err)
	}
	p := &remoteProc{b: b, cmd: cmd, host: spec.host, in: inW, out: outR, relayed: make(chan struct{})}
	go p.relay(bufio.NewReaderSize(outR, 64<<10), spec.stdout)
	// Normally the header fits the pipe and this returns at once; a larger
	// one waits for ssh to start reading.
	if err := p.write(header, headerWriteTimeout); err != nil {
		// The connector is not reading: it failed at once. Its exit says why.
		p.killClient()
	}
	b.mu.Lock()
	b.procs = append(b.procs, p)
	b.mu.Unlock()
	return p, nil
}

// pinger tells every remote side that gaspirun is alive.
func (b *remoteBackend) pinger() {
	every := b.cfg.PingInterval
	if every <= 0 || b.cfg.PingTimeout <= 0 {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
		}
		b.mu.Lock()
		procs := append([]*remoteProc{}, b.procs...)
		b.mu.Unlock()
		for _, p := range procs {
			if !p.ended.Load() {
				p.control([]byte(remote.PingLine))
			}
		}
	}
}

func (b *remoteBackend) close() {
	close(b.stop)
	b.wg.Wait()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.procs {
		if !p.ended.Load() {
			p.killClient()
		}
		p.closeInput()
	}
}

// remoteProc is one process started through a connector.
type remoteProc struct {
	b    *remoteBackend
	cmd  *exec.Cmd
	host string

	mu     sync.Mutex // serialises writes to in
	in     *os.File   // the connector's stdin: header, then control lines
	closed bool

	out     *os.File      // the connector's stdout, read by relay
	relayed chan struct{} // closed when relay has ended
	status  atomic.Pointer[exitInfo]
	ended   atomic.Bool
	killT   atomic.Pointer[time.Timer]
}

func (p *remoteProc) pid() int { return p.cmd.Process.Pid }

// headerWriteTimeout bounds the write of the header to a connector.
const headerWriteTimeout = 30 * time.Second

// control writes a control line to the remote side's stdin, waiting at
// most a second: a connector that stops reading must not hold up the
// front end.
func (p *remoteProc) control(b []byte) error { return p.write(b, time.Second) }

func (p *remoteProc) write(b []byte, timeout time.Duration) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return os.ErrClosed
	}
	p.in.SetWriteDeadline(time.Now().Add(timeout))
	_, err := p.in.Write(b)
	return err
}

func (p *remoteProc) closeInput() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.closed = true
		p.in.Close()
	}
}

// killClient kills the connector (and its process group): its session
// ends, and the remote side, seeing its stdin end, kills the program.
func (p *remoteProc) killClient() { syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL) }

// signal asks the remote side to signal the program's group. For SIGKILL,
// or when the remote side cannot be told, the connector itself is killed
// (at once, or after the grace period if the remote side may still obey),
// which ends the program too.
func (p *remoteProc) signal(sig syscall.Signal) {
	if p.ended.Load() {
		return
	}
	if err := p.control(remote.SignalLine(sig, "")); err != nil {
		p.killClient()
		return
	}
	if sig == syscall.SIGKILL && p.killT.Load() == nil {
		t := time.AfterFunc(p.b.cfg.Grace, func() {
			if !p.ended.Load() {
				p.killClient()
			}
		})
		if !p.killT.CompareAndSwap(nil, t) {
			t.Stop()
		}
	}
}

// relay copies the connector's stdout to w (the front end's pipe) line by
// line, taking out the remote side's status line.
func (p *remoteProc) relay(r *bufio.Reader, w *os.File) {
	defer close(p.relayed)
	defer w.Close()
	atStart := true
	for {
		// A line that fits the buffer comes whole, so a status line, short
		// and at the start of a line, is always one chunk.
		chunk, err := r.ReadSlice('\n')
		if len(chunk) > 0 {
			complete := chunk[len(chunk)-1] == '\n'
			if atStart && complete && bytes.HasPrefix(chunk, []byte(remote.StatusMark)) {
				if st, ok := remote.ParseStatus(strings.TrimSuffix(string(chunk), "\n"), p.b.nonce); ok {
					ex := exitInfoFrom(st)
					p.status.Store(&ex)
					continue
				}
			}
			w.Write(chunk)
			atStart = complete
		}
		if err != nil && err != bufio.ErrBufferFull {
			return
		}
	}
}

// wait waits for the connector, then for the status line. Without one
// the remote side was cut off (the host or the connection died, or the
// remote side was killed): the process counts as lost, like a killed one.
func (p *remoteProc) wait() exitInfo {
	p.cmd.Wait()
	t := time.NewTimer(max(p.b.cfg.Grace, time.Second))
	select {
	case <-p.relayed:
	case <-t.C:
		p.out.Close() // something else holds the connector's stdout
		<-p.relayed
	}
	t.Stop()
	p.ended.Store(true)
	if kt := p.killT.Load(); kt != nil {
		kt.Stop()
	}
	p.closeInput()
	if ex := p.status.Load(); ex != nil {
		return *ex
	}
	how := exitInfoOf(p.cmd.ProcessState)
	return exitInfo{Code: -1, Signal: syscall.SIGKILL, LostCode: how.code(),
		Lost: fmt.Sprintf("%s to %s %s without the process's exit status", p.b.connector(), p.host, how.how())}
}

// shellJoin quotes args for a POSIX shell (ssh hands the remote command to
// the login shell as one string).
func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:@%+,", r))
		}) < 0 {
			q[i] = a
			continue
		}
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// SplitCommand splits a command line such as `ssh -p 2222 -i "my key"`
// into words: blanks separate words; single quotes keep everything,
// double quotes keep all but \" and \\, and a backslash outside quotes
// keeps the next character.
func SplitCommand(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unclosed ' in %q", s)
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && (s[i+1] == '"' || s[i+1] == '\\') {
					i++
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, fmt.Errorf("unclosed \" in %q", s)
			}
			inWord = true
		case c == '\\':
			if i+1 < len(s) {
				i++
				cur.WriteByte(s[i])
			}
			inWord = true
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// connectorEnviron is the environment of an ssh or srun client: this
// process's, without the contract (srun would pass a stale PGAS_TOKEN
// on; the token goes only through stdin), and with noSlurmPlacement
// without the variables that place a step's tasks.
func connectorEnviron(noSlurmPlacement bool) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !remote.IsContractVar(k) && !(noSlurmPlacement && (k == "SLURM_HOSTFILE" || k == "SLURM_DISTRIBUTION")) {
			env = append(env, kv)
		}
	}
	return env
}

// remoteSide returns what every remote launcher runs on the other side:
// the gaspirun that starts the program there (--remote-exec, or
// Config.RemoteCommand), the program as an absolute path when it names
// one, and this directory to run it in.
func remoteSide(cfg Config) (remote []string, program, dir string, err error) {
	remote, program = cfg.RemoteCommand, cfg.Program
	if len(remote) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return nil, "", "", fmt.Errorf("cannot tell where gaspirun itself is (%v); give --remote-gaspirun PATH", err)
		}
		remote = []string{exe, "--remote-exec"}
	}
	if strings.Contains(program, "/") {
		if abs, err := filepath.Abs(program); err == nil {
			program = abs
		}
	}
	dir, _ = os.Getwd()
	return remote, program, dir, nil
}
