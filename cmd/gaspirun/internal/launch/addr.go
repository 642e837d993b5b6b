package launch

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// resolveTimeout bounds one host's name lookup (DNS, or ssh -G).
const resolveTimeout = 5 * time.Second

// rendezvousBind returns where the rendezvous listens (HOST:PORT, port 0
// for any) and the host name or address the processes are told to dial
// (empty: the listener's own address).
//
// A local job listens on 127.0.0.1. A multi-host job listens on
// cfg.RendezvousAddr if given (on every interface when it is a name);
// otherwise on the local address that routes to the first host that is
// not loopback here. A host name that does not resolve here but is an
// alias in the ssh configuration is looked up with "ssh -G". When every
// host is this machine's loopback, 127.0.0.1 again.
func rendezvousBind(ctx context.Context, cfg Config, kind LauncherKind, hosts []HostSlots) (bind, advertise string, err error) {
	if kind == LauncherLocal {
		return "127.0.0.1:0", "", nil
	}
	if cfg.RendezvousAddr != "" {
		host, port := cfg.RendezvousAddr, "0"
		if h, p, err := net.SplitHostPort(cfg.RendezvousAddr); err == nil {
			host, port = h, p
		}
		if net.ParseIP(host) != nil {
			return net.JoinHostPort(host, port), "", nil
		}
		return net.JoinHostPort("0.0.0.0", port), host, nil
	}
	var unresolved []string
	for _, h := range hosts {
		ips, err := resolveHost(ctx, cfg, kind, h.Name)
		if err != nil {
			unresolved = append(unresolved, h.Name)
			continue
		}
		for _, ip := range ips {
			if ip.IsLoopback() {
				continue
			}
			local, err := routeFrom(ip)
			if err != nil {
				continue
			}
			return net.JoinHostPort(local.String(), "0"), "", nil
		}
	}
	if len(unresolved) > 0 {
		return "", "", &FlagError{Flag: "--rendezvous-addr",
			Problem: fmt.Sprintf("gaspirun cannot tell which of its addresses the hosts reach: %s %s not resolve here, and no other host has a route",
				strings.Join(unresolved, ", "), plural(len(unresolved), "does", "do")),
			Fix: "give --rendezvous-addr with an address of this machine that every host can reach, e.g. --rendezvous-addr 10.0.0.1"}
	}
	return "127.0.0.1:0", "", nil
}

// resolveHost returns the addresses of host: an address as it is, else
// through the resolver, else (for ssh) through the ssh configuration.
func resolveHost(ctx context.Context, cfg Config, kind LauncherKind, host string) ([]net.IP, error) {
	if ip := net.ParseIP(strings.Trim(host, "[]")); ip != nil {
		return []net.IP{ip}, nil
	}
	name := host
	if _, after, ok := strings.Cut(name, "@"); ok {
		name = after
	}
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	ips, err := net.DefaultResolver.LookupIP(ctx, "ip", name)
	if err == nil && len(ips) > 0 {
		return ips, nil
	}
	if kind == LauncherSlurm {
		return slurmNodeAddr(ctx, host, err)
	}
	ssh := cfg.SSH
	if len(ssh) == 0 {
		ssh = []string{"ssh"}
	}
	if filepath.Base(ssh[0]) != "ssh" {
		return nil, err
	}
	// ssh -G prints the configuration it would use, "hostname" included.
	args := append(append([]string{}, ssh[1:]...), "-G", host)
	out, gerr := exec.CommandContext(ctx, ssh[0], args...).Output()
	if gerr != nil {
		return nil, err
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if hn, ok := strings.CutPrefix(sc.Text(), "hostname "); ok && hn != name {
			if ip := net.ParseIP(hn); ip != nil {
				return []net.IP{ip}, nil
			}
			return net.DefaultResolver.LookupIP(ctx, "ip", hn)
		}
	}
	return nil, err
}

// slurmNodeAddr asks Slurm for a node's address (NodeAddr), for node names
// that do not resolve here.
func slurmNodeAddr(ctx context.Context, node string, lookupErr error) ([]net.IP, error) {
	out, err := exec.CommandContext(ctx, "scontrol", "show", "node", "-o", node).Output()
	if err != nil {
		return nil, lookupErr
	}
	for _, f := range strings.Fields(string(out)) {
		if addr, ok := strings.CutPrefix(f, "NodeAddr="); ok {
			if ip := net.ParseIP(addr); ip != nil {
				return []net.IP{ip}, nil
			}
			return net.DefaultResolver.LookupIP(ctx, "ip", addr)
		}
	}
	return nil, lookupErr
}

// routeFrom is the local address the kernel would send from to reach ip
// (a UDP "connection" sends nothing).
func routeFrom(ip net.IP) (net.IP, error) {
	c, err := net.Dial("udp", net.JoinHostPort(ip.String(), "9"))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP, nil
}
