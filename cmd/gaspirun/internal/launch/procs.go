package launch

import (
	"os"
	"strconv"
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
	spec.env = append(append([]string{}, j.cfg.Env...), environ...)
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
	go func() { defer j.pumps.Done(); j.out.pump(outR, streamStdout, p, label) }()
	go func() { defer j.pumps.Done(); j.out.pump(errR, streamStderr, p, label) }()
	go func() { j.exits <- exitEvent{proc: p, info: h.wait()} }()
	return nil
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
