package job

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// VarAdvertiseHost names the variable that overrides the address a process
// gives the others for its listeners (data plane, Raft, control): a host
// name or IP address of this host that every other host can reach.
const VarAdvertiseHost = "PGAS_ADVERTISE_HOST"

// advertise turns a listener's address into one the other processes can
// dial. A listener bound to one address (loopback, for a one-host job)
// is given as it is. A wildcard listener (the rendezvous is not on
// loopback, so the job may span hosts) is given with PGAS_ADVERTISE_HOST
// when set, else with the source address of this host's route to the
// rendezvous. That route is loopback when the rendezvous's name resolves
// to this very host through /etc/hosts (Debian maps the own hostname to
// 127.0.1.1), and a loopback address is useless to other hosts: then the
// address of an interface that is up is taken, the one of the default
// route first. With none, it is an error that names PGAS_ADVERTISE_HOST.
func advertise(listen, rendezvous string) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil || (host != "0.0.0.0" && host != "::") {
		return listen, nil
	}
	if v := strings.TrimSpace(os.Getenv(VarAdvertiseHost)); v != "" {
		return net.JoinHostPort(v, port), nil
	}
	src := routeSource(rendezvous)
	if src != nil && !src.IsLoopback() && !src.IsUnspecified() {
		return net.JoinHostPort(src.String(), port), nil
	}
	ifs, err := localInterfaces()
	if err == nil {
		if ip := pickAddr(ifs, defaultRouteIface(readFile("/proc/net/route"))); ip != nil {
			return net.JoinHostPort(ip.String(), port), nil
		}
	}
	route := "no route"
	if src != nil {
		route = "route through loopback (" + src.String() + ")"
	}
	return "", fmt.Errorf("pgas: this host has a %s to the rendezvous %s (PGAS_RENDEZVOUS) and no other interface with an address is up, "+
		"so other hosts could not reach this process: set %s to an address of this host that the other hosts can reach, "+
		"or, for a job on this host only, use PGAS_RENDEZVOUS=127.0.0.1:PORT", route, rendezvous, VarAdvertiseHost)
}

// routeSource is the local address the kernel would send from to reach
// hostport (a UDP "dial" sends nothing), or nil when it cannot be told.
func routeSource(hostport string) net.IP {
	c, err := net.Dial("udp", hostport)
	if err != nil {
		return nil
	}
	defer c.Close()
	if a, ok := c.LocalAddr().(*net.UDPAddr); ok {
		return a.IP
	}
	return nil
}

// ifaceAddrs is what pickAddr needs to know of one network interface.
type ifaceAddrs struct {
	Name     string
	Up       bool
	Loopback bool
	IPs      []net.IP
}

func localInterfaces() ([]ifaceAddrs, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	out := make([]ifaceAddrs, 0, len(ifs))
	for _, i := range ifs {
		ia := ifaceAddrs{Name: i.Name, Up: i.Flags&net.FlagUp != 0, Loopback: i.Flags&net.FlagLoopback != 0}
		addrs, err := i.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				ia.IPs = append(ia.IPs, n.IP)
			}
		}
		out = append(out, ia)
	}
	return out, nil
}

// pickAddr chooses the address to advertise among the interfaces: one
// that is up and not loopback, with a unicast address that is neither
// loopback nor link-local; the default route's interface before the others,
// IPv4 before IPv6, then in the order given. nil when there is none.
func pickAddr(ifs []ifaceAddrs, defIface string) net.IP {
	var best net.IP
	bestScore := -1
	for _, i := range ifs {
		if !i.Up || i.Loopback {
			continue
		}
		for _, ip := range i.IPs {
			if ip.IsLoopback() || ip.IsUnspecified() || ip.IsLinkLocalUnicast() || ip.IsMulticast() {
				continue
			}
			score := 0
			if i.Name == defIface && defIface != "" {
				score += 2
			}
			if ip.To4() != nil {
				score++
			}
			if score > bestScore {
				best, bestScore = ip, score
			}
		}
	}
	return best
}

// defaultRouteIface reads the text of /proc/net/route and returns the
// interface of the IPv4 default route with the lowest metric ("" if none).
func defaultRouteIface(table string) string {
	iface, metric := "", -1
	sc := bufio.NewScanner(strings.NewReader(table))
	for first := true; sc.Scan(); first = false {
		f := strings.Fields(sc.Text())
		if first || len(f) < 8 {
			continue // the header, or a short line
		}
		flags, err1 := strconv.ParseUint(f[3], 16, 32)
		m, err2 := strconv.Atoi(f[6])
		if err1 != nil || err2 != nil || f[1] != "00000000" || f[7] != "00000000" || flags&1 == 0 {
			continue
		}
		if metric < 0 || m < metric {
			iface, metric = f[0], m
		}
	}
	return iface
}

func readFile(name string) string {
	b, err := os.ReadFile(name)
	if err != nil {
		return ""
	}
	return string(b)
}
