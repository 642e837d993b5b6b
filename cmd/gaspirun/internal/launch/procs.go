package launch

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// The processes of a job: starting one, signalling them, draining their
// output.

type proc struct {
	id     int
	pid    int
	host   string // its PGAS_HOST
	handle process
	label  atomic.Pointer[string]
	files  []*os.File // read ends of the output pipes
	waited bool       // its wait returned (the loop goroutine's)
}

// start starts process p of the job as placed.
func (j *job) start(p int) error {
	if j.place == nil {
		label := j.cfg.HostLabel(p)
		if label == "" {
			label = j.hostname
		}
		return j.startProc(p, j.be, "", label, j.cfg.Ranks, false)
	}
	host, ranks := j.place.Host(p), 0
	for q := 0; q < j.cfg.Ranks; q++ {
		if j.place.HostOf[q] == j.place.HostOf[p] {
			ranks++
		}
	}
	return j.startProc(p, j.be, host, host, ranks, false)
}

// startProc starts process p through be: on host ("" for this machine),
// with PGAS_HOST envHost and GOMAXPROCS for ranksOnHost ranks there; a
// joiner (a replacement) gets PGAS_JOIN=1. Its output is pumped, and its
// exit is sent to j.exits.
func (j *job) startProc(p int, be backend, host, envHost string, ranksOnHost int, join bool) error {
	env := j.base
	env.Proc = uint32(p)
	env.Host = envHost
	env.Join = join
	spec := procSpec{proc: p, host: host, ranksOnHost: ranksOnHost}
	environ := env.Environ()
	if j.cfg.Resume != "" {
		environ = append(environ, "PGAS_RESUME="+j.cfg.Resume)
	}
	spec.env = append(append(append([]string{}, j.cfg.Env...), environ...), j.rankVars(p, join)...)
	outR, outW, err := os.Pipe()
	if err != nil {
		return err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return err
	}
	spec.stdout, spec.stderr = outW, errW
	if host == "" && !join && p < j.cfg.Ranks {
		spec.stdin, spec.ownStdin = j.stdinFor(p)
	}
	h, err := be.start(spec)
	if err != nil {
		outR.Close()
		errR.Close()
		return err
	}
	pr := &proc{id: p, pid: h.pid(), host: env.Host, handle: h, files: []*os.File{outR, errR}}
	l := "s" + strconv.Itoa(p) // a joiner, until the tracker knows it
	if !join {
		l = j.tr.label(p)
	}
	pr.label.Store(&l)
	j.procs = append(j.procs, pr)
	j.byID[p] = pr
	label := func() string { return *pr.label.Load() }
	j.pumps.Add(2)
	outF, errF := j.outputFiles(p)
	go func() { defer j.pumps.Done(); j.out.pump(outR, streamStdout, p, label, outF); closeFile(outF) }()
	go func() { defer j.pumps.Done(); j.out.pump(errR, streamStderr, p, label, errF); closeFile(errF) }()
	go func() { j.exits <- exitEvent{proc: p, info: h.wait()} }()
	return nil
}

// outputFiles are the files process p's stdout and stderr are copied to
// with --output-filename DIR (Config.OutputDir), as Open MPI's: the
// output of rank r's first process goes to DIR/rank.r/stdout and stderr,
// a spare's or a replacement's to DIR/proc.p/ (a spare that takes a rank
// over keeps its own files). The terminal gets the lines as before. Nil,
// nil without the flag, or when a file cannot be made (said once).
func (j *job) outputFiles(p int) (stdout, stderr io.Writer) {
	if j.cfg.OutputDir == "" {
		return nil, nil
	}
	name := "proc." + strconv.Itoa(p)
	if p < j.cfg.Ranks {
		name = "rank." + strconv.Itoa(p)
	}
	dir := filepath.Join(j.cfg.OutputDir, name)
	warn := func(err error) {
		j.outputErr.Do(func() {
			j.out.notice(fmt.Sprintf("warning: --output-filename: %v; the output goes to the terminal only", err))
		})
	}
	open := func(stream string) *os.File {
		f, err := os.OpenFile(filepath.Join(dir, stream), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			warn(err)
			return nil
		}
		return f
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		warn(err)
		return nil, nil
	}
	o, e := open("stdout"), open("stderr")
	if o == nil || e == nil {
		closeFile(o)
		closeFile(e)
		return nil, nil
	}
	return o, e
}

// closeFile closes w if it is a file.
func closeFile(w io.Writer) {
	if f, ok := w.(*os.File); ok && f != nil {
		f.Close()
	}
}

// stdinFor is what process p (the first of rank p, on this machine)
// reads: gaspirun's standard input itself for the rank --stdin names, or
// with --stdin all a pipe that stdinCopies feeds a copy into; nil
// otherwise. own says that the caller closes the file once the process
// has it.
func (j *job) stdinFor(p int) (f *os.File, own bool) {
	switch to := j.cfg.StdinTo; {
	case j.cfg.Stdin == nil || to == StdinNone:
		return nil, false
	case to == p:
		return j.cfg.Stdin, false
	case to != StdinAll:
		return nil, false
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, false // it reads /dev/null: said by nobody, as a closed input
	}
	j.stdinCopies = append(j.stdinCopies, w)
	return r, true
}

// copyStdin feeds every pipe of --stdin all a copy of gaspirun's standard
// input until it ends, then closes them; a process that stopped reading
// (or ended) is dropped, and the others go on. It runs once every rank's
// first process has started.
func copyStdin(in *os.File, outs []*os.File) {
	buf := make([]byte, 64<<10)
	for len(outs) > 0 {
		n, err := in.Read(buf)
		if n > 0 {
			live := outs[:0]
			for _, w := range outs {
				if _, werr := w.Write(buf[:n]); werr == nil {
					live = append(live, w)
				} else {
					w.Close()
				}
			}
			outs = live
		}
		if err != nil {
			break
		}
	}
	for _, w := range outs {
		w.Close()
	}
}

// rankVars are the rank variables of the launchers users know, for a
// plain program started with gaspirun (a gaspigo program learns its rank
// from the runtime, which also knows when it changes): torchrun's RANK,
// WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE, and Open MPI's
// OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK and _LOCAL_SIZE. A spare or a
// replacement starts with no rank, and gets none.
func (j *job) rankVars(p int, join bool) []string {
	if join || p >= j.cfg.Ranks {
		return nil
	}
	local, localSize := p, j.cfg.Ranks
	if j.place != nil {
		local, localSize = 0, 0
		for q := 0; q < j.cfg.Ranks; q++ {
			if j.place.HostOf[q] == j.place.HostOf[p] {
				if q < p {
					local++
				}
				localSize++
			}
		}
	}
	vals := []string{strconv.Itoa(p), strconv.Itoa(j.cfg.Ranks), strconv.Itoa(local), strconv.Itoa(localSize)}
	out := make([]string, 0, len(rankVarNames))
	for i, name := range rankVarNames {
		out = append(out, name+"="+vals[i%4])
	}
	return out
}

// rankVarNames are the rank variables, each set of four in the order
// rank, size, local rank, local size.
var rankVarNames = []string{"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
	"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"}

// isRankVar reports whether kv sets one of rankVarNames.
func isRankVar(kv string) bool {
	k, _, _ := strings.Cut(kv, "=")
	return slices.Contains(rankVarNames, k)
}

// signalAll signals every process started, whether or not it has exited
// (what it started may still run).
func (j *job) signalAll(sig syscall.Signal) {
	for _, pr := range j.procs {
		pr.handle.signal(sig)
	}
}

// signalLive signals the processes still running.
func (j *job) signalLive(sig syscall.Signal) {
	for _, pr := range j.procs {
		if !pr.waited {
			pr.handle.signal(sig)
		}
	}
}

// closePumps waits for the output pumps to drain (a process's children may
// hold its pipes open), for at most the grace period, then closes the pipes.
func (j *job) closePumps() {
	done := make(chan struct{})
	go func() {
		j.pumps.Wait()
		close(done)
	}()
	t := time.NewTimer(j.cfg.Grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
	for _, pr := range j.procs {
		for _, f := range pr.files {
			f.Close()
		}
	}
	<-done
	j.out.flush()
}
