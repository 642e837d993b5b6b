package simhost

import (
	"os"
	"os/exec"
	"runtime"
	"testing"
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
