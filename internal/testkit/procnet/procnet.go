// Package procnet finds the TCP listeners of processes through /proc
// (Linux), for tests and test programs that must reach a process that does
// not print its addresses.
package procnet

import (
	"bufio"
	"encoding/hex"
	"net"
	"os"
	"strconv"
	"strings"
)

// ListeningAddrs returns the TCP addresses ("ip:port") on which the
// processes pids listen: the socket inodes among each one's descriptors
// (/proc/<pid>/fd), matched with the listening sockets of its network
// namespace (/proc/<pid>/net/tcp and tcp6). A wildcard address is
// reported as loopback. Processes that ended are skipped.
func ListeningAddrs(pids []int) []string {
	var out []string
	seen := map[string]bool{}
	for _, pid := range pids {
		for _, a := range listening(pid) {
			if !seen[a] {
				seen[a] = true
				out = append(out, a)
			}
		}
	}
	return out
}

func listening(pid int) []string {
	proc := "/proc/" + strconv.Itoa(pid)
	ents, err := os.ReadDir(proc + "/fd")
	if err != nil {
		return nil
	}
	inodes := map[string]bool{}
	for _, e := range ents {
		l, err := os.Readlink(proc + "/fd/" + e.Name())
		if err != nil {
			continue
		}
		if ino, ok := strings.CutPrefix(l, "socket:["); ok {
			inodes[strings.TrimSuffix(ino, "]")] = true
		}
	}
	var out []string
	for _, file := range []string{proc + "/net/tcp", proc + "/net/tcp6"} {
		f, err := os.Open(file)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fl := strings.Fields(sc.Text())
			// sl local rem st tx:rx tr:when retrnsmt uid timeout inode
			if len(fl) < 10 || fl[3] != "0A" || !inodes[fl[9]] {
				continue
			}
			if a, ok := parseProcAddr(fl[1]); ok {
				out = append(out, a)
			}
		}
		f.Close()
	}
	return out
}

// parseProcAddr decodes /proc/net/tcp's "0100007F:975B" (an address in
// host order per 32-bit word, then the port in hex).
func parseProcAddr(s string) (string, bool) {
	h, p, ok := strings.Cut(s, ":")
	if !ok {
		return "", false
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return "", false
	}
	raw, err := hex.DecodeString(h)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return "", false
	}
	ip := make(net.IP, len(raw))
	for i := 0; i < len(raw); i += 4 {
		ip[i], ip[i+1], ip[i+2], ip[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	if ip.IsUnspecified() {
		if len(raw) == 4 {
			ip = net.IPv4(127, 0, 0, 1)
		} else {
			ip = net.IPv6loopback
		}
	}
	return net.JoinHostPort(ip.String(), strconv.FormatUint(port, 10)), true
}
