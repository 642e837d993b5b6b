package simhost

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestClusterIDRoundTrip(t *testing.T) {
	for _, tc := range []struct{ pid, seq int }{{1, 0}, {12345, 7}, {4194304, 1295}, {99999, 36}} {
		id := clusterID(tc.pid, tc.seq)
		for _, name := range []string{id, bridgeName(id), vethName(id, 3), nsName(id, 0)} {
			pid, stem, ok := ownerOf(name)
			if !ok || pid != tc.pid || stem != id {
				t.Errorf("ownerOf(%q) = %d, %q, %v; want %d, %q, true", name, pid, stem, ok, tc.pid, id)
			}
		}
	}
	for _, name := range []string{"eth0", "gh", "gh-1", "ghz", "ghzz-", "gh0-1", "gh01-1", "ghA-1", "gh12-01", "gh12_3-1"} {
		if pid, _, ok := ownerOf(name); ok {
			t.Errorf("ownerOf(%q) = %d, true; want not a cluster name", name, pid)
		}
	}
}

func TestInterfaceNamesFit(t *testing.T) {
	// The largest Linux pid (pid_max 4194304) and a long-running process's
	// 1000th cluster still fit 50 hosts into 15 characters.
	id := clusterID(4194304, 1000)
	if err := checkNames(id, 50); err != nil {
		t.Fatal(err)
	}
	if err := checkNames(clusterID(4194304, 36*36*36), MaxHosts); err == nil {
		t.Fatal("checkNames accepted a name over 15 characters")
	}
}

func TestChooseSubnet(t *testing.T) {
	p := func(s string) netip.Prefix { return netip.MustParsePrefix(s) }
	taken := []netip.Prefix{p("192.0.2.0/24"), p("10.200.0.0/24"), p("10.200.1.7/32"), p("127.0.0.0/8")}
	got, err := ChooseSubnet(taken, 0)
	if err != nil || got != p("10.200.2.0/24") {
		t.Fatalf("ChooseSubnet from slot 0 = %v, %v; want 10.200.2.0/24", got, err)
	}
	// The last slot is taken: the probe wraps around to the first free one.
	got, err = ChooseSubnet([]netip.Prefix{p("10.249.255.0/24"), p("10.200.0.0/23")}, subnetSlots-1)
	if err != nil || got != p("10.200.2.0/24") {
		t.Fatalf("ChooseSubnet wrapping = %v, %v; want 10.200.2.0/24", got, err)
	}
	// A route covering the whole range leaves nothing.
	if _, err := ChooseSubnet([]netip.Prefix{p("10.0.0.0/8")}, 5); !errors.Is(err, ErrNoSubnet) {
		t.Fatalf("ChooseSubnet under 10.0.0.0/8 = %v; want ErrNoSubnet", err)
	}
	// Different processes start on different slots.
	seen := map[int]bool{}
	for pid := 1000; pid < 1100; pid++ {
		seen[startSlot(pid, 0)] = true
	}
	if len(seen) < 95 {
		t.Fatalf("100 pids start on only %d distinct slots", len(seen))
	}
}

func TestParseTaken(t *testing.T) {
	addrs := "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever\n" +
		"2: eth0    inet 192.0.2.2/24 brd 192.0.2.255 scope global eth0\\       valid_lft forever\n"
	routes := "default via 192.0.2.1 dev eth0\n10.210.3.0/24 dev br0 proto kernel scope link src 10.210.3.254\n" +
		"local 10.210.3.254 dev br0 table local proto kernel scope host src 10.210.3.254\n" +
		"broadcast 10.210.3.255 dev br0 table local proto kernel scope link src 10.210.3.254\n"
	got := parseTaken(addrs, routes)
	want := []string{"127.0.0.0/8", "192.0.2.0/24", "10.210.3.0/24", "10.210.3.254/32", "10.210.3.255/32"}
	if len(got) != len(want) {
		t.Fatalf("parseTaken = %v; want %v", got, want)
	}
	for i := range want {
		if got[i].String() != want[i] {
			t.Fatalf("parseTaken = %v; want %v", got, want)
		}
	}
}

func TestHostsFile(t *testing.T) {
	p := netip.MustParsePrefix("10.201.9.0/24")
	got := HostsFile(p, 3, 1, false)
	want := "127.0.0.1\tlocalhost\n127.0.1.1\tnode2\n10.201.9.254\tfront\n10.201.9.1\tnode1\n10.201.9.3\tnode3\n::1\tlocalhost ip6-localhost ip6-loopback\n"
	if got != want {
		t.Fatalf("HostsFile(node2) =\n%s\nwant\n%s", got, want)
	}
	self := HostsFile(p, 3, 1, true)
	if strings.Contains(self, "127.0.1.1") || !strings.Contains(self, "10.201.9.2\tnode2\n") {
		t.Fatalf("HostsFile with SelfAddr =\n%s\nwant node2 at 10.201.9.2 and no 127.0.1.1", self)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []Config{
		{Hosts: 0}, {Hosts: MaxHosts + 1},
		{Hosts: 2, Subnet: netip.MustParsePrefix("10.201.0.0/16")},
		{Hosts: 2, Subnet: netip.MustParsePrefix("10.201.0.5/24")},
		{Hosts: 2, Subnet: netip.MustParsePrefix("fd00::/120")},
	} {
		err := c.Validate()
		var ce *ConfigError
		if !errors.Is(err, ErrConfig) || !errors.As(err, &ce) {
			t.Errorf("Validate(%+v) = %v; want a *ConfigError", c, err)
		}
	}
}

// An ip command about an object removed since (a veth that went with its
// peer) counts as done, whatever words the kernel uses.
func TestGone(t *testing.T) {
	for out, want := range map[string]bool{
		`Cannot find device "x-v2"`:                                true,
		"RTNETLINK answers: No such device":                        true,
		"Cannot open network namespace: No such file or directory": true,
		"RTNETLINK answers: Operation not permitted":               false,
	} {
		if got := gone(&CmdError{Output: out}); got != want {
			t.Errorf("gone(%q) = %v, want %v", out, got, want)
		}
	}
	if gone(errors.New("No such device")) {
		t.Errorf("gone of an error that is not a *CmdError = true")
	}
}
