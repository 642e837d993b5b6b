package launch

import (
	"fmt"
	"strconv"
	"strings"
)

// maxExpand bounds the hosts one Slurm host list may expand to.
const maxExpand = 1 << 16

// SlurmHosts returns the hosts and slots of the Slurm allocation gaspirun
// runs in: the nodes of SLURM_JOB_NODELIST (or SLURM_NODELIST), each with
// its tasks from SLURM_TASKS_PER_NODE (e.g. "2(x3),1"). lookup is
// os.LookupEnv or a test's.
func SlurmHosts(lookup func(string) (string, bool)) ([]HostSlots, error) {
	get := func(k string) string {
		v, _ := lookup(k)
		return strings.TrimSpace(v)
	}
	if get("SLURM_JOB_ID") == "" {
		return nil, &FlagError{Flag: "--launcher", Value: string(LauncherSlurm), Problem: "not inside a Slurm allocation (SLURM_JOB_ID is unset)",
			Fix: "run gaspirun inside sbatch or salloc, or drop --launcher slurm"}
	}
	listVar := "SLURM_JOB_NODELIST"
	list := get(listVar)
	if list == "" {
		listVar = "SLURM_NODELIST"
		list = get(listVar)
	}
	if list == "" {
		return nil, &FlagError{Flag: "SLURM_JOB_NODELIST", Problem: "is unset inside a Slurm allocation",
			Fix: "run gaspirun in the batch script or the salloc shell, not by hand with SLURM_JOB_ID set"}
	}
	names, err := ExpandHostlist(list)
	if err != nil {
		return nil, &FlagError{Flag: listVar, Value: list, Problem: err.Error()}
	}
	tpn := get("SLURM_TASKS_PER_NODE")
	if tpn == "" {
		return nil, &FlagError{Flag: "SLURM_TASKS_PER_NODE", Problem: "is unset inside a Slurm allocation",
			Fix: "ask sbatch or salloc for tasks, e.g. sbatch -n 6"}
	}
	slots, err := ParseTasksPerNode(tpn)
	if err != nil {
		return nil, &FlagError{Flag: "SLURM_TASKS_PER_NODE", Value: tpn, Problem: err.Error()}
	}
	if len(slots) != len(names) {
		return nil, &FlagError{Flag: "SLURM_TASKS_PER_NODE", Value: tpn,
			Problem: fmt.Sprintf("gives %d nodes but %s=%s names %d", len(slots), listVar, list, len(names))}
	}
	hosts := make([]HostSlots, len(names))
	for i := range names {
		if why := checkHostName(names[i]); why != "" {
			return nil, &FlagError{Flag: listVar, Value: list, Problem: fmt.Sprintf("node %q %s", names[i], why)}
		}
		hosts[i] = HostSlots{Name: names[i], Slots: slots[i]}
	}
	return hosts, nil
}

// ExpandHostlist expands a Slurm host list such as "node[01-03,7],gpu1"
// into node01, node02, node03, node7, gpu1. Several bracket groups in one
// name ("rack[1-2]-n[1-2]") expand to their product; zero padding is kept.
func ExpandHostlist(list string) ([]string, error) {
	var out []string
	depth, start := 0, 0
	for i := 0; i <= len(list); i++ {
		if i < len(list) {
			switch list[i] {
			case '[':
				depth++
				continue
			case ']':
				depth--
				if depth < 0 {
					return nil, fmt.Errorf("unbalanced ']' at byte %d", i)
				}
				continue
			case ',':
				if depth > 0 {
					continue
				}
			default:
				continue
			}
		}
		if depth != 0 {
			return nil, fmt.Errorf("unbalanced '['")
		}
		item := list[start:i]
		start = i + 1
		if item == "" {
			continue
		}
		names, err := expandOne(item)
		if err != nil {
			return nil, err
		}
		out = append(out, names...)
		if len(out) > maxExpand {
			return nil, fmt.Errorf("expands to more than %d hosts", maxExpand)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("names no host")
	}
	return out, nil
}

// expandOne expands one name with bracket groups.
func expandOne(item string) ([]string, error) {
	open := strings.IndexByte(item, '[')
	if open < 0 {
		return []string{item}, nil
	}
	end := strings.IndexByte(item[open:], ']')
	if end < 0 {
		return nil, fmt.Errorf("%q: unbalanced '['", item)
	}
	end += open
	prefix, ranges, rest := item[:open], item[open+1:end], item[end+1:]
	tails, err := expandOne(rest)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range strings.Split(ranges, ",") {
		lo, hi, isRange := strings.Cut(r, "-")
		if !isRange {
			hi = lo
		}
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if err1 != nil || err2 != nil || a < 0 || b < a || lo == "" {
			return nil, fmt.Errorf("%q: bad range %q", item, r)
		}
		if b-a > maxExpand {
			return nil, fmt.Errorf("%q: range %q is too long", item, r)
		}
		width := len(lo)
		for n := a; n <= b; n++ {
			num := fmt.Sprintf("%0*d", width, n)
			for _, t := range tails {
				out = append(out, prefix+num+t)
			}
			if len(out) > maxExpand {
				return nil, fmt.Errorf("expands to more than %d hosts", maxExpand)
			}
		}
	}
	return out, nil
}

// ParseTasksPerNode parses SLURM_TASKS_PER_NODE, e.g. "2(x3),1" is
// 2, 2, 2, 1.
func ParseTasksPerNode(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		count, times := part, "1"
		if i := strings.IndexByte(part, '('); i >= 0 {
			if !strings.HasSuffix(part, ")") || !strings.HasPrefix(part[i+1:], "x") {
				return nil, fmt.Errorf("%q: expected N or N(xM)", part)
			}
			count, times = part[:i], part[i+2:len(part)-1]
		}
		n, err1 := strconv.Atoi(count)
		m, err2 := strconv.Atoi(times)
		if err1 != nil || err2 != nil || n < 0 || m < 1 || m > maxExpand {
			return nil, fmt.Errorf("%q: expected N or N(xM)", part)
		}
		for range m {
			out = append(out, n)
		}
		if len(out) > maxExpand {
			return nil, fmt.Errorf("more than %d nodes", maxExpand)
		}
	}
	return out, nil
}
