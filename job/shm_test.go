package job

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/bootstrap"
	"github.com/gaspigo/gaspigo/transport/shm"
	"github.com/gaspigo/gaspigo/transport/tcp"
)

func TestShmConfig(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		on   bool
		spin time.Duration
		bad  string
	}{
		{env: nil, on: true, spin: -1},
		{env: map[string]string{VarShm: "0"}, on: false, spin: -1},
		{env: map[string]string{VarShm: "off"}, on: false, spin: -1},
		{env: map[string]string{VarShm: "1", VarShmSpin: "5us"}, on: true, spin: 5 * time.Microsecond},
		{env: map[string]string{VarShmSpin: "0"}, on: true, spin: 0},
		{env: map[string]string{VarShm: "maybe"}, bad: VarShm},
		{env: map[string]string{VarShmSpin: "fast"}, bad: VarShmSpin},
		{env: map[string]string{VarShmSpin: "2s"}, bad: VarShmSpin},
		{env: map[string]string{VarShmSpin: "-1us"}, bad: VarShmSpin},
	} {
		on, spin, err := shmConfig(func(k string) (string, bool) { v, ok := c.env[k]; return v, ok })
		if c.bad != "" {
			var ee *bootstrap.EnvError
			if !errors.As(err, &ee) || ee.Var != c.bad || ee.Fix == "" {
				t.Errorf("%v: got %v, want an EnvError naming %s with a fix", c.env, err, c.bad)
			}
			continue
		}
		if err != nil || on != c.on || spin != c.spin {
			t.Errorf("%v: got (%v, %v, %v), want (%v, %v, nil)", c.env, on, spin, err, c.on, c.spin)
		}
	}
}

func TestAutoSpin(t *testing.T) {
	if got := autoSpin(2, 2); got != shm.DefaultSpin {
		t.Errorf("2 processes on 2 CPUs: spin %v, want %v", got, shm.DefaultSpin)
	}
	if got := autoSpin(4, 2); got != 0 {
		t.Errorf("4 processes on 2 CPUs: spin %v, want 0", got)
	}
}

func TestShmSegments(t *testing.T) {
	for _, c := range []struct {
		env     map[string]string
		on, bad bool
	}{
		{env: nil, on: true},
		{env: map[string]string{VarShmSegments: ""}, on: true},
		{env: map[string]string{VarShmSegments: "off"}, on: false},
		{env: map[string]string{VarShmSegments: "1"}, on: true},
		{env: map[string]string{VarShmSegments: "on"}, on: true},
		{env: map[string]string{VarShmSegments: "0"}, on: false},
		{env: map[string]string{VarShmSegments: "sometimes"}, bad: true},
	} {
		on, err := shmSegments(func(k string) (string, bool) { v, ok := c.env[k]; return v, ok })
		if c.bad {
			var ee *bootstrap.EnvError
			if !errors.As(err, &ee) || ee.Var != VarShmSegments || ee.Fix == "" {
				t.Errorf("%v: got %v, want an EnvError naming %s with a fix", c.env, err, VarShmSegments)
			}
			continue
		}
		if err != nil || on != c.on {
			t.Errorf("%v: got (%v, %v), want (%v, nil)", c.env, on, err, c.on)
		}
	}
}

func TestTCPIdleVariable(t *testing.T) {
	for v, want := range map[string]time.Duration{"": tcp.DefaultIdleTimeout, "0": 0, "30s": 30 * time.Second, " 5m ": 5 * time.Minute} {
		got, err := tcpIdle(func(string) (string, bool) { return v, true })
		if err != nil || got != want {
			t.Errorf("PGAS_TCP_IDLE=%q: %v, %v; want %v", v, got, err, want)
		}
	}
	for _, v := range []string{"soon", "-1s", "1ms"} {
		if _, err := tcpIdle(func(string) (string, bool) { return v, true }); err == nil || !strings.Contains(err.Error(), "PGAS_TCP_IDLE") {
			t.Errorf("PGAS_TCP_IDLE=%q: %v, want an error naming the variable", v, err)
		}
	}
}

func TestTCPSpinVariable(t *testing.T) {
	type want struct {
		spin time.Duration
		auto bool
	}
	for v, w := range map[string]want{"": {0, true}, "0": {0, false}, "50us": {50 * time.Microsecond, false}, " 2ms ": {2 * time.Millisecond, false}} {
		spin, auto, err := tcpSpin(func(string) (string, bool) { return v, true })
		if err != nil || spin != w.spin || auto != w.auto {
			t.Errorf("PGAS_TCP_SPIN=%q: %v, %v, %v; want %v, %v", v, spin, auto, err, w.spin, w.auto)
		}
	}
	if _, auto, err := tcpSpin(func(string) (string, bool) { return "", false }); err != nil || !auto {
		t.Errorf("PGAS_TCP_SPIN unset: auto %v, %v; want the job's choice", auto, err)
	}
	for _, v := range []string{"soon", "-1us", "1s"} {
		if _, _, err := tcpSpin(func(string) (string, bool) { return v, true }); err == nil || !strings.Contains(err.Error(), VarTCPSpin) {
			t.Errorf("PGAS_TCP_SPIN=%q: %v, want an error naming the variable", v, err)
		}
	}
}

// The job polls its sockets only where each process of the host has a
// CPU, and Options.TCP's PollSpin, even 0, is the program's choice.
func TestTCPSpinChoice(t *testing.T) {
	if got := autoTCPSpin(2, 2); got != AutoTCPSpin {
		t.Errorf("2 processes on 2 CPUs: %v, want %v", got, AutoTCPSpin)
	}
	if got := autoTCPSpin(3, 2); got != 0 {
		t.Errorf("3 processes on 2 CPUs: %v, want 0", got)
	}
	var c tcp.Config
	if auto := adjustTCP(&c, nil, 0, true); !auto || c.PollSpin != 0 {
		t.Errorf("nothing set: auto %v, PollSpin %v; want the job's choice", auto, c.PollSpin)
	}
	if auto := adjustTCP(&c, nil, 20*time.Microsecond, false); auto || c.PollSpin != 20*time.Microsecond {
		t.Errorf("PGAS_TCP_SPIN=20us: auto %v, PollSpin %v", auto, c.PollSpin)
	}
	if auto := adjustTCP(&c, func(c *tcp.Config) { c.PollSpin = 0 }, 20*time.Microsecond, true); auto || c.PollSpin != 0 {
		t.Errorf("Options.TCP set 0: auto %v, PollSpin %v; want 0, not the job's choice", auto, c.PollSpin)
	}
}
