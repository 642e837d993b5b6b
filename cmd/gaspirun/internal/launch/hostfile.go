package launch

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
)

// HostSlots is one host a job may use and how many of its processes it may
// run.
type HostSlots struct {
	// Name is what the back end is given to reach the host (an ssh
	// destination, a Slurm node name); it is also the processes' PGAS_HOST.
	Name string
	// Slots is the number of processes the host may run, at least 1.
	Slots int
}

// maxSlots bounds slots= on one line (a typo such as slots=40000000 would
// otherwise make a job of millions of processes look placeable).
const maxSlots = MaxProcs

// ReadHostfile reads and parses the hostfile at path (see ParseHostfile).
func ReadHostfile(path string) ([]HostSlots, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &FlagError{Flag: "--hostfile", Value: path, Problem: "cannot be read: " + pathErr(err),
			Fix: "give a file with one host per line, e.g. \"node1 slots=4\""}
	}
	defer f.Close()
	return ParseHostfile(f, path)
}

// pathErr is err without the path it repeats.
func pathErr(err error) string {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err.Error()
	}
	return err.Error()
}

// ParseHostfile parses a hostfile in Open MPI's format: one host per line,
// optionally followed by slots=N (default 1) and max_slots=M (accepted,
// checked against slots, and otherwise ignored: gaspirun never places more
// than slots processes on a host). "#" starts a comment; blank lines are
// skipped. A host listed on several lines gets the sum of their slots, as
// in Open MPI. name is used in errors, which are *HostfileError values
// naming the line.
func ParseHostfile(r io.Reader, name string) ([]HostSlots, error) {
	var hosts []HostSlots
	index := map[string]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		body, _, _ := strings.Cut(text, "#")
		fields := strings.Fields(body)
		if len(fields) == 0 {
			continue
		}
		bad := func(problem, fix string) error {
			return &HostfileError{File: name, Line: line, Text: strings.TrimSpace(text), Problem: problem, Fix: fix}
		}
		host := fields[0]
		if strings.Contains(host, "=") {
			return nil, bad("the line starts with a setting, not a host name", "put the host name first, e.g. \"node1 slots=4\"")
		}
		if err := checkHostName(host); err != "" {
			return nil, bad(fmt.Sprintf("host %q %s", host, err), "write a host name or address, e.g. node1 or 10.0.0.5")
		}
		slots, maxS := 1, -1
		seen := map[string]bool{}
		for _, f := range fields[1:] {
			k, v, ok := strings.Cut(f, "=")
			if !ok {
				return nil, bad(fmt.Sprintf("%q is not KEY=VALUE", f), "write one host per line, followed by slots=N, e.g. \"node1 slots=4\"")
			}
			if seen[k] {
				return nil, bad(k+" is given twice", "keep one "+k+"=N")
			}
			seen[k] = true
			n, err := strconv.Atoi(v)
			switch k {
			case "slots", "max_slots", "max-slots":
				if err != nil || n < 1 || n > maxSlots {
					return nil, bad(fmt.Sprintf("%s=%s: not a whole number from 1 to %d", k, v, maxSlots), "write e.g. "+k+"=4")
				}
				if k == "slots" {
					slots = n
				} else {
					maxS = n
				}
			default:
				return nil, bad(fmt.Sprintf("unknown setting %q", k), "only slots=N and max_slots=N are understood")
			}
		}
		if maxS >= 0 && maxS < slots {
			return nil, bad(fmt.Sprintf("max_slots=%d is below slots=%d", maxS, slots), "make max_slots at least slots, or drop it")
		}
		if i, ok := index[host]; ok {
			hosts[i].Slots += slots
			continue
		}
		index[host] = len(hosts)
		hosts = append(hosts, HostSlots{Name: host, Slots: slots})
	}
	if err := sc.Err(); err != nil {
		return nil, &FlagError{Flag: "--hostfile", Value: name, Problem: "cannot be read: " + err.Error(),
			Fix: "keep lines under 64 KiB"}
	}
	if len(hosts) == 0 {
		return nil, &FlagError{Flag: "--hostfile", Value: name, Problem: "lists no host",
			Fix: "write one host per line, e.g. \"node1 slots=4\" (# starts a comment)"}
	}
	return hosts, nil
}

// checkHostName returns why h cannot be a host name, or "". A name is
// handed to ssh or srun as an argument and becomes PGAS_HOST, so it may not
// look like an option or hold characters a shell or a label would choke on.
func checkHostName(h string) string {
	if strings.HasPrefix(h, "-") {
		return "starts with '-' (it would be read as an option)"
	}
	if len(h) > 255 {
		return "is longer than 255 bytes"
	}
	for _, r := range h {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case strings.ContainsRune(".-_:@%[]", r):
		default:
			return fmt.Sprintf("has the character %q", r)
		}
	}
	return ""
}

// AllLocal reports whether every host of hosts is this machine by name
// (localhost, a loopback address, or its host name), which gaspirun runs
// without ssh, as Open MPI does.
func AllLocal(hosts []HostSlots) bool {
	self, _ := os.Hostname()
	for _, h := range hosts {
		switch {
		case h.Name == "localhost", h.Name == self && self != "":
		case net.ParseIP(h.Name) != nil && net.ParseIP(h.Name).IsLoopback():
		default:
			return false
		}
	}
	return true
}

// ParseHostList parses the hosts of --host as Open MPI's --host: host names
// separated by commas, each with one slot or, written host:N, N slots. A
// host listed twice gets the sum, as in a hostfile. An IPv6 address takes
// slots only in brackets ([fe80::1]:2).
func ParseHostList(s string) ([]HostSlots, error) {
	var hosts []HostSlots
	index := map[string]int{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		bad := func(problem string) error {
			return &FlagError{Flag: "--host", Value: s, Problem: problem,
				Fix: "list hosts separated by commas, each with :N for N slots, e.g. --host node1,node2:4"}
		}
		if item == "" {
			return nil, bad("has an empty host name")
		}
		host, slots := item, 1
		if i := strings.LastIndexByte(item, ':'); i > 0 && (strings.Count(item, ":") == 1 || item[i-1] == ']') {
			n, err := strconv.Atoi(item[i+1:])
			if err != nil || n < 1 || n > maxSlots {
				return nil, bad(fmt.Sprintf("%q: slots %q is not a whole number from 1 to %d", item, item[i+1:], maxSlots))
			}
			host, slots = item[:i], n
		}
		if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
			host = host[1 : len(host)-1]
		}
		if err := checkHostName(host); err != "" {
			return nil, bad(fmt.Sprintf("host %q %s", host, err))
		}
		if i, ok := index[host]; ok {
			hosts[i].Slots += slots
			continue
		}
		index[host] = len(hosts)
		hosts = append(hosts, HostSlots{Name: host, Slots: slots})
	}
	return hosts, nil
}

// FormatHostList writes hosts as --host takes them.
func FormatHostList(hosts []HostSlots) string {
	s := make([]string, len(hosts))
	for i, h := range hosts {
		s[i] = h.Name
		if strings.Contains(h.Name, ":") {
			s[i] = "[" + h.Name + "]"
		}
		if h.Slots != 1 {
			s[i] += ":" + strconv.Itoa(h.Slots)
		}
	}
	return strings.Join(s, ",")
}
