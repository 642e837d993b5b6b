package simhost

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"
)

// Unavailable says why simulated hosts cannot be built here, or returns ""
// when they can: they need Linux, root (network namespaces, veth pairs and
// a bridge) and iproute2's ip.
func Unavailable() string {
	switch {
	case runtime.GOOS != "linux":
		return "simulated hosts need Linux network namespaces (this is " + runtime.GOOS + ")"
	case os.Geteuid() != 0:
		return "simulated hosts need root (network namespaces, veth pairs, a bridge): run the tests as root"
	}
	if _, err := exec.LookPath(ipCmd); err != nil {
		return "simulated hosts need iproute2's ip, which is not on PATH: apt-get install iproute2"
	}
	if _, err := os.Stat("/proc/self/ns/net"); err != nil {
		return "simulated hosts need network namespaces, and /proc/self/ns/net is missing: " + err.Error()
	}
	return ""
}

// Require skips the test, saying what is missing, unless simulated hosts
// can be built here.
func Require(t testing.TB) {
	t.Helper()
	if reason := Unavailable(); reason != "" {
		t.Skip(reason)
	}
}

// NewForTest builds the simulated hosts of cfg for t, skipping the test as
// Require does where they cannot be built, and removes them when the test
// ends (failing it if that does not work). Building is bounded by a
// minute.
func NewForTest(t testing.TB, cfg Config) *Cluster {
	t.Helper()
	Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := New(ctx, cfg)
	if err != nil {
		t.Fatalf("simulated hosts: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("removing the simulated hosts: %v", err)
		}
	})
	return c
}
