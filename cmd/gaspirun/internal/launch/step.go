package launch

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gaspigo/gaspigo/cmd/gaspirun/internal/remote"
)

// stepBackend runs every process of a Slurm job as one task of a single
// srun step, "srun --ntasks=N+K ... gaspirun --remote-exec", instead of
// one step per process: one request to slurmctld for the whole job, one
// srun client on this machine. Task t is process t, so task t runs on the
// host the placement gave process t: srun reads the tasks' nodes, in
// order, from SLURM_HOSTFILE (--distribution=arbitrary), a file gaspirun
// writes. Ranks are tasks 0..N-1 and spares tasks N..N+K-1, on the hosts
// Place chose for them.
//
// srun broadcasts its stdin to every task (--input=all): one header for
// all (remote.Header's Step lists each process's host, and each task takes
// its process id from SLURM_PROCID), one "ping" line a second for all,
// and "signal N LIST" lines naming the processes (as ranges) that a
// signal is for. srun prefixes every line of a task's output with its
// task id (--label): the relays hand each line to its process's pipes and
// take out its status line. A task that ends without a status line (srun
// says "task T: Killed" or the like, or srun itself ends) counts as lost.
//
// --kill-on-bad-exit=0 and --no-kill keep the step going when a task
// fails or a node is lost: gaspirun, not srun, judges the job. A process
// that must be killed at once, or whose remote side cannot be told, can
// only be killed with the whole step; gaspirun does that only when it
// tears the job down anyway.
type stepBackend struct {
	cfg    Config
	nprocs int
	remote []string
	notice func(string) // srun's own lines

	program, dir, nonce string

	mu       sync.Mutex
	specs    []procSpec
	procs    []*stepProc
	cmd      *exec.Cmd
	in       *os.File // srun's stdin, broadcast to every task
	inClosed bool
	hostfile string

	sigMu   sync.Mutex
	pending map[syscall.Signal][]int // signals not sent yet, by process
	wake    chan struct{}

	stop     chan struct{}
	srunDone chan struct{} // closed when srun and its relays have ended
	wg       sync.WaitGroup
}

var _ backend = (*stepBackend)(nil)

func newStepBackend(cfg Config, nprocs int, notice func(string)) (*stepBackend, error) {
	remote, program, dir, err := remoteSide(cfg)
	if err != nil {
		return nil, err
	}
	b := &stepBackend{cfg: cfg, nprocs: nprocs, remote: remote, program: program, dir: dir, notice: notice,
		pending: map[syscall.Signal][]int{}, wake: make(chan struct{}, 1), stop: make(chan struct{}), srunDone: make(chan struct{})}
	var n [8]byte
	rand.Read(n[:])
	b.nonce = hex.EncodeToString(n[:])
	return b, nil
}

// stepProc is one task of the step.
type stepProc struct {
	b              *stepBackend
	id             int
	stdout, stderr *os.File // the front end's pipes
	done           chan struct{}
	once           sync.Once
	info           exitInfo
	ended          atomic.Bool
	lostT          atomic.Pointer[time.Timer]
	srunSaid       atomic.Pointer[string] // srun's line on how the task ended
}

func (p *stepProc) pid() int {
	p.b.mu.Lock()
	defer p.b.mu.Unlock()
	if p.b.cmd == nil || p.b.cmd.Process == nil {
		return 0
	}
	return p.b.cmd.Process.Pid
}

func (p *stepProc) wait() exitInfo {
	<-p.done
	return p.info
}

// finish records how the process ended, once.
func (p *stepProc) finish(ex exitInfo) {
	p.once.Do(func() {
		p.info = ex
		p.ended.Store(true)
		if t := p.lostT.Load(); t != nil {
			t.Stop()
		}
		close(p.done)
	})
}

// signal queues sig for the process; the signaller sends the queued
// signals in one line each. A SIGKILL that has not ended the process
// after the grace period kills the whole step.
func (p *stepProc) signal(sig syscall.Signal) {
	if p.ended.Load() {
		return
	}
	b := p.b
	b.sigMu.Lock()
	b.pending[sig] = append(b.pending[sig], p.id)
	b.sigMu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
	if sig == syscall.SIGKILL {
		time.AfterFunc(b.cfg.Grace, func() {
			if !p.ended.Load() {
				b.killStep()
			}
		})
	}
}

func (b *stepBackend) start(spec procSpec) (process, error) {
	p := &stepProc{b: b, id: spec.proc, stdout: spec.stdout, stderr: spec.stderr, done: make(chan struct{})}
	b.mu.Lock()
	b.specs = append(b.specs, spec)
	b.procs = append(b.procs, p)
	last := len(b.procs) == b.nprocs
	b.mu.Unlock()
	if !last {
		return p, nil
	}
	if err := b.launch(); err != nil {
		// The other processes never ran: their waits return at once.
		for _, q := range b.procs {
			q.stdout.Close()
			q.stderr.Close()
			q.finish(exitInfo{Code: -1, Signal: syscall.SIGKILL, LostCode: 127, Lost: "srun did not start: " + err.Error()})
		}
		close(b.srunDone)
		return nil, err
	}
	return p, nil
}

// stepHeader is the header every task gets: the environment common to
// all, and each process's host and ranks on its host.
func (b *stepBackend) stepHeader() (*remote.Header, error) {
	common := func(env []string) []string {
		return slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
			return strings.HasPrefix(kv, "PGAS_PROC=") || strings.HasPrefix(kv, "PGAS_HOST=") || isRankVar(kv)
		})
	}
	env := common(b.specs[0].env)
	st := &remote.StepInfo{Hosts: make([]string, b.nprocs), RanksOnHost: make([]int, b.nprocs), Vars: make([][]string, b.nprocs)}
	for i, s := range b.specs {
		if s.proc != i {
			return nil, fmt.Errorf("process %d started as the %d-th", s.proc, i)
		}
		if i > 0 && !slices.Equal(common(s.env), env) {
			return nil, fmt.Errorf("process %d's environment differs from process 0's beyond PGAS_PROC and PGAS_HOST", i)
		}
		st.Hosts[i], st.RanksOnHost[i] = s.host, s.ranksOnHost
		st.Vars[i] = slices.DeleteFunc(slices.Clone(s.env), func(kv string) bool { return !isRankVar(kv) })
	}
	return &remote.Header{Proc: -1, Nonce: b.nonce, Dir: b.dir, Program: b.program, Args: b.cfg.Args, Env: env,
		PingTimeout: b.cfg.PingTimeout, Grace: b.cfg.Grace, Step: st}, nil
}

// argv is the srun command of the step.
func (b *stepBackend) argv() []string {
	srun := b.cfg.Srun
	if len(srun) == 0 {
		srun = []string{"srun"}
	}
	out := append([]string{}, srun...)
	out = append(out, "--ntasks="+strconv.Itoa(b.nprocs), "--distribution=arbitrary", "--kill-on-bad-exit=0", "--no-kill",
		"--input=all", "--label")
	return append(out, b.remote...)
}

func (b *stepBackend) launch() error {
	h, err := b.stepHeader()
	if err != nil {
		return err
	}
	header, err := h.Encode()
	if err != nil {
		return err
	}
	f, err := os.CreateTemp("", "gaspirun-hosts-*")
	if err != nil {
		return err
	}
	b.hostfile = f.Name()
	_, err = f.WriteString(strings.Join(h.Step.Hosts, "\n") + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	argv := b.argv()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(connectorEnviron(true), "SLURM_HOSTFILE="+b.hostfile)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	inR, inW, err := os.Pipe()
	if err != nil {
		return err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		return err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	err = cmd.Start()
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		return fmt.Errorf("%s: %v", argv[0], err)
	}
	b.mu.Lock()
	b.cmd, b.in = cmd, inW
	b.mu.Unlock()
	var relays sync.WaitGroup
	relays.Add(2)
	go func() { defer relays.Done(); b.relay(outR, streamStdout) }()
	go func() { defer relays.Done(); b.relay(errR, streamStderr) }()
	b.wg.Add(3)
	go func() {
		defer b.wg.Done()
		b.waitStep(cmd, &relays, outR, errR)
	}()
	go func() { defer b.wg.Done(); b.pinger() }()
	go func() { defer b.wg.Done(); b.signaller() }()
	// Normally the header fits the pipe and this returns at once.
	if err := b.write(header, headerWriteTimeout); err != nil {
		b.killStep()
	}
	return nil
}

// waitStep waits for srun and its relays; every process without a status
// then counts as lost.
func (b *stepBackend) waitStep(cmd *exec.Cmd, relays *sync.WaitGroup, outR, errR *os.File) {
	cmd.Wait()
	drained := make(chan struct{})
	go func() { relays.Wait(); close(drained) }()
	t := time.NewTimer(max(b.cfg.Grace, time.Second))
	select {
	case <-drained:
	case <-t.C:
		outR.Close() // something else holds srun's output
		errR.Close()
		<-drained
	}
	t.Stop()
	how := exitInfoOf(cmd.ProcessState)
	for _, p := range b.procs {
		p.stdout.Close()
		p.stderr.Close()
		if why := p.srunSaid.Load(); why != nil {
			p.finish(exitInfo{Code: -1, Signal: syscall.SIGKILL, LostCode: 128 + int(syscall.SIGKILL), Lost: "srun: " + *why})
			continue
		}
		p.finish(exitInfo{Code: -1, Signal: syscall.SIGKILL, LostCode: how.code(),
			Lost: fmt.Sprintf("the srun step %s without the process's exit status", how.how())})
	}
	b.closeInput()
	close(b.srunDone)
}

// relay hands each line of srun's stdout or stderr to the pipe of the
// task that printed it, taking out the status lines; srun's own lines
// (no task label) go to notice, and those that say a task ended mark it
// lost if its status does not follow within the grace period.
func (b *stepBackend) relay(r *os.File, stream int) {
	br := bufio.NewReaderSize(r, 64<<10)
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if err == bufio.ErrBufferFull && len(line) < maxLine {
			continue
		}
		if len(line) > 0 {
			b.route(line, stream)
			line = line[:0]
		}
		if err != nil && err != bufio.ErrBufferFull {
			return
		}
	}
}

func (b *stepBackend) route(line []byte, stream int) {
	task, rest, ok := splitTaskLabel(line)
	if !ok || task >= len(b.procs) {
		text := strings.TrimRight(string(line), "\n")
		if ts, ok := endedTasks(text); ok {
			for _, t := range ts {
				if t < len(b.procs) {
					b.procs[t].lostAfterGrace(text)
				}
			}
		}
		if text != "" {
			b.notice(text)
		}
		return
	}
	p := b.procs[task]
	if stream == streamStdout && bytes.HasPrefix(rest, []byte(remote.StatusMark)) {
		if st, ok := remote.ParseStatus(strings.TrimRight(string(rest), "\n"), b.nonce); ok {
			p.finish(exitInfoFrom(st))
			return
		}
	}
	if !bytes.HasSuffix(rest, []byte("\n")) {
		rest = append(rest, '\n')
	}
	if stream == streamStdout {
		p.stdout.Write(rest)
	} else {
		p.stderr.Write(rest)
	}
}

// lostAfterGrace: srun says the task ended; without its status line within
// the grace period (it travels on the other stream), it was lost.
func (p *stepProc) lostAfterGrace(why string) {
	if p.ended.Load() {
		return
	}
	p.srunSaid.CompareAndSwap(nil, &why)
	t := time.AfterFunc(max(p.b.cfg.Grace, time.Second), func() {
		p.finish(exitInfo{Code: -1, Signal: syscall.SIGKILL, LostCode: 128 + int(syscall.SIGKILL), Lost: "srun: " + why})
	})
	if !p.lostT.CompareAndSwap(nil, t) {
		t.Stop()
	}
}

// splitTaskLabel splits srun's --label prefix, "T: " with T padded with
// spaces, from a line.
func splitTaskLabel(line []byte) (int, []byte, bool) {
	i := 0
	for i < len(line) && line[i] == ' ' {
		i++
	}
	j := i
	for j < len(line) && line[j] >= '0' && line[j] <= '9' {
		j++
	}
	if j == i || j-i > 6 || j+1 >= len(line) || line[j] != ':' || line[j+1] != ' ' {
		return 0, nil, false
	}
	t, err := strconv.Atoi(string(line[i:j]))
	if err != nil {
		return 0, nil, false
	}
	return t, line[j+2:], true
}

// endedTasks parses srun's report of tasks that ended badly, such as
// "srun: error: node2: task 1: Killed" or "srun: error: node1: tasks 0-3,7:
// Exited with exit code 3".
func endedTasks(line string) ([]int, bool) {
	rest, ok := strings.CutPrefix(line, "srun: error: ")
	if !ok {
		return nil, false
	}
	_, rest, ok = strings.Cut(rest, ": task")
	if !ok {
		return nil, false
	}
	rest = strings.TrimPrefix(rest, "s")
	list, _, ok := strings.Cut(strings.TrimSpace(rest), ":")
	if !ok {
		return nil, false
	}
	ts, err := remote.ParseRanges(list)
	return ts, err == nil
}

// write writes to srun's stdin (every task gets it), waiting at most
// timeout.
func (b *stepBackend) write(p []byte, timeout time.Duration) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.in == nil || b.inClosed {
		return os.ErrClosed
	}
	b.in.SetWriteDeadline(time.Now().Add(timeout))
	_, err := b.in.Write(p)
	return err
}

func (b *stepBackend) closeInput() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.in != nil && !b.inClosed {
		b.inClosed = true
		b.in.Close()
	}
}

// killStep kills srun and with it every task of the step.
func (b *stepBackend) killStep() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd != nil && b.cmd.Process != nil {
		syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// pinger tells every task at once that gaspirun is alive.
func (b *stepBackend) pinger() {
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
		case <-b.srunDone:
			return
		case <-t.C:
			b.write([]byte(remote.PingLine), time.Second)
		}
	}
}

// signaller sends the queued signals, one line per signal for all the
// processes it is for. A line that cannot be written (srun does not
// read) kills the step.
func (b *stepBackend) signaller() {
	for {
		select {
		case <-b.stop:
			return
		case <-b.srunDone:
			return
		case <-b.wake:
		}
		b.sigMu.Lock()
		pending := b.pending
		b.pending = map[syscall.Signal][]int{}
		b.sigMu.Unlock()
		sigs := make([]int, 0, len(pending))
		for s := range pending {
			sigs = append(sigs, int(s))
		}
		slices.Sort(sigs)
		for _, s := range sigs {
			if err := b.write(remote.SignalLine(syscall.Signal(s), formatRanges(pending[syscall.Signal(s)])), time.Second); err != nil {
				b.killStep()
			}
		}
	}
}

// close lets srun end by itself for the grace period (every task has
// ended, or was told to), then kills it, and waits for everything.
func (b *stepBackend) close() {
	close(b.stop)
	b.mu.Lock()
	launched := b.cmd != nil
	b.mu.Unlock()
	if launched {
		t := time.NewTimer(b.cfg.Grace)
		select {
		case <-b.srunDone:
		case <-t.C:
			b.killStep()
		}
		t.Stop()
		<-b.srunDone
	}
	b.wg.Wait()
	if b.hostfile != "" {
		os.Remove(b.hostfile)
	}
}
