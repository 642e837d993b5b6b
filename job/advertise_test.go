package job

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func ips(s ...string) []net.IP {
	var out []net.IP
	for _, x := range s {
		out = append(out, net.ParseIP(x))
	}
	return out
}

// Rule: the advertised address is one other hosts can use: never
// loopback, link-local or an interface that is down; the default route's
// interface first, IPv4 before IPv6.
func TestPickAddr(t *testing.T) {
	lo := ifaceAddrs{Name: "lo", Up: true, Loopback: true, IPs: ips("127.0.0.1", "::1")}
	cases := []struct {
		name string
		ifs  []ifaceAddrs
		def  string
		want string
	}{
		{"loopback only", []ifaceAddrs{lo}, "", ""},
		{"one interface", []ifaceAddrs{lo, {Name: "eth0", Up: true, IPs: ips("10.0.0.5")}}, "", "10.0.0.5"},
		{"down interface skipped", []ifaceAddrs{lo, {Name: "eth0", IPs: ips("10.0.0.5")}}, "", ""},
		{"link-local skipped", []ifaceAddrs{{Name: "eth0", Up: true, IPs: ips("fe80::1", "169.254.3.4")}}, "", ""},
		{"ipv4 before ipv6", []ifaceAddrs{{Name: "eth0", Up: true, IPs: ips("2001:db8::5", "10.0.0.5")}}, "", "10.0.0.5"},
		{"ipv6 when alone", []ifaceAddrs{{Name: "eth0", Up: true, IPs: ips("2001:db8::5")}}, "", "2001:db8::5"},
		{"default route first", []ifaceAddrs{
			{Name: "docker0", Up: true, IPs: ips("172.17.0.1")},
			{Name: "eth0", Up: true, IPs: ips("10.0.0.5")},
		}, "eth0", "10.0.0.5"},
		{"first without a default route", []ifaceAddrs{
			{Name: "veth1", Up: true, IPs: ips("10.9.0.2")},
			{Name: "veth2", Up: true, IPs: ips("10.8.0.2")},
		}, "", "10.9.0.2"},
		{"loopback address on another interface skipped", []ifaceAddrs{{Name: "x", Up: true, IPs: ips("127.0.1.1")}}, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := pickAddr(c.ifs, c.def)
			if (got == nil && c.want != "") || (got != nil && got.String() != c.want) {
				t.Fatalf("pickAddr = %v, want %q", got, c.want)
			}
		})
	}
}

func TestDefaultRouteIface(t *testing.T) {
	const hdr = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
	cases := []struct{ name, table, want string }{
		{"none", hdr, ""},
		{"empty", "", ""},
		{"default", hdr + "eth0\t00000000\t0100A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n" +
			"eth0\t0000A8C0\t00000000\t0001\t0\t0\t100\t00FFFFFF\t0\t0\t0\n", "eth0"},
		{"lowest metric", hdr + "wlan0\t00000000\t0100A8C0\t0003\t0\t0\t600\t00000000\t0\t0\t0\n" +
			"eth0\t00000000\t0101A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n", "eth0"},
		{"route down", hdr + "eth0\t00000000\t0100A8C0\t0002\t0\t0\t100\t00000000\t0\t0\t0\n", ""},
		{"garbage", hdr + "eth0 zz\n", ""},
	}
	for _, c := range cases {
		if got := defaultRouteIface(c.table); got != c.want {
			t.Errorf("%s: defaultRouteIface = %q, want %q", c.name, got, c.want)
		}
	}
}

// Rule: a job on loopback listens and advertises on loopback; any other
// rendezvous (a name, a routable address) makes the listeners wildcard,
// and what is advertised is never a wildcard or loopback address.
func TestAdvertise(t *testing.T) {
	if got := listenHost("127.0.0.1:1"); got != "127.0.0.1" {
		t.Errorf("listenHost(loopback) = %q", got)
	}
	if got := listenHost("localhost:1"); got != "127.0.0.1" {
		t.Errorf("listenHost(localhost) = %q", got)
	}
	if got := listenHost("node1:29400"); got != "0.0.0.0" {
		t.Errorf("listenHost(node1) = %q, want every interface", got)
	}
	if a, err := advertise("127.0.0.1:4242", "127.0.0.1:1"); err != nil || a != "127.0.0.1:4242" {
		t.Errorf("advertise on loopback = %q, %v", a, err)
	}
	t.Setenv(VarAdvertiseHost, "node7.example")
	if a, err := advertise("0.0.0.0:4242", "127.0.1.1:1"); err != nil || a != "node7.example:4242" {
		t.Errorf("advertise with %s = %q, %v", VarAdvertiseHost, a, err)
	}
	t.Setenv(VarAdvertiseHost, "")
	// 127.0.1.1 is what Debian's /etc/hosts gives the own hostname: the
	// route to it is loopback, which must never be advertised.
	a, err := advertise("0.0.0.0:4242", "127.0.1.1:29400")
	if err != nil {
		if !strings.Contains(err.Error(), VarAdvertiseHost) {
			t.Fatalf("error %q does not name %s", err, VarAdvertiseHost)
		}
		return // this host has no interface but loopback
	}
	h, _, _ := net.SplitHostPort(a)
	if ip := net.ParseIP(h); ip == nil || ip.IsLoopback() || ip.IsUnspecified() {
		t.Fatalf("advertise = %q: loopback or wildcard, unreachable from other hosts", a)
	}
}

// advertiseHelperVar makes the test binary print advertise's answer and
// exit: TestAdvertiseNamespace runs it inside a network namespace.
const advertiseHelperVar = "PGAS_TEST_ADVERTISE_HELPER"

func TestMain(m *testing.M) {
	if rv := os.Getenv(advertiseHelperVar); rv != "" {
		a, err := advertise("0.0.0.0:4242", rv)
		if err != nil {
			fmt.Println("error:", err)
		} else {
			fmt.Println("addr:", a)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestAdvertiseNamespace reproduces a Debian host in a network namespace:
// its /etc/hosts maps the rendezvous name to 127.0.1.1. With a veth
// interface up, the process advertises the veth's address; with loopback
// only, it fails naming PGAS_ADVERTISE_HOST.
func TestAdvertiseNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for ip netns")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs the ip command (iproute2)")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ns := fmt.Sprintf("pgasadv%d", os.Getpid())
	name := "node1-" + ns
	run := func(args ...string) error {
		out, err := exec.Command("ip", args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := run("netns", "add", ns); err != nil {
		t.Skipf("network namespaces unavailable: %v", err)
	}
	t.Cleanup(func() { run("netns", "del", ns) })
	etc := filepath.Join("/etc/netns", ns)
	if err := os.MkdirAll(etc, 0o755); err != nil {
		t.Skipf("cannot create %s: %v", etc, err)
	}
	t.Cleanup(func() { os.RemoveAll(etc) })
	if err := os.WriteFile(filepath.Join(etc, "hosts"), []byte("127.0.0.1 localhost\n127.0.1.1 "+name+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run("-n", ns, "link", "set", "lo", "up"); err != nil {
		t.Fatal(err)
	}
	helper := func() string {
		cmd := exec.Command("ip", "netns", "exec", ns, self, "-test.run=^$")
		cmd.Env = append(os.Environ(), advertiseHelperVar+"="+name+":29400", VarAdvertiseHost+"=")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helper in %s: %v: %s", ns, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	out := helper()
	if !strings.HasPrefix(out, "error:") || !strings.Contains(out, VarAdvertiseHost) {
		t.Fatalf("loopback only: got %q, want an error naming %s", out, VarAdvertiseHost)
	}
	if err := run("-n", ns, "link", "add", "va", "type", "veth", "peer", "name", "vb"); err != nil {
		t.Skipf("veth unavailable: %v", err)
	}
	for _, args := range [][]string{
		{"-n", ns, "addr", "add", "10.231.77.1/24", "dev", "va"},
		{"-n", ns, "link", "set", "va", "up"},
		{"-n", ns, "link", "set", "vb", "up"},
	} {
		if err := run(args...); err != nil {
			t.Fatal(err)
		}
	}
	if out := helper(); out != "addr: 10.231.77.1:4242" {
		t.Fatalf("with a veth up: got %q, want addr: 10.231.77.1:4242", out)
	}
}
