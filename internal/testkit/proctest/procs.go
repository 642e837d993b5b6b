package proctest

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Alive reports whether pid is a running process (a zombie counts as
// ended). Linux only: it reads /proc.
func Alive(pid int) bool {
	_, ok := stat(pid)
	return ok
}

// stat returns the start time (clock ticks after boot) of the running
// process pid, which with the pid identifies it: pids are reused, fast on
// a machine whose pid_max is 32768.
func stat(pid int) (start string, alive bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", false
	}
	// The state follows the parenthesised command name; the start time is
	// the 22nd field, the 20th after the name.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return "", false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return "", false
	}
	return f[19], true
}

// Procs collects the processes of one job, found in /proc by the
// PGAS_JOB_ID in their environment, with their process ids (PGAS_PROC)
// and host labels (PGAS_HOST). Safe for concurrent use.
type Procs struct {
	mu    sync.Mutex
	all   map[int]string // pid -> start time (identifies it; "" if unknown)
	procs map[int]int    // proc -> pid
	hosts map[int]string // proc -> host label
}

// NewProcs returns an empty set.
func NewProcs() *Procs {
	return &Procs{all: map[int]string{}, procs: map[int]int{}, hosts: map[int]string{}}
}

// Add records a pid learnt otherwise (from a program's own output); it is
// identified by its start time if it still runs.
func (s *Procs) Add(pid int) {
	start, _ := stat(pid)
	s.mu.Lock()
	if _, ok := s.all[pid]; !ok {
		s.all[pid] = start
	}
	s.mu.Unlock()
}

// PIDs lists every pid seen.
func (s *Procs) PIDs() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]int, 0, len(s.all))
	for p := range s.all {
		out = append(out, p)
	}
	return out
}

// PIDOf returns the pid of process id proc.
func (s *Procs) PIDOf(proc int) (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pid, ok := s.procs[proc]
	return pid, ok
}

// Signal sends sig to process id proc if the process found for it still
// runs (the same pid and start time); it returns the pid and whether the
// signal went out.
func (s *Procs) Signal(proc int, sig syscall.Signal) (int, bool) {
	s.mu.Lock()
	pid, ok := s.procs[proc]
	want := s.all[pid]
	s.mu.Unlock()
	if !ok {
		return 0, false
	}
	if start, alive := stat(pid); !alive || start != want {
		return pid, false
	}
	return pid, syscall.Kill(pid, sig) == nil
}

// OnHost lists the process ids whose host label is host.
func (s *Procs) OnHost(host string) []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []int
	for p, h := range s.hosts {
		if h == host {
			out = append(out, p)
		}
	}
	return out
}

// Scan adds every live process whose environment has PGAS_JOB_ID=jobID,
// except the launcher's pid.
func (s *Procs) Scan(jobID string, launcher int) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	want := []byte("PGAS_JOB_ID=" + jobID + "\x00")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == launcher {
			continue
		}
		start, alive := stat(pid)
		s.mu.Lock()
		known, seen := s.all[pid]
		s.mu.Unlock()
		if !alive || (seen && known == start) {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !bytes.Contains(append(env, 0), want) {
			continue
		}
		proc, host := -1, ""
		for _, kv := range bytes.Split(env, []byte{0}) {
			if v, ok := bytes.CutPrefix(kv, []byte("PGAS_PROC=")); ok {
				proc, _ = strconv.Atoi(string(v))
			}
			if v, ok := bytes.CutPrefix(kv, []byte("PGAS_HOST=")); ok {
				host = string(v)
			}
		}
		s.mu.Lock()
		s.all[pid] = start
		if proc >= 0 {
			s.procs[proc] = pid
			s.hosts[proc] = host
		}
		s.mu.Unlock()
	}
}

// Watch scans every interval until the returned stop function is called;
// stop waits for the last scan to finish.
func (s *Procs) Watch(jobID string, launcher int, interval time.Duration) (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			s.Scan(jobID, launcher)
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() { close(done); <-finished }
}

// Leftovers waits up to wait for the job's processes to end and returns
// (and kills) those still running then. A pid now used by another process
// (same pid, other start time) is not the job's and is left alone.
func (s *Procs) Leftovers(wait time.Duration) []int {
	s.mu.Lock()
	procs := make(map[int]string, len(s.all))
	for pid, start := range s.all {
		procs[pid] = start
	}
	s.mu.Unlock()
	running := func(pid int) bool {
		start, alive := stat(pid)
		return alive && start == procs[pid]
	}
	left := waitGone(slices.Collect(maps.Keys(procs)), running, wait)
	for _, pid := range left {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	return left
}

// WaitGone waits up to wait for the processes pids to end and returns
// those still running then (it leaves them alone).
func WaitGone(pids []int, wait time.Duration) []int { return waitGone(pids, Alive, wait) }

func waitGone(pids []int, running func(pid int) bool, wait time.Duration) []int {
	deadline := time.Now().Add(wait)
	var left []int
	for _, pid := range pids {
		for running(pid) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond) // real processes: poll with a deadline
		}
		if running(pid) {
			left = append(left, pid)
		}
	}
	return left
}

// WaitStopped waits until every thread of process pid is stopped (state
// T, after SIGSTOP), within d. kill(2) returns once the signal is queued:
// a thread running on another core, or waiting for one on a busy machine,
// goes on for a while, and a test that acts on "stopped" before then may
// see the process answer.
func WaitStopped(pid int, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		running, err := threadsNotStopped(pid)
		if err != nil {
			return err
		}
		if running == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d: %d threads still not stopped after %v", pid, running, d)
		}
		time.Sleep(time.Millisecond) // a real process: poll with a deadline
	}
}

// threadsNotStopped counts the threads of pid whose state is not T.
func threadsNotStopped(pid int) (int, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range ents {
		b, err := os.ReadFile(dir + "/" + e.Name() + "/stat")
		if err != nil {
			continue // the thread ended
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || i+2 >= len(s) || (s[i+2] != 'T' && s[i+2] != 't') {
			n++
		}
	}
	return n, nil
}
