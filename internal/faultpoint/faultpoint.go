// Package faultpoint kills this process at a named point of the runtime,
// for the chaos suite (test/chaos): the faults no signal from outside can
// aim at, such as a writer lost between its store into a peer's memory and
// the wake-up frame that follows it (docs/design.md §3, "Wake-ups").
//
// A process started with PGAS_FAULTPOINT=NAME:N sends itself SIGKILL the
// Nth time the point NAME is hit (N defaults to 1: PGAS_FAULTPOINT=NAME).
// Before the signal it prints one line on stderr, which the chaos suite
// takes as the evidence that the fault was applied:
//
//	faultpoint: SIGKILL process 3 (pid 4242) at pgas.store-wake, hit 1
//
// The variable is read once, by FromEnv, which package job calls when it
// builds the runtime's configuration; the runtime itself reads no
// environment and calls the function it is given (pgas.Config.FaultPoint).
// Without the variable FromEnv returns nil: no point costs more than a nil
// check.
package faultpoint

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// EnvVar arms one point: NAME or NAME:N.
const EnvVar = "PGAS_FAULTPOINT"

// Arm is one armed point: the Nth hit of Name kills the process.
type Arm struct {
	Name string
	N    int64
}

// Parse reads the variable's value: NAME or NAME:N with N >= 1.
func Parse(s string) (Arm, error) {
	name, n, hasN := strings.Cut(strings.TrimSpace(s), ":")
	a := Arm{Name: name, N: 1}
	if name == "" {
		return Arm{}, fmt.Errorf("faultpoint: %s=%q: want NAME or NAME:N", EnvVar, s)
	}
	if hasN {
		v, err := strconv.ParseInt(n, 10, 64)
		if err != nil || v < 1 {
			return Arm{}, fmt.Errorf("faultpoint: %s=%q: the hit count %q is not a whole number >= 1", EnvVar, s, n)
		}
		a.N = v
	}
	return a, nil
}

// Point counts the hits of the armed point; it is safe for concurrent use.
type Point struct {
	arm  Arm
	hits atomic.Int64
	proc string
	out  io.Writer
	kill func() // sends SIGKILL to this process; tests replace it
}

// New returns the Point of a. proc names the process in the line printed
// before the kill.
func New(a Arm, proc string, out io.Writer) *Point {
	return &Point{arm: a, proc: proc, out: out, kill: func() {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}}
}

// FromEnv returns the hit function of the point PGAS_FAULTPOINT arms, for
// process proc, or nil when the variable is unset. A value that does not
// parse is an error: a chaos run that meant a fault must not run without it.
func FromEnv(proc uint32) (func(point string), error) {
	v, ok := os.LookupEnv(EnvVar)
	if !ok || v == "" {
		return nil, nil
	}
	a, err := Parse(v)
	if err != nil {
		return nil, err
	}
	return New(a, strconv.FormatUint(uint64(proc), 10), os.Stderr).Hit, nil
}

// Hit counts one pass through point; at the armed point's Nth hit it
// prints its line and kills the process (it does not return then).
func (p *Point) Hit(point string) {
	if point != p.arm.Name {
		return
	}
	if n := p.hits.Add(1); n == p.arm.N {
		fmt.Fprintf(p.out, "faultpoint: SIGKILL process %s (pid %d) at %s, hit %d\n", p.proc, os.Getpid(), point, n)
		p.kill()
	}
}
