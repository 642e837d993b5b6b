package simhost

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Every kernel object of a cluster is named after the cluster's id,
// "gh" + the owner's pid in base 36 + "-" + a per-process sequence number
// in base 36 (e.g. "gh2lfl-0"): the bridge is ID-b, the root side of host
// i's veth pair ID-v<i>, the namespace ID-node<i+1>. Base 36 keeps the
// interface names within the kernel's 15 characters.
const namePrefix = "gh"

// clusterID is the name stem of the seq-th cluster of process pid.
func clusterID(pid, seq int) string {
	return namePrefix + strconv.FormatInt(int64(pid), 36) + "-" + strconv.FormatInt(int64(seq), 36)
}

// ownerOf parses the pid out of a name that starts with a cluster id; ok
// is false for a name of any other form.
func ownerOf(name string) (pid int, id string, ok bool) {
	rest, found := strings.CutPrefix(name, namePrefix)
	if !found {
		return 0, "", false
	}
	p, rest, found := strings.Cut(rest, "-")
	if !found || p == "" {
		return 0, "", false
	}
	seq, _, _ := strings.Cut(rest, "-")
	if seq == "" {
		return 0, "", false
	}
	n, err := strconv.ParseInt(p, 36, 64)
	if err != nil || n <= 0 || strconv.FormatInt(n, 36) != p {
		return 0, "", false
	}
	if s, err := strconv.ParseInt(seq, 36, 64); err != nil || s < 0 || strconv.FormatInt(s, 36) != seq {
		return 0, "", false
	}
	return int(n), namePrefix + p + "-" + seq, true
}

func bridgeName(id string) string      { return id + "-b" }
func vethName(id string, i int) string { return id + "-v" + strconv.FormatInt(int64(i), 36) }
func peerName(id string, i int) string { return id + "-p" + strconv.FormatInt(int64(i), 36) }
func nsName(id string, i int) string   { return id + "-" + hostName(i) }
func hostName(i int) string            { return "node" + strconv.Itoa(i+1) }
func hostAddr(p netip.Prefix, i int) netip.Addr {
	a := p.Addr().As4()
	a[3] = byte(i + 1)
	return netip.AddrFrom4(a)
}

// frontAddr is the root namespace's address on the bridge.
func frontAddr(p netip.Prefix) netip.Addr {
	a := p.Addr().As4()
	a[3] = 254
	return netip.AddrFrom4(a)
}

// FrontName is the name every host resolves to the root namespace's
// address on the bridge (where a front end such as gaspirun listens).
const FrontName = "front"

// maxIfName is the longest interface name the kernel takes (IFNAMSIZ - 1).
const maxIfName = 15

// checkNames reports an interface name of cluster id with n hosts that
// would be too long.
func checkNames(id string, n int) error {
	for _, name := range []string{bridgeName(id), vethName(id, n-1), peerName(id, n-1)} {
		if len(name) > maxIfName {
			return fmt.Errorf("simhost: interface name %q is longer than %d characters", name, maxIfName)
		}
	}
	return nil
}

// Subnets are drawn from 10.200.0.0/24 .. 10.249.255.0/24.
const (
	subnetFirst = 200 // second octet of the first slot
	subnetSlots = 50 * 256
)

// slotPrefix is the /24 of slot s (0 <= s < subnetSlots).
func slotPrefix(s int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(subnetFirst + s/256), byte(s % 256), 0}), 24)
}

// startSlot spreads the first probe of cluster seq of process pid over the
// slots, so that concurrent processes rarely start on the same one.
func startSlot(pid, seq int) int {
	h := uint64(pid)*0x9E3779B97F4A7C15 + uint64(seq)*0xBF58476D1CE4E5B9
	h ^= h >> 31
	return int(h % subnetSlots)
}

// ChooseSubnet returns the first /24 slot at or after start (wrapping)
// that overlaps none of taken, or ErrNoSubnet.
func ChooseSubnet(taken []netip.Prefix, start int) (netip.Prefix, error) {
	start = ((start % subnetSlots) + subnetSlots) % subnetSlots
	for k := range subnetSlots {
		p := slotPrefix((start + k) % subnetSlots)
		free := true
		for _, t := range taken {
			if t.Overlaps(p) {
				free = false
				break
			}
		}
		if free {
			return p, nil
		}
	}
	return netip.Prefix{}, ErrNoSubnet
}

// HostsFile is the /etc/hosts that host self (0-based) of an n-host
// cluster on subnet p sees: localhost, the front end, every other host by
// its address, and itself at 127.0.1.1 as Debian writes it (or at its
// bridge address with selfAddr).
func HostsFile(p netip.Prefix, n, self int, selfAddr bool) string {
	var b strings.Builder
	b.WriteString("127.0.0.1\tlocalhost\n")
	if !selfAddr {
		fmt.Fprintf(&b, "127.0.1.1\t%s\n", hostName(self))
	}
	fmt.Fprintf(&b, "%s\t%s\n", frontAddr(p), FrontName)
	for i := range n {
		if i == self && !selfAddr {
			continue
		}
		fmt.Fprintf(&b, "%s\t%s\n", hostAddr(p, i), hostName(i))
	}
	b.WriteString("::1\tlocalhost ip6-localhost ip6-loopback\n")
	return b.String()
}

// parseTaken reads the prefixes in the output of `ip -4 -o addr show`
// (the fourth field, e.g. 192.0.2.2/24) and `ip -4 route show` (the first
// field, e.g. 10.0.0.0/8 or a bare address); other words are skipped.
func parseTaken(addrOut, routeOut string) []netip.Prefix {
	var out []netip.Prefix
	add := func(s string) {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
		} else if a, err := netip.ParseAddr(s); err == nil {
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	for _, l := range strings.Split(addrOut, "\n") {
		if f := strings.Fields(l); len(f) >= 4 && f[2] == "inet" {
			add(f[3])
		}
	}
	for _, l := range strings.Split(routeOut, "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		if f[0] == "local" || f[0] == "broadcast" || f[0] == "unicast" {
			f = f[1:]
		}
		if len(f) > 0 {
			add(f[0])
		}
	}
	return out
}
