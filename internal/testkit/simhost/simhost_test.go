package simhost

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary doubles as the program run inside the namespaces:
// SIMHOST_HELPER selects what it does instead of running the tests.
func TestMain(m *testing.M) {
	switch os.Getenv("SIMHOST_HELPER") {
	case "":
		os.Exit(m.Run())
	case "listen": // echo server on :7700, prints "ready"
		l, err := net.Listen("tcp", ":7700")
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		fmt.Println("ready")
		for {
			c, err := l.Accept()
			if err != nil {
				os.Exit(1)
			}
			go io.Copy(c, c)
		}
	case "dial": // one round trip to $SIMHOST_ADDR within 1 s
		c, err := net.DialTimeout("tcp", os.Getenv("SIMHOST_ADDR"), time.Second)
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		c.SetDeadline(time.Now().Add(time.Second))
		if _, err := c.Write([]byte("ping\n")); err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		if s, err := bufio.NewReader(c).ReadString('\n'); err != nil || s != "ping\n" {
			fmt.Println("echo:", s, err)
			os.Exit(1)
		}
		fmt.Println("ok")
		os.Exit(0)
	case "resolve": // prints the addresses of $SIMHOST_NAME
		addrs, err := net.LookupHost(os.Getenv("SIMHOST_NAME"))
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		fmt.Println(strings.Join(addrs, " "))
		os.Exit(0)
	}
	os.Exit(2)
}

// helper runs the test binary as helper what on host h.
func helper(ctx context.Context, t *testing.T, h *Host, what string, env ...string) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := h.Command(ctx, self)
	cmd.Env = append(append(os.Environ(), "SIMHOST_HELPER="+what), env...)
	return cmd
}

// dial makes one round trip from host from to addr; it returns the
// helper's output and whether it succeeded.
func dial(ctx context.Context, t *testing.T, from *Host, addr string) (string, bool) {
	t.Helper()
	out, err := helper(ctx, t, from, "dial", "SIMHOST_ADDR="+addr).CombinedOutput()
	return strings.TrimSpace(string(out)), err == nil
}

// eventually retries dial until it succeeds, for at most 10 s (ARP and a
// re-attached bridge port take a moment).
func eventually(ctx context.Context, t *testing.T, from *Host, addr string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, ok := dial(ctx, t, from, addr)
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s cannot reach %s after healing: %s", from.Name(), addr, out)
		}
		time.Sleep(100 * time.Millisecond) // real network: poll with a deadline
	}
}

func TestTwoHostsCutHealCrash(t *testing.T) {
	Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := New(ctx, Config{Hosts: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	n1, n2 := c.Host(0), c.Host(1)
	t.Logf("cluster %s on %v: %s=%v %s=%v front=%v", c.ID(), c.Subnet(), n1.Name(), n1.Addr(), n2.Name(), n2.Addr(), c.FrontAddr())

	// Names: the other host by its address, itself at 127.0.1.1.
	for _, tc := range []struct {
		on         *Host
		name, want string
	}{{n1, "node2", n2.Addr().String()}, {n1, "node1", "127.0.1.1"}, {n2, "front", c.FrontAddr().String()}} {
		out, err := helper(ctx, t, tc.on, "resolve", "SIMHOST_NAME="+tc.name).CombinedOutput()
		if got := strings.TrimSpace(string(out)); err != nil || got != tc.want {
			t.Fatalf("on %s, %s resolves to %q (%v); want %s", tc.on.Name(), tc.name, got, err, tc.want)
		}
	}

	srv := helper(ctx, t, n2, "listen")
	stdout, _ := srv.StdoutPipe()
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Process.Kill()
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("listener on node2: %q %v", line, err)
	}
	target := netip.AddrPortFrom(n2.Addr(), 7700).String()
	if out, ok := dial(ctx, t, n1, target); !ok {
		t.Fatalf("node1 cannot reach node2's listener: %s", out)
	}
	if out, ok := dial(ctx, t, n1, "node2:7700"); !ok {
		t.Fatalf("node1 cannot reach node2:7700 by name: %s", out)
	}
	// The root namespace reaches the hosts too.
	conn, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		t.Fatalf("the root namespace cannot reach node2: %v", err)
	}
	conn.Close()

	for _, mode := range []CutMode{Silent, Unreachable} {
		if err := c.Cut(n2, mode); err != nil {
			t.Fatal(err)
		}
		if got := c.IsCut(n2); got != mode {
			t.Fatalf("IsCut = %v after Cut(%v)", got, mode)
		}
		if out, ok := dial(ctx, t, n1, target); ok {
			t.Fatalf("cut %v: node1 still reaches node2", mode)
		} else {
			t.Logf("cut %v: node1 -> node2: %s", mode, out)
		}
		out, ok := dial(ctx, t, n2, netip.AddrPortFrom(n1.Addr(), 7700).String())
		t.Logf("cut %v: node2 -> node1: %s", mode, out)
		if ok || strings.Contains(out, "refused") { // node1 has no listener: refused means reached
			t.Fatalf("cut %v: node2 reaches node1: %s", mode, out)
		}
		if mode == Unreachable && !strings.Contains(out, "unreachable") {
			t.Errorf("cut %v: node2's own connect failed with %q, want \"network is unreachable\"", mode, out)
		}
		if err := c.Heal(n2); err != nil {
			t.Fatal(err)
		}
		eventually(ctx, t, n1, target)
	}

	pids, err := n2.PIDs()
	if err != nil || len(pids) != 1 || pids[0] != srv.Process.Pid {
		t.Fatalf("node2's processes = %v, %v; want the listener's pid %d", pids, err, srv.Process.Pid)
	}
	killed, err := c.Crash(n2)
	if err != nil || len(killed) != 1 || killed[0] != srv.Process.Pid {
		t.Fatalf("Crash = %v, %v; want the listener's pid %d", killed, err, srv.Process.Pid)
	}
	var ee *exec.ExitError
	if err := srv.Wait(); !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("listener ended with %v, want SIGKILL", err)
	}

	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := c.Cut(n1, Silent); !errors.Is(err, ErrClosed) {
		t.Fatalf("Cut after Close = %v, want ErrClosed", err)
	}
	assertGone(t, c.ID())
}

// assertGone fails unless nothing named after cluster id is left.
func assertGone(t *testing.T, id string) {
	t.Helper()
	ifs, _ := net.Interfaces()
	for _, i := range ifs {
		if strings.HasPrefix(i.Name, id+"-") {
			t.Errorf("interface %s is left", i.Name)
		}
	}
	for _, dir := range []string{netnsDir, "/etc/netns"} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), id+"-") {
				t.Errorf("%s/%s is left", dir, e.Name())
			}
		}
	}
	for _, p := range []string{filepath.Join(lockDir, id+".lock"), filepath.Join(os.TempDir(), id)} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s is left", p)
		}
	}
}

// TestSweep: a cluster whose owner is gone (its lock released without
// Close) is removed by the next Sweep; a live one is not.
func TestSweep(t *testing.T) {
	Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	live, err := New(ctx, Config{Hosts: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { live.Close() })
	dead, err := New(ctx, Config{Hosts: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dead.Close() })
	dead.lock.Close() // as if its owner had died
	if err := Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	assertGone(t, dead.ID())
	if _, err := os.Stat(filepath.Join(netnsDir, live.Host(0).Namespace())); err != nil {
		t.Fatalf("Sweep removed a live cluster's namespace: %v", err)
	}
}
